"""row_parking: rows that leave the decoding batch come back after their home columns, in place, exactly."""

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

from policies.kv_room import append_kv, select_rows
from policies.row_parking import home_of, put_rows_back, tail_of


def _chunk(rows, width, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, width, 8, generator=g), torch.randn(rows, 2, width, 8, generator=g)


def _cache(rows, width, seed):
    cache = DynamicCache()
    cache.layers = [DynamicLayer()]
    k, v = _chunk(rows, width, seed)
    append_kv(cache.layers[0], k, v)  # its columns live in a buffer with room, as a rollout's do
    return cache, k, v


def test_parked_rows_come_back_in_home_order_with_their_tails_in_place():
    cache, k, v = _cache(5, 30, 0)
    mask = torch.ones(5, 30, dtype=torch.long)
    mask[3, :4] = 0  # left padding of a shorter prompt
    home_buffer = cache.layers[0].keys.data_ptr()
    home = home_of(cache, mask)
    # rows 1 and 3 finish first: the other three decode on without them (copied out of the home)
    live = [0, 2, 4]
    parked = [([1, 3], tail_of(cache, mask, home.width, [1, 3]))]
    select_rows(cache, torch.tensor(live))
    attention = mask[live]
    tails_k, tails_v = [], []
    for step in range(3):
        tk, tv = _chunk(len(live), 1, 10 + step)
        append_kv(cache.layers[0], tk, tv)
        attention = torch.cat([attention, torch.ones(len(live), 1, dtype=torch.long)], dim=1)
        tails_k.append(tk)
        tails_v.append(tv)
        if step == 0:  # row 2 finishes after one decoded column
            parked.append(([2], tail_of(cache, attention, home.width, [1])))
            select_rows(cache, torch.tensor([0, 2]))
            attention, live = attention[[0, 2]], [0, 4]
            tails_k = [t[[0, 2]] for t in tails_k]
            tails_v = [t[[0, 2]] for t in tails_v]
    mask_back = put_rows_back(cache, home, [*parked, (live, tail_of(cache, attention, home.width))])
    keys, values = cache.layers[0].keys, cache.layers[0].values
    assert keys.data_ptr() == home_buffer  # written after the home's columns, in its own buffer
    assert keys.shape[2] == 33 and mask_back.shape == (5, 33)
    assert torch.equal(keys[:, :, :30], k) and torch.equal(values[:, :, :30], v)  # every row's home, untouched
    assert torch.equal(mask_back[:, :30], mask)
    for j, row in enumerate(live):  # rows decoding to the end: three columns of their own
        assert torch.equal(keys[row, :, 30:], torch.cat([t[j:j + 1] for t in tails_k], dim=2)[0])
        assert mask_back[row, 30:].tolist() == [1, 1, 1]
    assert mask_back[2, 30:].tolist() == [1, 0, 0] and mask_back[1, 30:].tolist() == [0, 0, 0]
    assert torch.equal(keys[2, :, 30:31], _chunk(3, 1, 10)[0][1])
    # masked columns are zeros, never uninitialized memory (attention weighs them 0, and 0 * NaN is NaN)
    assert not keys[1, :, 30:].any() and not values[2, :, 31:].any()


def test_a_home_without_room_moves_once_into_a_buffer_that_has_some():
    cache = DynamicCache()
    k, v = _chunk(2, 10, 1)
    cache.update(k, v, 0)  # transformers' own layer: no spare room
    mask = torch.ones(2, 10, dtype=torch.long)
    home = home_of(cache, mask)
    parked = [([0], tail_of(cache, mask, home.width, [0]))]
    select_rows(cache, torch.tensor([1]))
    tk, tv = _chunk(1, 2, 2)
    append_kv(cache.layers[0], tk, tv)
    back = put_rows_back(cache, home, [*parked, ([1], tail_of(cache, torch.ones(1, 12, dtype=torch.long), 10))])
    keys = cache.layers[0].keys
    assert torch.equal(keys[:, :, :10], k) and torch.equal(keys[1, :, 10:], tk[0])
    assert back[0].tolist() == [1] * 10 + [0, 0]
    before = keys.data_ptr()
    grown, _ = append_kv(cache.layers[0], *_chunk(2, 1, 3))
    assert grown.data_ptr() == before  # the new buffer has room: the next turn appends in place
