"""kv_room: a cache layer grows in place, holds exactly what concatenation would, and survives being replaced."""

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from policies.kv_room import append_kv, select_rows
from policies.turn_cache import compact


def _chunk(rows, width, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, width, 8, generator=g), torch.randn(rows, 2, width, 8, generator=g)


def test_appends_write_in_place_and_hold_what_concatenation_would():
    layer = DynamicLayer()
    ref_k = ref_v = None
    pointers = []
    for step, width in enumerate([30, 5, 1, 1, 7]):
        k, v = _chunk(3, width, step)
        keys, values = append_kv(layer, k, v)
        ref_k = k if ref_k is None else torch.cat([ref_k, k], dim=2)
        ref_v = v if ref_v is None else torch.cat([ref_v, v], dim=2)
        assert torch.equal(keys, ref_k) and torch.equal(values, ref_v)
        assert layer.keys is keys and layer.get_seq_length() == ref_k.shape[2]
        pointers.append(keys.data_ptr())
    assert len(set(pointers)) == 1  # the first buffer had room for every later turn: no copy


def test_a_replaced_layer_moves_into_a_new_buffer_and_stays_right():
    layer = DynamicLayer()
    k, v = _chunk(4, 20, 0)
    append_kv(layer, k, v)
    layer.batch_select_indices(torch.tensor([3, 1]))  # transformers' own selection replaces the tensors
    k2, v2 = _chunk(2, 3, 1)
    keys, values = append_kv(layer, k2, v2)
    assert torch.equal(keys, torch.cat([k[[3, 1]], k2], dim=2))
    assert torch.equal(values, torch.cat([v[[3, 1]], v2], dim=2))


def test_selected_rows_keep_room_and_equal_transformers_selection():
    cache, plain = DynamicCache(), DynamicCache()
    k, v = _chunk(5, 12, 2)
    for c in (cache, plain):
        c.update(k, v, 0)
    index = torch.tensor([4, 0, 2])
    select_rows(cache, index)
    plain.batch_select_indices(index)
    assert torch.equal(cache.layers[0].keys, plain.layers[0].keys)
    k2, v2 = _chunk(3, 2, 3)
    before = cache.layers[0].keys.data_ptr()
    keys, _ = append_kv(cache.layers[0], k2, v2)
    assert keys.data_ptr() == before  # written into the room the selection left
    assert torch.equal(keys, torch.cat([plain.layers[0].keys, k2], dim=2))


def test_a_few_holes_stay_and_many_are_compacted():
    cache = DynamicCache()
    k, v = _chunk(2, 64, 4)
    cache.update(k, v, 0)
    mask = torch.ones(2, 64, dtype=torch.long)
    mask[0, 10] = mask[1, 20] = 0  # one hole per row: nothing every row could drop
    assert compact(cache, mask) is mask and cache.layers[0].keys.shape[2] == 64
    mask[:, 30:42] = 0  # twelve columns no row uses
    kept = compact(cache, mask)
    assert kept.shape == (2, 51) and torch.equal(kept.sum(-1), mask.sum(-1))
    real = mask[0].bool()
    assert torch.equal(cache.layers[0].keys[0][:, -int(real.sum()):], k[0][:, real])
