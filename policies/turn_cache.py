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
that later forwards do not attend over many of them; the columns before the first hole stay where they are,
so a compaction copies what recent turns added rather than the whole conversation. Cache layers grow in place (`kv_room`): a turn
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

from policies.kv_room import adopt_room, fresh_room, keep_rows, room_of, select_rows
from policies.row_parking import rows_movable

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


@torch.inference_mode()  # writes in place into a cache the rollout filled in inference mode
def compact(cache: Any, mask: torch.Tensor) -> torch.Tensor:
    """Drop the padding columns of a kept cache in place (each row's real columns in order from the left, its
    holes after them) and return the matching mask. Rows are padded per call and finish at different steps, so
    a cache gathers holes that every later forward would otherwise attend over; positions live in the keys, so
    nothing else changes. Fewer holes than `COMPACT_SHARE` allows stay (the mask is returned as it is). Caches
    with sliding-window or other non-plain layers are left as they are.

    Columns before the first hole of any row are already where they belong and stay: after the first
    compaction of an episode that is the conversation up to its shortest row, so a compaction moves about
    what the turns since the last one added, not the whole cache."""
    if not rows_movable(cache):
        return mask
    real = mask.bool()
    counts = real.sum(-1)
    width = int(counts.max())
    if (mask.shape[1] - width) * COMPACT_SHARE < mask.shape[1]:
        return mask
    start = int((~real).any(0).to(torch.int8).argmax())  # the first column some row does not use
    # column start + j of row r takes the j-th real column of r from `start` on (or a hole, masked, past them)
    src = start + torch.sort((~real[:, start:]).to(torch.int8), dim=1, stable=True).indices[:, : width - start]
    keep = torch.arange(width, device=mask.device)[None] < counts[:, None]
    for layer in cache.layers:
        if layer.keys is None or layer.keys.numel() == 0:
            continue
        rows = src.to(layer.keys.device)[:, None, :, None]
        old_k, old_v = layer.keys, layer.values
        # keys and values may differ in width (multi-head latent attention: DeepSeek)
        moved_k = old_k.gather(2, rows.expand(-1, old_k.shape[1], -1, old_k.shape[3]))
        moved_v = old_v.gather(2, rows.expand(-1, old_v.shape[1], -1, old_v.shape[3]))
        if type(layer) is not DynamicLayer:
            layer.keys = torch.cat([old_k[:, :, :start], moved_k], dim=2)
            layer.values = torch.cat([old_v[:, :, :start], moved_v], dim=2)
            continue
        room = room_of(layer)
        if room is not None:  # in place: the columns before `start` do not move
            keys, values = adopt_room(layer, room, width)
        else:  # into a buffer with room: the next turn appends in place
            keys, values = fresh_room(layer, old_k, old_v, old_k.shape[0], width, zeroed=False)
            keys[:, :, :start], values[:, :, :start] = old_k[:, :, :start], old_v[:, :, :start]
        keys[:, :, start:], values[:, :, start:] = moved_k, moved_v
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
            if all(a < b for a, b in zip(rows, rows[1:], strict=False)):  # rows left, the rest in order: in place
                keep_rows(self._cache, rows)
            else:
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
