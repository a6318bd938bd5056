"""Rows that finished decoding leave the batch, and come back into the cache a turn cache keeps.

A `generate` call decodes every row until its action ends; rows end at different steps (an ``accept``
is one decision, an offer a dozen), so once enough of them are done the rest decode without them
(`DecodingRows` decides when: sooner when the cache's buffers are the batch's own and the busy rows move
forward in place, later out of a turn cache's when finished rows still in the batch cost no attention).
Taking them out must not cost what it saves: the cache of a long conversation is far larger than what one
decoding step adds to it.

So the cache as it stood when rows first left (the *home*: every row, in call order) is kept as it is,
untouched: only the rows still deciding are copied out to decode on. Rows leaving later take with them
only the columns decoded since (their *tail*). Putting back writes each group's tail after the home's
columns, in the home's own buffer when it has room (`kv_room`), so a turn costs copies in proportion to
what it decoded, not to the conversation. Rows with a shorter tail leave masked columns (holes) after it:
the turn cache's compaction drops them once they are worth the copy.

Left out: caches whose layers are not plain key/value layers (`rows_movable` says so; the caller keeps every
row in the batch), and giving the home's spare room back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from policies.kv_room import adopt_room, fresh_room, keep_rows, room_of, select_rows

PARK_SHARE = 4
"""Finished rows leave the decoding batch once they are 1/this of it."""
HOME_PARK_SHARE = 2
"""Where finished rows still in the batch query nothing (the lean forward), the first time rows leave a turn
cache's batch (which copies the busy rows' whole conversations out of it) waits until the finished rows are
1/this of it: the copy pays only once fewer rows are left to copy."""


def rows_movable(cache: Any) -> bool:
    """True when every layer of `cache` is a plain key/value layer whose rows can be taken out and put back."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and hasattr(cache, "batch_select_indices") and all(
        hasattr(layer, "keys") and not getattr(layer, "is_sliding", False) for layer in layers)


@dataclass
class CacheRows:
    """Some rows' columns of a cache: per layer (keys, values) [rows, heads, columns, dim], and their mask."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor


@dataclass
class Home:
    """A cache as it stood when rows first left the batch: every row's columns (views, not copies) and the
    buffers they live in, so that putting back can write after them in place."""

    rows: CacheRows
    rooms: list[tuple[torch.Tensor, torch.Tensor] | None]

    @property
    def width(self) -> int:
        return self.rows.mask.shape[1]


def home_of(cache: Any, mask: torch.Tensor) -> Home:
    """Hold `cache` (see `rows_movable`) and its mask as they are now; selecting rows afterwards gives its layers
    new tensors and leaves these alone."""
    return Home(CacheRows([(layer.keys, layer.values) for layer in cache.layers], mask),
                [room_of(layer) for layer in cache.layers])


def tail_of(cache: Any, mask: torch.Tensor, since: int, rows: Sequence[int] | None = None) -> CacheRows:
    """The columns from `since` on (what was decoded after leaving home) and their mask: of `rows` (a copy), or of
    every row as they are (`rows` None: views, no copy)."""
    if rows is None:
        return CacheRows([(layer.keys[:, :, since:], layer.values[:, :, since:]) for layer in cache.layers],
                         mask[:, since:])
    index = torch.tensor(list(rows), dtype=torch.long, device=mask.device)
    return CacheRows([(layer.keys[index, :, since:], layer.values[index, :, since:]) for layer in cache.layers],
                     mask[index, since:])


def put_rows_back(cache: Any, home: Home, groups: Sequence[tuple[Sequence[int], CacheRows]]) -> torch.Tensor:
    """Give `cache` every row of `home` again, in home order, each followed by its group's tail (the groups'
    row ids cover the home's rows once); returns the matching mask. Shorter tails end in masked zero columns."""
    start = home.width
    width = start + max(g.mask.shape[1] for _, g in groups)
    n = home.rows.mask.shape[0]
    mask = home.rows.mask.new_zeros(n, width)
    mask[:, :start] = home.rows.mask
    indexes = [torch.tensor(list(ids), dtype=torch.long, device=mask.device) for ids, _ in groups]
    for index, (_, g) in zip(indexes, groups, strict=True):
        mask[index, start:start + g.mask.shape[1]] = g.mask
    for k, layer in enumerate(cache.layers):
        held_k, held_v = home.rows.layers[k]
        room = home.rooms[k]
        if room is not None and room[0].shape[2] >= width:  # the tails go after the home's columns, in place
            keys, values = adopt_room(layer, room, width)
        else:  # no room after them: the home moves once, into a buffer with room to grow
            keys, values = fresh_room(layer, held_k, held_v, n, width, zeroed=False)
            keys[:, :, :start] = held_k
            values[:, :, :start] = held_v
        # masked columns still enter attention with weight 0: zero, never uninitialized (0 * NaN is NaN)
        keys[:, :, start:] = 0
        values[:, :, start:] = 0
        for index, (_, g) in zip(indexes, groups, strict=True):
            tail = g.mask.shape[1]
            keys[index, :, start:start + tail] = g.layers[k][0]
            values[index, :, start:start + tail] = g.layers[k][1]
    return mask


class DecodingRows:
    """The rows of one decoding call still in the batch (in cache order), and those that left with their cache's
    tail, for a turn cache to get back (`restore`).

    `for_turn_cache`: the cache is a turn cache's (its rows come back at the end; the cache as it stood is
    the home, copied out of, never written). `idle_rows_free`: finished rows still in the batch query nothing
    (the lean forward), so leaving a turn cache's batch waits for `HOME_PARK_SHARE`."""

    def __init__(self, n: int, cache: Any, for_turn_cache: bool, idle_rows_free: bool) -> None:
        self.live = list(range(n))
        self._movable = rows_movable(cache)
        self._for_turn_cache = for_turn_cache
        self._own_buffers = not for_turn_cache  # this batch alone holds the cache's buffers
        self._idle_rows_free = idle_rows_free
        self._home: Home | None = None
        self._parked: list[tuple[list[int], CacheRows]] = []

    def release(self, cache: Any, attention: torch.Tensor, next_pos: torch.Tensor, active: Sequence[bool]
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """Take the finished rows (`active[i]` False, by call row) out of the batch and its cache when enough of
        them are done; returns the mask and next positions of the rows still in it."""
        idle = [j for j, i in enumerate(self.live) if not active[i]]
        share = HOME_PARK_SHARE if self._idle_rows_free and not self._own_buffers else PARK_SHARE
        if not self._movable or not idle or share * len(idle) < len(self.live):
            return attention, next_pos
        busy = [j for j, i in enumerate(self.live) if active[i]]
        if self._for_turn_cache:
            self._home = self._home or home_of(cache, attention)
            self._parked.append(([self.live[j] for j in idle], tail_of(cache, attention, self._home.width, idle)))
        index = torch.tensor(busy, dtype=torch.long, device=attention.device)
        if self._own_buffers:  # the busy rows move to the front of the buffers, nothing allocated
            keep_rows(cache, busy)
        else:  # the home stays as it is: the busy rows are copied out of it
            select_rows(cache, index)
            self._own_buffers = True
        self.live = [self.live[j] for j in busy]
        return attention[index], next_pos[index]

    def restore(self, cache: Any, attention: torch.Tensor) -> torch.Tensor:
        """Every row of the call back in `cache`, in call order (for a turn cache); returns the matching mask."""
        if self._home is None:
            return attention
        return put_rows_back(cache, self._home, [*self._parked, (self.live, tail_of(cache, attention, self._home.width))])
