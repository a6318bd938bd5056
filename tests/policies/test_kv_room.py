"""kv_room: a cache layer grows in place, holds exactly what concatenation would, and survives being replaced."""

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

import policies.kv_room as kv_room
from policies.kv_room import append_kv, keep_rows, select_rows
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


# rows moved one copy each / in one gather
@pytest.mark.parametrize("one_by_one", [16, 0])
def test_kept_rows_move_to_the_front_of_their_own_buffer_and_equal_a_selection(monkeypatch, one_by_one):
    monkeypatch.setattr(kv_room, "KEEP_ROWS_ONE_BY_ONE", one_by_one)
    cache, plain = DynamicCache(), DynamicCache()
    k, v = _chunk(6, 12, 5)
    for c in (cache, plain):
        c.update(k, v, 0)
    select_rows(cache, torch.arange(6))  # a buffer with room, as after a turn
    buffer = cache.layers[0].keys.data_ptr()
    for rows in ([0, 2, 3, 5], [0, 3]):  # row 0 stays where it is; the others move forward
        keep_rows(cache, rows)
        plain.batch_select_indices(torch.tensor(rows))
        assert torch.equal(cache.layers[0].keys, plain.layers[0].keys)
        assert torch.equal(cache.layers[0].values, plain.layers[0].values)
        assert cache.layers[0].keys.data_ptr() == buffer  # nothing allocated
    k2, v2 = _chunk(2, 3, 6)
    keys, values = append_kv(cache.layers[0], k2, v2)
    assert keys.data_ptr() == buffer  # the next turn still appends in place
    assert torch.equal(keys, torch.cat([plain.layers[0].keys, k2], dim=2))
    assert torch.equal(values, torch.cat([plain.layers[0].values, v2], dim=2))
    with pytest.raises(ValueError, match="ascending"):
        keep_rows(cache, [1, 0])


def test_a_few_holes_stay_and_many_are_compacted():
    cache = DynamicCache()
    k, v = _chunk(2, 64, 4)
    cache.update(k, v, 0)
    mask = torch.ones(2, 64, dtype=torch.long)
    mask[0, 10] = mask[1, 20] = 0  # one hole per row: nothing every row could drop
    assert compact(cache, mask) is mask and cache.layers[0].keys.shape[2] == 64
    mask[:, 30:42] = 0  # twelve columns no row uses
    mask[1, 50:53] = 0  # and a shorter row
    kept = compact(cache, mask)
    assert kept.shape == (2, 51) and torch.equal(kept.sum(-1), mask.sum(-1))
    for row in range(2):  # each row's real columns, in order, from the left; its holes after them
        real = mask[row].bool()
        count = int(real.sum())
        assert torch.equal(kept[row], (torch.arange(51) < count).long())
        assert torch.equal(cache.layers[0].keys[row][:, :count], k[row][:, real])
        assert torch.equal(cache.layers[0].values[row][:, :count], v[row][:, real])


def test_compaction_moves_only_what_follows_the_first_hole_and_writes_in_place():
    layer_cache = DynamicCache()
    layer_cache.layers = [DynamicLayer()]
    k, v = _chunk(3, 40, 5)
    append_kv(layer_cache.layers[0], k, v)  # in a buffer with room, as a rollout's cache is
    mask = torch.ones(3, 40, dtype=torch.long)
    mask[0, 25:40] = 0  # row 0 ended early: holes after it
    mask[1, 30:35] = 0
    mask[2, 20:24] = 0
    buffer = layer_cache.layers[0].keys.data_ptr()
    kept = compact(layer_cache, mask)
    keys = layer_cache.layers[0].keys
    assert keys.data_ptr() == buffer  # the same buffer: columns before the first hole (20) never moved
    assert kept.shape == (3, 36)
    for row in range(3):
        real = mask[row].bool()
        assert torch.equal(keys[row][:, : int(real.sum())], k[row][:, real])
    k2, v2 = _chunk(3, 2, 6)
    grown, _ = append_kv(layer_cache.layers[0], k2, v2)
    assert grown.data_ptr() == buffer and torch.equal(grown[:, :, 36:], k2)  # the next turn appends in place
