"""The learner's side of the policy: log-probs of generated spans under their decoding masks.

One right-padded training forward per batch of sequences; the logits that predicted each span
token are gathered, masked exactly as constrained decoding masked them (free decoding's mask when
no grammar was used), scaled by the sampling temperature and normalized. Returns per-token
log-probs, the entropy of those masked distributions, the distributions themselves (so that a KL
to another policy can be computed exactly over each allowed set), and for MoE models the router
logits, the Switch load-balancing loss and per-layer expert load. Gradients flow if the caller
enables them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel

from policies.outputs import SequenceScores
from policies.router_stats import aux_loss, expert_counts, expert_load


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
) -> SequenceScores:
    """Score the spans of `sequences` in one forward of `model` (see `LLMPolicy.span_logprobs`).

    `free_mask` is free decoding's bool [vocab] mask, on the model's device; `with_router_logits`
    asks the model for router logits, so pass it only for models that have a router.
    """
    if not (len(sequences) == len(spans) == len(allowed)):
        raise ValueError("sequences, spans and allowed must have one entry per sequence")
    device = free_mask.device
    n = len(sequences)
    width = max(len(s) for s in sequences)
    input_ids = torch.full((n, width), pad_id, dtype=torch.long)
    attention = torch.zeros((n, width), dtype=torch.long)
    for i, seq in enumerate(sequences):  # right padding
        input_ids[i, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
        attention[i, : len(seq)] = 1
    input_ids, attention = input_ids.to(device), attention.to(device)
    positions = torch.arange(width, device=device)[None].expand(n, -1)
    kwargs = {"output_router_logits": True} if with_router_logits else {}
    out = model(input_ids=input_ids, attention_mask=attention, position_ids=positions, use_cache=False,
                       **kwargs)

    # Flatten every span token: (sequence row, position of the token); logits at position - 1 predict it.
    flat_span = [(r, start, length, allowed[r][k]) for r, row in enumerate(spans)
                 for k, (start, length) in enumerate(row)]
    lengths = [length for _, _, length, _ in flat_span]
    a_max = max(lengths, default=0)
    rows, cols, targets, slot = [], [], [], []
    for s_idx, (r, start, length, _) in enumerate(flat_span):
        if start < 1 or start + length > len(sequences[r]):
            raise ValueError(f"span ({start}, {length}) does not fit sequence {r} of length {len(sequences[r])}")
        for j in range(length):
            rows.append(r)
            cols.append(start + j - 1)
            targets.append(sequences[r][start + j])
            slot.append(s_idx * a_max + j)
    vocab = out.logits.shape[-1]
    logits = out.logits[torch.tensor(rows, device=device), torch.tensor(cols, device=device)].float()
    logits = logits / temperature
    allow = _allow_rows(free_mask, flat_span, vocab, device)
    logp_all = F.log_softmax(logits.masked_fill(~allow, float("-inf")), dim=-1)
    target_t = torch.tensor(targets, device=device)
    tok_logp = logp_all.gather(-1, target_t[:, None]).squeeze(-1)
    if torch.isinf(tok_logp).any():
        raise ValueError("an action token lies outside its allowed set; pass the `allowed` lists recorded "
                         "by generate for these exact actions")
    entropy_flat = -(logp_all.exp() * logp_all.masked_fill(~allow, 0.0)).sum(-1)
    n_spans = len(flat_span)
    slot_t = torch.tensor(slot, device=device, dtype=torch.long)
    logprobs = torch.zeros(n_spans * a_max, device=device).index_put((slot_t,), tok_logp).view(n_spans, a_max)
    entropy = torch.zeros(n_spans * a_max, device=device).index_put((slot_t,), entropy_flat).view(n_spans, a_max)
    mask = torch.arange(a_max, device=device)[None] < torch.tensor(lengths, device=device)[:, None]
    scores = SequenceScores(logprobs=logprobs, mask=mask, entropy=entropy, log_dist=logp_all, slots=slot_t)
    router = getattr(out, "router_logits", None) if kwargs else None
    if router:
        layers = tuple(r for r in router if isinstance(r, torch.Tensor))
        if layers:
            scores.router_logits = layers
            scores.aux_loss = aux_loss(model, out, layers, attention)
            scores.expert_load = expert_load(layers, attention, expert_counts(model)[1])
    return scores


def _allow_rows(free: torch.Tensor, flat_span: list, vocab: int, device: torch.device) -> torch.Tensor:
    """Bool [tokens, vocab]: the allowed ids of every span token, in flattening order."""
    if vocab != free.shape[0]:
        raise ValueError(f"model logits have {vocab} entries but the policy expected {free.shape[0]}")
    total = sum(length for _, _, length, _ in flat_span)
    allow = free[None].expand(total, vocab).clone()
    rows: list[int] = []
    cols: list[int] = []
    offset = 0
    for _, _, length, ids_per_tok in flat_span:
        if ids_per_tok is not None:
            if len(ids_per_tok) != length:
                raise ValueError(f"{len(ids_per_tok)} allowed lists for a span of {length} tokens")
            allow[offset : offset + length] = False
            for j, ids in enumerate(ids_per_tok):
                rows.extend([offset + j] * len(ids))
                cols.extend(ids)
        offset += length
    if rows:
        allow[torch.tensor(rows, device=device), torch.tensor(cols, device=device)] = True
    return allow
