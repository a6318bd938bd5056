"""The training forward behind span scoring: hidden states at chosen positions, sharing common prefixes.

`decision_logits` returns the output layer's logits at given (sequence, position) pairs of a
right-padded batch, the router logits with the matching padding mask and, when asked, the last
hidden states at more positions (what an opponent head reads). Three paths, by what
the model allows:
- shared prefix: sequences that start alike (the episodes of one GRPO group share their task's
  first prompt, and often their first turns) form a family whose longest common prefix runs once
  with a KV cache; the rest of each sequence runs against it, in buckets of similar length so
  that little is padding. Gradients reach the prefix through the cache. Used only when it saves
  tokens.
- body and head: one forward of the transformer body without a padding mask (right padding under
  a causal mask: no real token sees a later pad), the output layer on the chosen positions only.
- full: the model's own forward and logits (models that scale or cap their logits).
On the first two paths the body's last layer runs on the asked positions only where the model allows it
(`policies/asked_columns.py`): nothing reads its output elsewhere. Its router rows are then those positions.
Left out: packing several sequences into one row, and prefixes shared by only part of a prompt.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from transformers import DynamicCache, PreTrainedModel

from policies import asked_columns

BUCKET_RATIO = 0.7
"""A remainder shorter than this share of its bucket's longest starts a new bucket (less padding, more forwards)."""


@dataclass
class DecisionForward:
    """Logits at the asked positions, and what router statistics need."""

    logits: torch.Tensor  # [positions, vocab]
    router_layers: tuple[torch.Tensor, ...] | None  # per MoE layer [tokens, experts], laid out as `router_masks`
    router_masks: tuple[torch.Tensor, ...]  # per layer, flat: 1 on the router rows of real tokens
    model_aux: torch.Tensor | None  # the model's own load-balancing loss (full path only; it saw the mask)
    hidden: torch.Tensor | None = None  # [extra positions, hidden]: the last hidden states at `hidden_at`


def right_padded(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """`[n, W]` ids and mask, each row flush left."""
    width = max((len(r) for r in rows), default=0)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = torch.tensor(list(row), dtype=torch.long)
        mask[i, : len(row)] = 1
    return ids.to(device), mask.to(device)


def body_and_head(model: PreTrainedModel) -> tuple[torch.nn.Module, torch.nn.Module] | None:
    """The transformer body and the output layer, when the logits are nothing but the output layer applied
    to the body's last hidden states (None for models that scale or cap their logits)."""
    cfg = model.config
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None) not in (None, 1, 1.0):
        return None
    body, head = model.get_decoder(), model.get_output_embeddings()
    if body is None or body is model or not isinstance(head, torch.nn.Linear):
        return None
    return body, head


def decision_logits(model: PreTrainedModel, sequences: Sequence[Sequence[int]], rows: list[int], cols: list[int],
                    *, shared_until: Sequence[int], pad_id: int, device: torch.device,
                    with_router_logits: bool, hidden_at: tuple[list[int], list[int]] | None = None,
                    last_layer_asked_only: bool = True) -> DecisionForward:
    """Logits predicting the token after position `cols[k]` of sequence `rows[k]`.

    `shared_until[r]` is how many leading tokens of sequence r may come from a shared prefix (no asked
    position may lie before it); 0 turns sharing off for that row. `hidden_at` (rows, cols) asks for the
    last hidden states at more positions (an opponent head's inputs), returned as `hidden`.
    `last_layer_asked_only=False` runs the body's last layer on every position (same logits, whole-layer router
    statistics).
    """
    kwargs = {"output_router_logits": True} if with_router_logits else {}
    n = len(rows)
    if hidden_at is not None:
        rows, cols = rows + list(hidden_at[0]), cols + list(hidden_at[1])
    parts = body_and_head(model)
    if parts is None:
        ids, mask = right_padded(sequences, pad_id, device)
        positions = torch.arange(ids.shape[1], device=device)[None].expand(len(sequences), -1)
        out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False,
                    output_hidden_states=hidden_at is not None, **kwargs)
        where = (_t(rows, device), _t(cols, device))
        hidden = out.hidden_states[-1][where][n:] if hidden_at is not None else None
        router = _layers(out)
        return DecisionForward(out.logits[where][:n], router, _router_masks([mask.reshape(-1)], False, router),
                               getattr(out, "aux_loss", None), hidden)
    body, head = parts
    shortcut = last_layer_asked_only and asked_columns.supports(body)
    plan = _prefix_plan(sequences, shared_until)
    if plan is None:
        ids, mask = right_padded(sequences, pad_id, device)
        positions = torch.arange(ids.shape[1], device=device)[None].expand(len(sequences), -1)
        where = (_t(rows, device), _t(cols, device))
        with _last_layer(body, shortcut, ids.shape, where):
            out = body(input_ids=ids, position_ids=positions, use_cache=False, **kwargs)
        picked, router = out.last_hidden_state[where], _layers(out)
        masks = _router_masks([mask.reshape(-1)], shortcut, router)
    else:
        picked, router, masks = _shared_forward(body, sequences, rows, cols, plan, pad_id, device, kwargs, shortcut)
    return DecisionForward(head(picked[:n]), router, masks, None, picked[n:] if hidden_at is not None else None)


@contextlib.contextmanager
def _last_layer(body: torch.nn.Module, shortcut: bool, shape: torch.Size,
                where: tuple[torch.Tensor, torch.Tensor]) -> Iterator[None]:
    """The body's last layer on the positions `where` of a `shape` forward only (when `shortcut`), else whole."""
    if not shortcut:
        yield
        return
    asked = torch.zeros(tuple(shape), dtype=torch.bool, device=where[0].device)
    asked[where] = True
    with asked_columns.asked_columns_only(body, asked):
        yield


def _router_masks(full: list[torch.Tensor], asked_last: bool,
                  router: tuple[torch.Tensor, ...] | None) -> tuple[torch.Tensor, ...]:
    """Per router layer, the flat mask of its rows: the forwards' token masks (`full`, concatenated), but for the
    last layer when it ran on asked positions only (`asked_last`: each of its rows is a real token)."""
    mask = torch.cat(full)
    layers = len(router) if router else 0
    if not asked_last or layers == 0:
        return (mask,) * max(layers, 1)
    return (mask,) * (layers - 1) + (mask.new_ones(len(router[-1])),)


@dataclass
class PrefixPlan:
    """How a batch runs with shared prefixes: each distinct prefix once, then the rest in length buckets."""

    prefixes: list[list[int]]
    which: list[int]  # each sequence's prefix
    cut: list[int]  # each sequence's prefix length
    buckets: list[list[int]]  # sequences whose remainders run together, longest first

    def tokens(self, sequences: Sequence[Sequence[int]]) -> int:
        """Tokens the forwards run, padding included."""
        rest = sum(len(b) * (len(sequences[b[0]]) - self.cut[b[0]]) for b in self.buckets)
        return len(self.prefixes) * max(len(p) for p in self.prefixes) + rest


def forward_tokens(sequences: Sequence[Sequence[int]], shared_until: Sequence[int]) -> int:
    """Tokens `decision_logits` runs through the body for these sequences (padding included)."""
    plan = _prefix_plan(sequences, shared_until)
    if plan is None:
        return len(sequences) * max((len(s) for s in sequences), default=0)
    return plan.tokens(sequences)


def _prefix_plan(sequences: Sequence[Sequence[int]], shared_until: Sequence[int]) -> PrefixPlan | None:
    """Sequences whose first `shared_until` tokens agree form a family; its prefix is the longest prefix all
    its members share (the episodes of a group often agree beyond the first prompt), short of each member's
    last token. The remainders run in buckets of similar length (a new bucket below `BUCKET_RATIO` of the
    bucket's longest), so little of a forward is padding. None when this saves no tokens."""
    if any(u <= 0 for u in shared_until) or len(sequences) < 2:
        return None
    families: dict[tuple[int, ...], list[int]] = {}
    for r, (seq, until) in enumerate(zip(sequences, shared_until, strict=True)):
        families.setdefault(tuple(seq[:until]), []).append(r)
    if len(families) == len(sequences):
        return None
    prefixes, which, cut = [], [0] * len(sequences), [0] * len(sequences)
    for members in families.values():
        common = _common_prefix([sequences[r] for r in members])
        length = min(common, min(len(sequences[r]) for r in members) - 1)
        for r in members:
            which[r], cut[r] = len(prefixes), length
        prefixes.append(list(sequences[members[0]][:length]))
    order = sorted(range(len(sequences)), key=lambda r: len(sequences[r]) - cut[r], reverse=True)
    buckets: list[list[int]] = []
    for r in order:
        if buckets and len(sequences[r]) - cut[r] >= BUCKET_RATIO * (len(sequences[buckets[-1][0]]) - cut[buckets[-1][0]]):
            buckets[-1].append(r)
        else:
            buckets.append([r])
    plan = PrefixPlan(prefixes, which, cut, buckets)
    plain = len(sequences) * max(len(s) for s in sequences)
    return plan if plan.tokens(sequences) < plain else None


def _common_prefix(seqs: list[Sequence[int]]) -> int:
    first, n = seqs[0], min(len(s) for s in seqs)
    for k in range(n):
        if any(s[k] != first[k] for s in seqs[1:]):
            return k
    return n


def _shared_forward(body: torch.nn.Module, sequences: Sequence[Sequence[int]], rows: list[int], cols: list[int],
                    plan: PrefixPlan, pad_id: int, device: torch.device, kwargs: dict, shortcut: bool
                    ) -> tuple[torch.Tensor, tuple[torch.Tensor, ...] | None, tuple[torch.Tensor, ...]]:
    """The hidden states at the asked positions, the router logits and the per-layer masks they are laid out by.

    Each prefix once with a KV cache; each bucket of remainders against its rows' prefixes (gradients
    reach the prefixes through the cache). An asked position inside a prefix reads the prefix's hidden state,
    which is the same for every sequence of the family."""
    # Which forward holds each asked position's hidden state: -1 the prefix's, else its bucket's.
    bucket_of = {r: (k, i) for k, bucket in enumerate(plan.buckets) for i, r in enumerate(bucket)}
    source = [-1 if c < plan.cut[r] else bucket_of[r][0] for r, c in zip(rows, cols, strict=True)]
    pre_ids, pre_mask = right_padded(plan.prefixes, pad_id, device)
    pre_pos = [j for j, src in enumerate(source) if src == -1]
    pre_where = (_t([plan.which[rows[j]] for j in pre_pos], device), _t([cols[j] for j in pre_pos], device))
    with _last_layer(body, shortcut, pre_ids.shape, pre_where):
        pre = body(input_ids=pre_ids, position_ids=torch.arange(pre_ids.shape[1], device=device)[None].expand(
            len(plan.prefixes), -1), use_cache=True, **kwargs)
    cache = pre.cache if getattr(pre, "cache", None) is not None else pre.past_key_values
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    cache_name = "cache" if "cache" in _params(body) else "past_key_values"
    picks: list[torch.Tensor] = []
    order: list[int] = []
    if pre_pos:
        picks.append(pre.last_hidden_state[pre_where])
        order += pre_pos
    layers = [_layers(pre)]
    masks = [pre_mask.reshape(-1)]
    for k, bucket in enumerate(plan.buckets):
        index = _t([plan.which[r] for r in bucket], device)
        bucket_cache = DynamicCache(config=body.config)
        for layer, (keys, values) in enumerate(kv):
            bucket_cache.update(keys[index], values[index], layer)
        suf_ids, suf_mask = right_padded([list(sequences[r][plan.cut[r]:]) for r in bucket], pad_id, device)
        positions = _t([plan.cut[r] for r in bucket], device)[:, None] + torch.arange(suf_ids.shape[1], device=device)[None]
        mine = [j for j, src in enumerate(source) if src == k]
        where = (_t([bucket_of[rows[j]][1] for j in mine], device), _t([cols[j] - plan.cut[rows[j]] for j in mine], device))
        with _last_layer(body, shortcut, suf_ids.shape, where):
            out = body(input_ids=suf_ids, attention_mask=torch.cat([pre_mask[index], suf_mask], dim=1),
                       position_ids=positions, use_cache=True, **{cache_name: bucket_cache}, **kwargs)
        if mine:
            picks.append(out.last_hidden_state[where])
            order += mine
        layers.append(_layers(out))
        masks.append(suf_mask.reshape(-1))
    hidden = torch.cat(picks) if picks else pre.last_hidden_state.new_zeros((0, pre.last_hidden_state.shape[-1]))
    hidden = hidden[_t(sorted(range(len(order)), key=order.__getitem__), device)]  # back to the asked order
    router = None
    if all(layers):
        router = tuple(torch.cat(parts) for parts in zip(*layers, strict=True))
    return hidden, router, _router_masks(masks, shortcut, router)


def _layers(out: object) -> tuple[torch.Tensor, ...] | None:
    router = getattr(out, "router_logits", None)
    layers = tuple(r for r in router if isinstance(r, torch.Tensor)) if router else ()
    return layers or None


def _params(module: torch.nn.Module) -> set[str]:
    return set(inspect.signature(module.forward).parameters)


def _t(values: Sequence[int], device: torch.device) -> torch.Tensor:
    return torch.tensor(list(values), dtype=torch.long, device=device)
