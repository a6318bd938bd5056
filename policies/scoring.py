"""The learner's side of the policy: log-probs of generated spans under their decoding masks.

One right-padded training forward per batch of sequences; the logits that predicted each span
token are gathered, masked exactly as constrained decoding masked them (free decoding's mask when
no grammar was used), scaled by the sampling temperature and normalized. Tokens the grammar forced
(one allowed id) have log-prob and entropy 0 without logits; the output layer runs on decisions only,
and sequences that share a prefix run it once (`policies/span_forward.py`). Returns per-token log-probs, the entropy of those masked distributions, the distributions themselves (so that a KL
to another policy can be computed exactly over each allowed set), and for MoE models the router
logits, the Switch load-balancing loss and per-layer expert load. Gradients flow if the caller
enables them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from policies.outputs import SequenceScores
from policies.router_stats import aux_loss, expert_counts, expert_load
from policies.span_forward import decision_logits


def score_spans(
    model: PreTrainedModel,
    sequences: Sequence[Sequence[int]],
    spans: Sequence[Sequence[tuple[int, int]]],
    allowed: Sequence[Sequence[Sequence[Sequence[int]] | None]],
    *,
    free_mask: torch.Tensor,
    pad_id: int,
    temperature: float,
    with_router_logits: bool = False,
    with_prompt_hidden: bool = False,
    hint_lengths: Sequence[Sequence[int]] | None = None,
) -> SequenceScores:
    """Score the spans of `sequences` in one forward of `model` (see `LLMPolicy.span_logprobs`).

    `free_mask` is free decoding's bool [vocab] mask, on the model's device; `with_router_logits`
    asks the model for router logits, so pass it only for models that have a router;
    `with_prompt_hidden` also returns the last hidden state at the end of each span's prompt, before the
    `hint_lengths[r][k]` ids of a prediction shown there (an opponent head reads where its prompt ended).
    """
    if not (len(sequences) == len(spans) == len(allowed)):
        raise ValueError("sequences, spans and allowed must have one entry per sequence")
    device = free_mask.device
    # Flatten every span token: (sequence row, position of the token); logits at position - 1 predict it.
    # A token its grammar forced (one allowed id) has log-prob and entropy exactly 0 and needs no logits:
    # only decisions are scored, which spares the output layer most positions.
    flat_span = [(r, start, length, allowed[r][k]) for r, row in enumerate(spans)
                 for k, (start, length) in enumerate(row)]
    lengths = [length for _, _, length, _ in flat_span]
    a_max = max(lengths, default=0)
    rows, cols, targets, slot, decision_spans = [], [], [], [], []
    for s_idx, (r, start, length, ids_per_tok) in enumerate(flat_span):
        if start < 1 or start + length > len(sequences[r]):
            raise ValueError(f"span ({start}, {length}) does not fit sequence {r} of length {len(sequences[r])}")
        if ids_per_tok is not None and len(ids_per_tok) != length:
            raise ValueError(f"{len(ids_per_tok)} allowed lists for a span of {length} tokens")
        kept = []
        for j in range(length):
            target = sequences[r][start + j]
            if ids_per_tok is not None and len(ids_per_tok[j]) == 1:
                if ids_per_tok[j][0] != target:
                    raise ValueError(_OUTSIDE)
                continue
            rows.append(r)
            cols.append(start + j - 1)
            targets.append(target)
            slot.append(s_idx * a_max + j)
            kept.append(None if ids_per_tok is None else ids_per_tok[j])
        decision_spans.append(kept)
    # The prompt's last token (the assistant marker) is where the agent has read all it will act on.
    hints = [h for row in hint_lengths for h in row] if hint_lengths is not None else [0] * len(flat_span)
    if len(hints) != len(flat_span):
        raise ValueError(f"hint_lengths has {len(hints)} entries for {len(flat_span)} spans: one per span")
    prompt_ends = ([r for r, _, _, _ in flat_span],
                   [start - 1 - h for (_, start, _, _), h in zip(flat_span, hints, strict=True)])
    fwd = decision_logits(model, sequences, rows, cols, shared_until=[row[0][0] - 1 if row else 0 for row in spans],
                          pad_id=pad_id, device=device, with_router_logits=with_router_logits,
                          hidden_at=prompt_ends if with_prompt_hidden else None)
    logits = fwd.logits.float() / temperature
    allow = _allow_rows(free_mask, decision_spans, logits.shape[-1], device)
    logp_all = F.log_softmax(logits.masked_fill(~allow, float("-inf")), dim=-1)
    target_t = torch.tensor(targets, device=device, dtype=torch.long)
    tok_logp = logp_all.gather(-1, target_t[:, None]).squeeze(-1)
    if torch.isinf(tok_logp).any():
        raise ValueError(_OUTSIDE)
    entropy_flat = -(logp_all.exp() * logp_all.masked_fill(~allow, 0.0)).sum(-1)
    n_spans = len(flat_span)
    slot_t = torch.tensor(slot, device=device, dtype=torch.long)
    logprobs = torch.zeros(n_spans * a_max, device=device).index_put((slot_t,), tok_logp).view(n_spans, a_max)
    entropy = torch.zeros(n_spans * a_max, device=device).index_put((slot_t,), entropy_flat).view(n_spans, a_max)
    mask = torch.arange(a_max, device=device)[None] < torch.tensor(lengths, device=device)[:, None]
    scores = SequenceScores(logprobs=logprobs, mask=mask, entropy=entropy, log_dist=logp_all, slots=slot_t,
                            prompt_hidden=fwd.hidden)
    if fwd.router_layers:
        scores.router_logits, scores.router_masks = fwd.router_layers, fwd.router_masks
        scores.aux_loss = fwd.model_aux if fwd.model_aux is not None else aux_loss(
            model, None, fwd.router_layers, fwd.router_masks)
        scores.expert_load = expert_load(fwd.router_layers, fwd.router_masks, expert_counts(model)[1])
    return scores


@dataclass
class ImitationLoss:
    """Cross-entropy on demonstrations' action tokens, from one training forward."""

    cross_entropy: torch.Tensor  # mean over the action tokens
    aux_loss: torch.Tensor | None  # Switch load-balancing loss (MoE models, when asked)
    hidden: torch.Tensor | None  # [positions, hidden] last hidden states at `hidden_at`, if asked


def imitation_loss(model: PreTrainedModel, sequences: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], *,
                   pad_id: int, device: torch.device, with_router_logits: bool = False,
                   hidden_at: tuple[list[int], list[int]] | None = None) -> ImitationLoss:
    """The causal-LM loss on the tokens where `masks[i]` is 1 (each predicted by the position before it), as the
    model's own loss with labels computes it, through the scoring forward: the output layer (and the body's last
    layer, where the model allows it) runs only where a token is predicted or `hidden_at` asks."""
    rows, cols, targets = [], [], []
    for r, (seq, mask) in enumerate(zip(sequences, masks, strict=True)):
        if len(seq) != len(mask):
            raise ValueError(f"demonstration {r} has {len(seq)} tokens but a mask of {len(mask)}")
        for t in range(1, len(seq)):
            if mask[t]:
                rows.append(r)
                cols.append(t - 1)
                targets.append(seq[t])
    if not rows:
        raise ValueError("no action token to imitate in this batch")
    fwd = decision_logits(model, sequences, rows, cols, shared_until=[0] * len(sequences), pad_id=pad_id,
                          device=device, with_router_logits=with_router_logits, hidden_at=hidden_at)
    ce = F.cross_entropy(fwd.logits.float(), torch.tensor(targets, device=device))
    aux = None
    if fwd.router_layers:
        aux = fwd.model_aux if fwd.model_aux is not None else aux_loss(model, None, fwd.router_layers, fwd.router_masks)
    return ImitationLoss(ce, aux, fwd.hidden)


_OUTSIDE = ("an action token lies outside its allowed set; pass the `allowed` lists recorded by generate for these "
            "exact actions")


def _allow_rows(free: torch.Tensor, decision_spans: list[list[list[int] | None]], vocab: int,
                device: torch.device) -> torch.Tensor:
    """Bool [decisions, vocab]: the allowed ids of every scored token, in flattening order (None: free)."""
    if vocab != free.shape[0]:
        raise ValueError(f"model logits have {vocab} entries but the policy expected {free.shape[0]}")
    kept = [ids for span in decision_spans for ids in span]
    allow = free[None].expand(len(kept), vocab).clone()
    rows: list[int] = []
    cols: list[int] = []
    for k, ids in enumerate(kept):
        if ids is not None:
            allow[k] = False
            rows.extend([k] * len(ids))
            cols.extend(ids)
    if rows:
        allow[torch.tensor(rows, device=device), torch.tensor(cols, device=device)] = True
    return allow
