"""The training forward's last decoder layer on the asked columns only.

The learner reads the last hidden state at a few columns of each sequence (the decisions it scores and where an
opponent head reads), not at every column. The columns before the last layer all feed later columns through
attention, so they all run; the last layer's output, however, is read only at the asked columns. Inside
`asked_columns_only` the body's last layer writes every column's keys and values (to the cache when one is
passed: a shared prefix's buckets attend to them) and runs its queries, attention output, residuals and
mixture of experts for the asked columns alone; every other column leaves it as zeros, which nothing reads.
The asked columns' hidden states, and so the logits and their gradients, are those of the whole layer (tested).

What changes is the last layer's router statistics: its router runs on the asked columns only, so its logits
hold one row per asked column (in row-major order), and the load-balancing loss, expert load and routing
agreement count those rows for that layer (`last_layer_rows`): the columns whose experts the learner ran.

Used by the learner's scoring forward (Qwen3-MoE policies) and by critics (dense Qwen3 trunks, which read values at
a few positions of each conversation). Left out: other model families, sliding-window attention, gradient
checkpointing (each keeps the whole layer, `supports` says False).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn.functional as F

SUPPORTED_TYPES = frozenset({"qwen3_moe", "qwen3"})


def supports(body: torch.nn.Module) -> bool:
    """Whether the last layer of this transformer body can run on asked columns only."""
    config = getattr(body, "config", None)
    layers = getattr(body, "layers", None)
    return (
        config is not None and layers is not None and len(layers) > 0
        and getattr(config, "model_type", None) in SUPPORTED_TYPES
        and getattr(config, "sliding_window", None) in (None, 0)
        and not getattr(config, "use_sliding_window", False)
        and getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager")
        and (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default") == "default"
        and not getattr(body, "gradient_checkpointing", False)
        and all(hasattr(layers[-1].self_attn, name) for name in ("q_proj", "k_proj", "v_proj", "o_proj", "q_norm",
                                                                  "k_norm", "layer_idx", "scaling"))
    )


@contextmanager
def asked_columns_only(body: torch.nn.Module, asked: torch.Tensor) -> Iterator[None]:
    """Within this block, a forward of `body` over `[rows, width]` ids runs its last layer on the columns where
    the bool `[rows, width]` `asked` is True only (the caller's next forward must have that shape)."""
    last = body.layers[-1]
    body.layers[-1] = _AskedColumnsLayer(last, asked)
    try:
        yield
    finally:
        body.layers[-1] = last


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class _AskedColumnsLayer(torch.nn.Module):
    """Stands in for the last decoder layer during one forward (its modules, so adapters on them still apply)."""

    def __init__(self, layer: torch.nn.Module, asked: torch.Tensor) -> None:
        super().__init__()
        self.layer = layer
        self.asked = asked

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                position_ids: torch.Tensor | None = None, cache: Any | None = None, use_cache: bool | None = False,
                position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None, **kwargs: Any) -> torch.Tensor:
        layer, attn = self.layer, self.layer.self_attn
        rows, width, _ = hidden_states.shape
        if self.asked.shape != (rows, width):
            raise ValueError(f"asked columns laid out as {tuple(self.asked.shape)} for a forward of {(rows, width)}")
        if position_embeddings is None:
            raise ValueError("the body passed no rotary embeddings to its last layer")
        cos, sin = (t[:, None].expand(rows, -1, -1, -1) for t in position_embeddings)  # [rows, 1, width, head_dim]
        h = layer.input_layernorm(hidden_states)
        kv_shape = (rows, width, -1, attn.head_dim)
        k = attn.k_norm(attn.k_proj(h).view(kv_shape)).transpose(1, 2)
        v = attn.v_proj(h).view(kv_shape).transpose(1, 2)
        k = k * cos + _rotate_half(k) * sin
        if cache is not None:  # as the model's attention: the cache returns its past columns and these
            k, v = cache.update(k, v, attn.layer_idx)
        if not bool(self.asked.any()):  # keys and values only; the router still reports its (empty) rows
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate(hidden_states.new_zeros(0, hidden_states.shape[-1]))
            return hidden_states.new_zeros(hidden_states.shape)
        # Each row's asked columns, padded to the busiest row's count with column 0 (discarded afterwards).
        count = self.asked.sum(1)
        slots = int(count.max()) if rows else 0
        valid = torch.arange(slots, device=count.device)[None] < count[:, None]  # [rows, slots]
        order = torch.sort((~self.asked).to(torch.int8), dim=1, stable=True).indices[:, :slots]
        columns = torch.where(valid, order, torch.zeros_like(order))  # [rows, slots]
        gather = columns[..., None].expand(-1, -1, hidden_states.shape[-1])
        q = attn.q_proj(h.gather(1, gather)).view(rows, slots, -1, attn.head_dim)
        q = attn.q_norm(q).transpose(1, 2)
        rope = columns[:, None, :, None].expand(-1, 1, -1, cos.shape[-1])
        q = q * cos.gather(2, rope) + _rotate_half(q) * sin.gather(2, rope)
        mask = self._query_mask(attention_mask, columns, valid, k.shape[2], width)
        groups = q.shape[1] // k.shape[1]
        if groups > 1 and q.device.type != "cpu":  # CUDA's fused kernels take no mask with `enable_gqa`
            k, v, groups = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1), 1
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=attn.scaling, enable_gqa=groups > 1,
                                             dropout_p=attn.attention_dropout if attn.training else 0.0)
        x = hidden_states.gather(1, gather) + attn.o_proj(out.transpose(1, 2).reshape(rows, slots, -1))
        x = x[valid]  # [asked, hidden], row-major: the router's rows for this layer
        x = x + layer.mlp(layer.post_attention_layernorm(x)[None])[0]
        where = valid.nonzero(as_tuple=True)
        return hidden_states.new_zeros(hidden_states.shape).index_put((where[0], columns[where]), x)

    @staticmethod
    def _query_mask(attention_mask: torch.Tensor | None, columns: torch.Tensor, valid: torch.Tensor, keys: int,
                    width: int) -> torch.Tensor:
        """Bool [rows, 1, slots, keys]: what each asked column's query sees, as in the body's mask; a padding
        slot sees every key (its output is discarded; an empty row would put NaN into the gradients)."""
        if attention_mask is None:  # plain causal over the past columns and these
            past = keys - width
            visible = torch.arange(keys, device=columns.device)[None, None] <= (past + columns)[..., None]
            visible = visible[:, None]
        else:
            m = attention_mask if attention_mask.dtype == torch.bool else attention_mask >= 0
            m = m.expand(columns.shape[0], -1, -1, -1)
            visible = m.gather(2, columns[:, None, :, None].expand(-1, m.shape[1], -1, m.shape[-1]))
        return visible | ~valid[:, None, :, None]
