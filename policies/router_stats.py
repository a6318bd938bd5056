"""MoE router statistics from a training forward: load-balancing loss and expert load.

Works on the per-layer router logits a transformers MoE returns with `output_router_logits=True`
([batch*seq, num_experts] per layer), each layer with a flat mask of its real-token rows (a layer may route
other rows than the rest: the learner's last layer routes only the positions it reads). The loss is the
model's own (`outputs.aux_loss`) or, when a model leaves it out, its modeling module's
`load_balancing_loss_func` where every layer routes the same rows, and the same Switch formula over each
layer's own rows otherwise. Dense models have none: callers get None. Left out: router z-loss and per-token
routing dumps.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import torch
from transformers import PreTrainedModel


def expert_counts(model: PreTrainedModel) -> tuple[int | None, int]:
    """(number of experts or None for a dense model, experts per token)."""
    cfg = model.config
    n = (getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
         or getattr(cfg, "n_routed_experts", None))  # Qwen-MoE and OLMoE / Mixtral, PhiMoE, Granite / DeepSeek
    return n, int(getattr(cfg, "num_experts_per_tok", 1) or 1)


def aux_loss(
    model: PreTrainedModel, outputs: object, layers: tuple[torch.Tensor, ...], masks: Sequence[torch.Tensor]
) -> torch.Tensor | None:
    """Switch load-balancing loss over non-padding tokens (about top_k when perfectly balanced); `masks` holds
    each layer's flat mask of real rows."""
    aux = getattr(outputs, "aux_loss", None)
    if isinstance(aux, torch.Tensor):
        return aux
    fn = getattr(sys.modules.get(type(model).__module__), "load_balancing_loss_func", None)
    n_experts, top_k = expert_counts(model)
    if fn is None or n_experts is None:
        return None
    if any(m is not masks[0] for m in masks):
        return switch_loss(layers, masks, n_experts, top_k)
    aux = fn(layers, n_experts, top_k, masks[0])
    return aux if isinstance(aux, torch.Tensor) else None


def switch_loss(layers: Sequence[torch.Tensor], masks: Sequence[torch.Tensor], n_experts: int,
                top_k: int) -> torch.Tensor:
    """The Switch load-balancing loss over every layer's real rows together: the number of experts times the sum
    over experts of (share of top-k picks) x (mean router probability), each pooled over all layers' rows."""
    picks = torch.zeros(n_experts, dtype=torch.float32, device=layers[0].device)
    probs = torch.zeros(n_experts, dtype=torch.float32, device=layers[0].device)
    rows = torch.zeros((), dtype=torch.float32, device=layers[0].device)
    for logits, mask in zip(layers, masks, strict=True):
        weights = mask.reshape(-1).to(device=logits.device, dtype=torch.float32)
        p = torch.softmax(logits.float(), dim=-1)
        chosen = p.topk(top_k, dim=-1).indices
        picks = picks + torch.zeros_like(picks).scatter_add_(0, chosen.reshape(-1), weights.repeat_interleave(top_k))
        probs = probs + (p * weights[:, None]).sum(0)
        rows = rows + weights.sum()
    return (picks / rows * probs / rows).sum() * n_experts


def _weights(layer: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A layer's per-row weights: its mask, or every row where the mask is laid out otherwise."""
    flat = mask.reshape(-1).float().to(layer.device)
    return flat if flat.shape[0] == layer.shape[0] else torch.ones(layer.shape[0], device=layer.device)


def expert_load(layers: tuple[torch.Tensor, ...], masks: Sequence[torch.Tensor], top_k: int) -> torch.Tensor:
    """[layers, num_experts]: fraction of top-k picks each expert got over non-padding tokens (detached); `masks`
    holds each layer's flat mask of real rows."""
    loads = []
    for layer, mask in zip(layers, masks, strict=True):
        layer = layer.detach().float()
        weights = _weights(layer, mask)
        picks = layer.topk(min(top_k, layer.shape[-1]), dim=-1).indices
        counts = torch.zeros(layer.shape[-1], device=layer.device)
        counts.scatter_add_(0, picks.reshape(-1), weights.repeat_interleave(picks.shape[-1]))
        loads.append(counts / counts.sum().clamp_min(1.0))
    return torch.stack(loads)


def load_entropy(load: torch.Tensor) -> torch.Tensor:
    """Mean over layers of the entropy of expert load (log(num_experts) when balanced)."""
    return -(load * load.clamp_min(1e-12).log()).sum(-1).mean()


def routing_agreement(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...], masks: Sequence[torch.Tensor],
                      top_k: int) -> torch.Tensor:
    """[layers]: share of non-padding tokens whose set of top-k experts is the same under routings `a` and `b`
    (router logits of the same tokens, laid out alike; `masks` each layer's flat mask of real rows)."""
    out = []
    for la, lb, mask in zip(a, b, masks, strict=True):
        k = min(top_k, la.shape[-1])
        same = (la.detach().topk(k, dim=-1).indices.sort(-1).values
                == lb.detach().topk(k, dim=-1).indices.sort(-1).values).all(-1).float()
        w = _weights(same[:, None], mask)
        out.append((same * w).sum() / w.sum().clamp_min(1.0))
    return torch.stack(out)
