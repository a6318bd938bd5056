"""Reuse each row's KV cache across the turns of a multi-turn rollout (prefix caching).

A turn's prompt is the previous prompt + the generated action + the new observation, so
re-reading the whole conversation every turn (what a plain `generate` does) costs a prefill that
grows with the episode, and an episode's prefill work with the square of its turns (measured
figures: docs/results/2026-11-30-turn-cache.md). `TurnCache` keeps the KV cache, the attention mask
and the real tokens of each row (keyed by the caller, e.g. `(env index, agent)`) after a
`generate` call; the next call feeds only the tokens past what the cache holds.

Rows are left-padded per call, so the kept mask has holes (padding columns between turns); the
mask and explicit position ids (real tokens only) make that invisible to the model, the same way
left padding is, and a reuse compacts them away (`compact`) once they are a sixteenth of the width, so
that later forwards do not attend over many of them. Cache layers grow in place (`kv_room`): a turn
appends to a buffer with room instead of copying the whole cache. A call reuses the cache only when
every row's cached tokens are a prefix of its new prompt; anything else (a new episode, a row the cache has not seen) prefills from scratch.

Left out: invalidation when the weights change. The caller owns a cache's lifetime and must drop
it after an update (a rollout makes one per collection). Models whose cache cannot select rows
(no `batch_select_indices`) simply never reuse.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers.cache_utils import DynamicLayer

from policies.kv_room import fresh_room, select_rows

COMPACT_SHARE = 16
"""A kept cache is compacted once the columns it could drop reach 1/this of its width: attending over a few
holes costs less than copying the whole cache to remove them."""


@dataclass
class Prefill:
    """The first forward of a `generate` call: new tokens only when a cache is reused."""

    input_ids: torch.Tensor  # [n, W] left-padded
    attention: torch.Tensor  # [n, past + W]: the kept mask (holes included) + this chunk's
    positions: torch.Tensor  # [n, W] real-token positions
    cache: Any | None  # the reused KV cache (rows already selected), or None for a fresh prefill
    reused: bool


def left_padded(chunks: Sequence[Sequence[int]], pad_id: int, device: torch.device | str
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """`[n, W]` ids and mask, each chunk flush right so every row's last column is real."""
    width = max(len(c) for c in chunks)
    # nested lists then one tensor each: a decoding step calls this for every row, every step
    ids = torch.tensor([[pad_id] * (width - len(c)) + list(c) for c in chunks], dtype=torch.long)
    mask = torch.tensor([[0] * (width - len(c)) + [1] * len(c) for c in chunks], dtype=torch.long)
    return ids.to(device), mask.to(device)


def rows_movable(cache: Any) -> bool:
    """True when every layer of `cache` is a plain key/value layer whose rows can be taken out and put back."""
    layers = getattr(cache, "layers", None)
    return bool(layers) and hasattr(cache, "batch_select_indices") and all(
        hasattr(layer, "keys") and not getattr(layer, "is_sliding", False) for layer in layers)


@dataclass
class CacheRows:
    """Some rows of a cache: per layer (keys, values) [rows, heads, width, dim], and their mask [rows, width]."""

    layers: list[tuple[torch.Tensor, torch.Tensor]]
    mask: torch.Tensor


def take_rows(cache: Any, mask: torch.Tensor, rows: Sequence[int]) -> CacheRows:
    """A copy of `rows` of a cache (see `rows_movable`) and of their mask."""
    index = torch.tensor(list(rows), dtype=torch.long, device=mask.device)
    return CacheRows([(layer.keys[index], layer.values[index]) for layer in cache.layers], mask[index])


def held_rows(cache: Any, mask: torch.Tensor) -> CacheRows:
    """Every row of a cache (see `rows_movable`) and its mask, as they are (no copy)."""
    return CacheRows([(layer.keys, layer.values) for layer in cache.layers], mask)


def put_rows_back(cache: Any, groups: Sequence[tuple[Sequence[int], CacheRows]]) -> torch.Tensor:
    """Fill `cache` in place with every group's rows, row `r` at position r (the groups' row ids cover
    0..n-1 once), each left-padded to the widest group; returns the matching mask."""
    width = max(g.mask.shape[1] for _, g in groups)
    rows = sum(len(r) for r, _ in groups)
    mask = groups[0][1].mask.new_zeros(rows, width)
    for k, layer in enumerate(cache.layers):
        # one buffer (with room to grow: the next turn appends in place) per layer, each group written into its
        # rows; a narrower group's padding columns are zeroed, never NaN under the mask
        first_k, first_v = groups[0][1].layers[k]
        keys, values = fresh_room(layer, first_k, first_v, rows, width, zeroed=False)
        for ids, g in groups:
            index = torch.tensor(list(ids), dtype=torch.long, device=keys.device)
            start = width - g.mask.shape[1]
            keys[index, :, start:] = g.layers[k][0]
            values[index, :, start:] = g.layers[k][1]
            if start:
                keys[index, :, :start] = 0
                values[index, :, :start] = 0
    for ids, g in groups:
        mask[torch.tensor(list(ids), dtype=torch.long, device=mask.device), width - g.mask.shape[1]:] = g.mask
    return mask


def compact(cache: Any, mask: torch.Tensor) -> torch.Tensor:
    """Drop the padding columns of a kept cache in place (each row's real columns, right-aligned) and return
    the matching mask. Rows are padded per call and finish at different steps, so a cache gathers holes
    that every later forward would otherwise attend over; positions live in the keys, so nothing else
    changes. Fewer holes than `COMPACT_SHARE` allows stay (the mask is returned as it is). Caches with sliding-window or other non-plain layers are left as they are."""
    if not rows_movable(cache):
        return mask
    layers = cache.layers
    real = mask.bool()
    counts = real.sum(-1)
    width = int(counts.max())
    if (mask.shape[1] - width) * COMPACT_SHARE < mask.shape[1]:
        return mask
    # column j of the compacted row r takes the (j - (width - count_r))-th real column of r, or stays padding
    order = torch.sort((~real).to(torch.int8), dim=1, stable=True).indices  # real columns first, in order
    shift = (width - counts)[:, None]
    j = torch.arange(width, device=mask.device)[None]
    src = order.gather(1, (j - shift).clamp_min(0))
    keep = j >= shift
    for layer in layers:
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        rows = src.to(layer.keys.device)[:, None, :, None]
        old_k, old_v = layer.keys, layer.values
        # keys and values may differ in width (multi-head latent attention: DeepSeek)
        index_k = rows.expand(-1, old_k.shape[1], -1, old_k.shape[3])
        index_v = rows.expand(-1, old_v.shape[1], -1, old_v.shape[3])
        if type(layer) is DynamicLayer:  # into a buffer with room: the next turn appends in place
            new_k, new_v = fresh_room(layer, old_k, old_v, old_k.shape[0], width, zeroed=False)
            torch.gather(old_k, 2, index_k, out=new_k)
            torch.gather(old_v, 2, index_v, out=new_v)
        else:
            layer.keys, layer.values = old_k.gather(2, index_k), old_v.gather(2, index_v)
    return keep.to(mask.dtype)


def fresh_prefill(prompts: Sequence[Sequence[int]], pad_id: int, device: torch.device | str) -> Prefill:
    """Whole prompts, left-padded; positions count real tokens, so a row sees the same positions as alone."""
    ids, mask = left_padded(prompts, pad_id, device)
    return Prefill(ids, mask, (mask.cumsum(-1) - 1).clamp_min(0), None, False)


class TurnCache:
    """One policy's per-row KV caches between the turns of one rollout (see the module docstring)."""

    def __init__(self) -> None:
        self._rows: dict[Hashable, int] = {}
        self._tokens: list[list[int]] = []
        self._cache: Any | None = None
        self._mask: torch.Tensor | None = None
        self.reused_tokens = 0
        """Prompt tokens not re-read thanks to the cache (cumulative)."""
        self.fresh_calls = 0
        self.reused_calls = 0

    def prefill(self, keys: Sequence[Hashable], prompts: Sequence[Sequence[int]], pad_id: int,
                device: torch.device | str) -> Prefill:
        """The first forward's inputs for `prompts`, reusing the kept cache when every row allows it."""
        if len(keys) != len(prompts):
            raise ValueError(f"got {len(keys)} cache keys for {len(prompts)} prompts; pass one key per prompt")
        rows = self._reusable_rows(keys, prompts)
        if rows is None:
            self.fresh_calls += 1
            return fresh_prefill(prompts, pad_id, device)
        self.reused_calls += 1
        if rows == list(range(len(self._tokens))):  # the same rows in the same order: nothing to move
            past_mask = compact(self._cache, self._mask).to(device)
        else:
            index = torch.tensor(rows, dtype=torch.long, device=self._mask.device)
            select_rows(self._cache, index)
            past_mask = compact(self._cache, self._mask[index]).to(device)
        done = [len(self._tokens[r]) for r in rows]
        self.reused_tokens += sum(done)
        ids, mask = left_padded([list(p[n:]) for p, n in zip(prompts, done, strict=True)], pad_id, device)
        start = torch.tensor(done, dtype=torch.long, device=device)[:, None]
        positions = start + (mask.cumsum(-1) - 1).clamp_min(0)
        return Prefill(ids, torch.cat([past_mask, mask], dim=1), positions, self._cache, True)

    def keep(self, keys: Sequence[Hashable], cache: Any, attention: torch.Tensor, tokens: list[list[int]]) -> None:
        """Remember the state after a call: `tokens[i]` are the real tokens row i's cache holds, in order."""
        if not hasattr(cache, "batch_select_indices"):
            self.clear()
            return
        self._rows = {k: i for i, k in enumerate(keys)}
        self._tokens, self._cache, self._mask = tokens, cache, attention

    def clear(self) -> None:
        self._rows, self._tokens, self._cache, self._mask = {}, [], None, None

    def _reusable_rows(self, keys: Sequence[Hashable], prompts: Sequence[Sequence[int]]) -> list[int] | None:
        if self._cache is None or len(set(keys)) != len(keys):
            return None
        rows = []
        for key, prompt in zip(keys, prompts, strict=True):
            r = self._rows.get(key)
            if r is None:
                return None
            held = self._tokens[r]
            # strictly longer: the last column must be a real token to read the next logits from
            if len(prompt) <= len(held) or list(prompt[: len(held)]) != held:
                return None
            rows.append(r)
        return rows
