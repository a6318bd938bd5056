"""Appending to a transformers KV cache layer without copying it every forward.

A `DynamicLayer` grows by `torch.cat`, which copies the layer's whole cache at every forward: in a
multi-turn rollout whose conversations run to a thousand tokens, that copy costs about as much as the
forward's arithmetic. `append_kv` keeps a buffer with spare room beside the layer and writes the new
columns into it; the layer's `keys`/`values` are views of the buffer's filled part, so everything that
reads or replaces them (`batch_select_indices`, the turn cache's compaction and row parking, the
model's own forward) works unchanged. When something replaced them (a row selection copies), the next
append moves them into a fresh buffer once.

Left out: sliding-window, static and quantized layers (the caller uses `append_kv` only on plain
dynamic layers), and giving memory back (a buffer lives as long as its layer's rows do).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer

_ROOM = "_marl_kv_room"
"""The attribute holding a layer's (keys buffer, values buffer)."""


def _room_for(width: int) -> int:
    # half again as much, and at least a decoding turn's worth: a rollout turn adds tens of columns
    return width + max(width // 2, 64)


def _holds(buffer: torch.Tensor, view: torch.Tensor) -> bool:
    """Whether `view` is the filled front of `buffer` (same storage start, rows, heads and strides)."""
    return (view.data_ptr() == buffer.data_ptr() and view.shape[:2] == buffer.shape[:2]
            and view.shape[3] == buffer.shape[3] and view.stride() == buffer.stride()
            and view.dtype == buffer.dtype and view.device == buffer.device)


def append_kv(layer: Any, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Append `keys`/`values` [rows, heads, new, dim] to a dynamic cache layer; returns the layer's whole
    keys and values (what `layer.update` returns), as views of a buffer with room to grow."""
    if not getattr(layer, "is_initialized", False):
        layer.lazy_initialization(keys, values)
    held_k, held_v = layer.keys, layer.values
    past = held_k.shape[2] if held_k.dim() == 4 else 0
    width = past + keys.shape[2]
    room = getattr(layer, _ROOM, None)
    fits = (room is not None and past > 0 and _holds(room[0], held_k) and _holds(room[1], held_v)
            and room[0].shape[2] >= width)
    if not fits:
        rows, _, _, _ = keys.shape
        buffer_k = keys.new_empty(rows, keys.shape[1], _room_for(width), keys.shape[3])
        buffer_v = values.new_empty(rows, values.shape[1], _room_for(width), values.shape[3])
        if past:
            buffer_k[:, :, :past] = held_k
            buffer_v[:, :, :past] = held_v
        room = (buffer_k, buffer_v)
        setattr(layer, _ROOM, room)
    room[0][:, :, past:width] = keys
    room[1][:, :, past:width] = values
    layer.keys, layer.values = room[0][:, :, :width], room[1][:, :, :width]
    return layer.keys, layer.values


def fresh_room(layer: Any, like_keys: torch.Tensor, like_values: torch.Tensor, rows: int, width: int,
               zeroed: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Give a dynamic cache layer new keys/values of `rows` x `width` columns (heads, dim, dtype and device as
    `like_*`), with room to grow; returns them (the layer's views) for the caller to fill in place. `zeroed`
    False leaves them unset: for a caller that writes every column."""
    make = torch.Tensor.new_zeros if zeroed else torch.Tensor.new_empty
    room = tuple(make(like, (rows, like.shape[1], _room_for(width), like.shape[3]))
                 for like in (like_keys, like_values))
    return adopt_room(layer, room, width)


def room_of(layer: Any) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The (keys, values) buffers a layer's keys and values are the filled front of, or None."""
    room = getattr(layer, _ROOM, None)
    keys, values = getattr(layer, "keys", None), getattr(layer, "values", None)
    if room is None or not isinstance(keys, torch.Tensor) or keys.dim() != 4 or not isinstance(values, torch.Tensor):
        return None
    return room if _holds(room[0], keys) and _holds(room[1], values) else None


def adopt_room(layer: Any, room: tuple[torch.Tensor, torch.Tensor], width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Make a layer's keys/values the first `width` columns of `room` (buffers of its rows, heads and dim, at
    least that wide); returns them for the caller to fill in place."""
    setattr(layer, _ROOM, room)
    layer.keys, layer.values = room[0][:, :, :width], room[1][:, :, :width]
    return layer.keys, layer.values


def select_rows(cache: Any, index: torch.Tensor) -> None:
    """`cache.batch_select_indices(index)`, writing a plain dynamic layer's chosen rows into a buffer with room
    (the next append then writes in place instead of copying them again)."""
    if type(cache) is not DynamicCache:
        cache.batch_select_indices(index)
        return
    for layer in cache.layers:
        if type(layer) is not DynamicLayer or not getattr(layer, "is_initialized", False) or layer.keys.dim() != 4:
            layer.batch_select_indices(index)
            continue
        old_k, old_v = layer.keys, layer.values
        new_k, new_v = fresh_room(layer, old_k, old_v, len(index), old_k.shape[2], zeroed=False)
        torch.index_select(old_k, 0, index, out=new_k)
        torch.index_select(old_v, 0, index, out=new_v)


KEEP_ROWS_ONE_BY_ONE = 16
"""`keep_rows` moves up to this many rows one copy each (no allocation); more in one gather, whose per-row cost
is lower than a copy call's."""


def keep_rows(cache: Any, rows: list[int]) -> None:
    """Keep only `rows` (ascending row indices) of a cache whose buffers nothing else reads, moving them to the
    front of each layer's own buffer instead of copying them into a new one (`select_rows`): a decoding batch
    that sheds finished rows several times a turn would otherwise allocate and fill a buffer each time. Rows
    already in place do not move. Layers without a room of their own are selected as `select_rows` does."""
    if (rows and rows[0] < 0) or any(b >= a for a, b in zip(rows[1:], rows[:-1], strict=True)):
        raise ValueError(f"keep_rows takes strictly ascending row indices, got {rows}")
    if type(cache) is not DynamicCache:
        cache.batch_select_indices(torch.tensor(rows, dtype=torch.long))
        return
    first = next((j for j, b in enumerate(rows) if b != j), len(rows))
    for layer in cache.layers:
        room = room_of(layer) if type(layer) is DynamicLayer else None
        if room is None:
            layer.batch_select_indices(torch.tensor(rows, dtype=torch.long, device=getattr(layer.keys, "device", None)))
            continue
        width = layer.keys.shape[2]
        for buffer in room:
            if len(rows) - first <= KEEP_ROWS_ONE_BY_ONE:
                # front to back: a row's source lies at or after its destination, so no source is overwritten
                # before it is read, and nothing is allocated
                for j in range(first, len(rows)):
                    buffer[j, :, :width].copy_(buffer[rows[j], :, :width])
            else:  # many rows: one gather (a copy of the moving rows), then one write
                moving = torch.tensor(rows[first:], dtype=torch.long, device=buffer.device)
                buffer[first:len(rows), :, :width] = buffer[moving, :, :width]
        adopt_room(layer, (room[0][: len(rows)], room[1][: len(rows)]), width)
