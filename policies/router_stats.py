"""MoE router statistics from a training forward: load-balancing loss and expert load.

Works on the per-layer router logits a transformers MoE returns with `output_router_logits=True`
([batch*seq, num_experts] per layer). The loss is the model's own (`outputs.aux_loss`) or, when a
model leaves it out, its modeling module's `load_balancing_loss_func`. Dense models have none:
callers get None. Left out: router z-loss and per-token routing dumps.
"""

from __future__ import annotations

import sys

import torch
from transformers import PreTrainedModel


def expert_counts(model: PreTrainedModel) -> tuple[int | None, int]:
    """(number of experts or None for a dense model, experts per token)."""
    cfg = model.config
    n = (getattr(cfg, "num_experts", None) or getattr(cfg, "num_local_experts", None)
         or getattr(cfg, "n_routed_experts", None))  # Qwen-MoE and OLMoE / Mixtral, PhiMoE, Granite / DeepSeek
    return n, int(getattr(cfg, "num_experts_per_tok", 1) or 1)


def aux_loss(
    model: PreTrainedModel, outputs: object, layers: tuple[torch.Tensor, ...], attention_mask: torch.Tensor
) -> torch.Tensor | None:
    """Switch load-balancing loss over non-padding tokens (about top_k when perfectly balanced)."""
    aux = getattr(outputs, "aux_loss", None)
    if isinstance(aux, torch.Tensor):
        return aux
    fn = getattr(sys.modules.get(type(model).__module__), "load_balancing_loss_func", None)
    n_experts, top_k = expert_counts(model)
    if fn is None or n_experts is None:
        return None
    aux = fn(layers, n_experts, top_k, attention_mask)
    return aux if isinstance(aux, torch.Tensor) else None


def expert_load(layers: tuple[torch.Tensor, ...], attention_mask: torch.Tensor, top_k: int) -> torch.Tensor:
    """[layers, num_experts]: fraction of top-k picks each expert got over non-padding tokens (detached)."""
    flat_mask = attention_mask.reshape(-1).float()
    loads = []
    for layer in layers:
        layer = layer.detach().float()
        if layer.shape[0] != flat_mask.shape[0]:  # unexpected layout: count every row
            weights = torch.ones(layer.shape[0], device=layer.device)
        else:
            weights = flat_mask.to(layer.device)
        picks = layer.topk(min(top_k, layer.shape[-1]), dim=-1).indices
        counts = torch.zeros(layer.shape[-1], device=layer.device)
        counts.scatter_add_(0, picks.reshape(-1), weights.repeat_interleave(picks.shape[-1]))
        loads.append(counts / counts.sum().clamp_min(1.0))
    return torch.stack(loads)


def load_entropy(load: torch.Tensor) -> torch.Tensor:
    """Mean over layers of the entropy of expert load (log(num_experts) when balanced)."""
    return -(load * load.clamp_min(1e-12).log()).sum(-1).mean()


def routing_agreement(a: tuple[torch.Tensor, ...], b: tuple[torch.Tensor, ...], token_mask: torch.Tensor,
                      top_k: int) -> torch.Tensor:
    """[layers]: share of non-padding tokens whose set of top-k experts is the same under routings `a` and `b`
    (router logits of the same tokens, laid out alike)."""
    weights = token_mask.reshape(-1).float()
    out = []
    for la, lb in zip(a, b, strict=True):
        k = min(top_k, la.shape[-1])
        same = (la.detach().topk(k, dim=-1).indices.sort(-1).values
                == lb.detach().topk(k, dim=-1).indices.sort(-1).values).all(-1).float()
        w = weights.to(same.device) if same.shape[0] == weights.shape[0] else torch.ones_like(same)
        out.append((same * w).sum() / w.sum().clamp_min(1.0))
    return torch.stack(out)
