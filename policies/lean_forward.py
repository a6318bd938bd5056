"""A lean inference forward for Qwen3-MoE-family models: what the rollout's decoding loop calls per step.

A transformers forward spends most of a small model's decoding step outside arithmetic: kwarg and
output plumbing, a 4D mask built from the 2D one by a general mask factory, output recorders, and an
expert loop that pays one small matmul per expert per layer. `LeanForward` computes the same function
from the same weights with plain tensor ops: the mask built once per call from the 2D mask with holes
(the caller's layout: left padding, turn-cache holes, explicit positions), the KV cache updated through
the transformers `Cache` the caller passes (so the turn cache, row parking and `batch_select_indices`
work unchanged, and a cache filled by the full model continues here and back), the router as the model
computes it, and the experts grouped by expert: padded to the busiest expert's count in one batched matmul
on tens of tokens (decoding), one matmul per chosen expert on a token or two or on thousands (prefill), on
real tokens only (padding columns skip the MoE: no real query reads them). The last layer runs its query,
attention and MoE for each row's last column only: nothing reads the others' outputs (their keys and values
still go to the cache), which takes most of a layer off every prefill.
Logits match the model's forward to float tolerance (tested), not bit for bit.

Left out: training (no gradients, no router logits: the learner scores through the model's own
forward), sliding-window attention, models of other families (`supports` says False and the caller
keeps the model's forward), hidden-state outputs.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from transformers import DynamicCache, PreTrainedModel
from transformers.cache_utils import DynamicLayer

from policies.kv_room import append_kv

SUPPORTED_TYPES = frozenset({"qwen3_moe"})
GROUPED_ROWS_PER_EXPERT = 128
"""From this many routed rows per expert on average, each expert's rows go through their own matmuls (prefill:
the loop costs little against the matmuls, and no expert pads to the busiest one's count); below it, down to
one row per expert, every expert's rows are padded to the busiest expert's count and go through one batched
matmul (decoding tens of rows). With fewer routed rows than experts (a row or two), the loop runs too: it
reads only the chosen experts' weights, and reading weights is what such a step waits on."""
MAX_PADDING = 2
"""The padded block holds at most this many times the routed rows; routing more skewed than that (many rows
feeding the same forced tokens go to the same experts) loops over the experts instead."""
GROUP_CALL_CELLS = 4096
"""What one more attention call costs, in query x key cells: a run of rows becomes its own call, querying only
from its own first real column, when that saves more cells than this."""


def supports(model: PreTrainedModel) -> bool:
    """Whether `LeanForward` computes this model's function (family, attention kind, no sliding window)."""
    config = getattr(model, "config", None)
    return (
        config is not None
        and getattr(config, "model_type", None) in SUPPORTED_TYPES
        and getattr(config, "sliding_window", None) in (None, 0)
        and not getattr(config, "use_sliding_window", False)
        and getattr(config, "_attn_implementation", "sdpa") in ("sdpa", "eager")
        and (getattr(config, "rope_parameters", None) or {}).get("rope_type", "default") == "default"
        and getattr(model, "hf_quantizer", None) is None
        and all(_plain_experts(layer.mlp) and _plain_modules(layer) for layer in model.get_decoder().layers)
    )


def _plain_modules(layer: torch.nn.Module) -> bool:
    """No hooks and plain linear projections: a LoRA or quantized wrapper, an offload hook or any forward hook
    may change what the module computes, which reading its `weight` would silently skip. transformers' own
    output-capturing hooks (installed by the first forward that asks for router logits, and kept) only record
    outputs: they do not count, or the answer would change once the learner has run."""
    attn = layer.self_attn
    if any(type(m) is not torch.nn.Linear for m in (attn.q_proj, attn.k_proj, attn.v_proj, attn.o_proj)):
        return False
    return not any(m._forward_pre_hooks or hasattr(m, "_hf_hook") or any(not _recording(h) for h in m._forward_hooks.values())
                   for m in layer.modules())


def _recording(hook: Any) -> bool:
    return getattr(hook, "__module__", "") == "transformers.utils.output_capturing"


def _plain_experts(mlp: Any) -> bool:
    """A dense MLP, or experts in the concatenated gate/up layout without bias, transposition or post-norm."""
    experts = getattr(mlp, "experts", None)
    if experts is None:
        return hasattr(mlp, "gate_proj")
    return (getattr(experts, "has_gate", True) and getattr(experts, "is_concatenated", True)
            and not getattr(experts, "is_transposed", False) and not getattr(experts, "has_bias", False)
            and not getattr(experts, "has_post_expert_norm", False) and hasattr(experts, "gate_up_proj"))


def _rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    # as the model computes it: in float32, then back to the input dtype before the weight
    return weight * F.rms_norm(x.float(), (x.shape[-1],), eps=eps).to(x.dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LeanForward:
    """The inference forward of one model (see the module docstring). Reads the weights at every call, so it
    follows the optimizer's in-place updates."""

    def __init__(self, model: PreTrainedModel) -> None:
        if not supports(model):
            raise ValueError(f"no lean forward for model type {getattr(model.config, 'model_type', '?')!r}; "
                             "use the model's own forward")
        self.model = model
        config = model.config
        self.eps = float(config.rms_norm_eps)
        self.head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)
        self.heads = int(config.num_attention_heads)
        self.kv_heads = int(config.num_key_value_heads)
        self.scaling = self.head_dim ** -0.5

    @torch.inference_mode()
    def __call__(self, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any | None
                 ) -> tuple[torch.Tensor, Any]:
        """Logits [n, vocab] at each row's last column, and the cache after this chunk.

        `ids` [n, W] (left-padded), `attention` [n, past + W] (1 = real token; holes allowed), `positions`
        [n, W] (each real token's position), `cache` a transformers cache holding `past` columns, or None.
        """
        base = self.model.get_decoder()  # read per call, as every weight: a restored model may swap its modules
        if cache is None:
            cache = DynamicCache(config=self.model.config)
        n, width = ids.shape
        x = base.embed_tokens(ids)
        cos, sin = base.rotary_emb(x, positions)
        cos, sin = cos[:, None], sin[:, None]
        padding, causal = self._mask_terms(attention, width, x.dtype)
        runs = query_groups(attention[:, -width:], attention.shape[1])
        groups = [(lo, hi, start, padding[lo:hi, None, None, :] + causal[None, None, start:]) for lo, hi, start in runs]
        real = attention[:, -width:].reshape(-1).bool()
        every_token_real = bool(real.all())
        layers = base.layers
        for index, layer in enumerate(layers[:-1]):
            h = _rms_norm(x, layer.input_layernorm.weight, self.eps)
            x = x + self._attention(layer.self_attn, h, cos, sin, groups, cache, index)
            h = _rms_norm(x, layer.post_attention_layernorm.weight, self.eps)
            flat = h.reshape(n * width, -1)
            if every_token_real:
                out = self._mlp(layer.mlp, flat)
            else:  # padding columns are never read by a real query: skip their MLP
                out = torch.zeros_like(flat)
                out[real] = self._mlp(layer.mlp, flat[real])
            x = x + out.reshape(n, width, -1)
        # The last layer's output is read only at each row's last column (the logits); every column still
        # writes its keys and values to the cache, but only the last one queries, and only it goes through
        # the feed-forward. A prefill of W columns saves W - 1 columns of that layer's attention and MoE.
        layer = layers[-1]
        h = _rms_norm(x, layer.input_layernorm.weight, self.eps)
        # rows that feed nothing this call (finished rows still in the batch) query nothing in the last layer either;
        # one run of every row: its mask's last query row is the last column's (no second mask to build)
        if len(groups) == 1 and runs[0][2] == 0:
            last_query = [(0, n, 0, groups[0][3][:, :, -1:])]
        else:
            last_query = [(lo, hi, 0 if start < width else 1, padding[lo:hi, None, None, :] + causal[None, None, -1:])
                          for lo, hi, start in _merged(runs, width)]
        x = x[:, -1:] + self._attention(layer.self_attn, h, cos, sin, last_query, cache, len(layers) - 1,
                                        last_only=True)
        h = _rms_norm(x, layer.post_attention_layernorm.weight, self.eps)
        x = x + self._mlp(layer.mlp, h.reshape(n, -1)).reshape(n, 1, -1)
        last = _rms_norm(x[:, -1], base.norm.weight, self.eps)
        head = self.model.get_output_embeddings()  # read per call: a resized vocabulary replaces it
        return F.linear(last, head.weight, head.bias), cache

    @staticmethod
    def _mask(attention: torch.Tensor, width: int, dtype: torch.dtype) -> torch.Tensor:
        """Additive [n, 1, W, past + W]: 0 where a query sees a column (the real columns up to its own), a large
        negative elsewhere. Additive because SDPA would turn a bool mask into this once per layer; built once
        per call and query group (every layer shares it) as one broadcast sum of a per-row padding term and a
        causal term (`_mask_terms`): on a prefill that reads a long conversation, building the mask costs as
        much as a layer's attention. Finite, so a padding query that sees no column averages finite values
        instead of making NaN; no real query reads it."""
        padding, causal = LeanForward._mask_terms(attention, width, dtype)
        return padding[:, None, None, :] + causal[None, None]

    @staticmethod
    def _mask_terms(attention: torch.Tensor, width: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """The mask's two terms: padding [n, past + W] (hides each row's holes) and causal [W, past + W]."""
        total = attention.shape[1]
        past = total - width
        hidden = torch.finfo(dtype).min / 2  # the two terms still sum to a finite number
        columns = torch.arange(total, device=attention.device)
        query_columns = past + torch.arange(width, device=attention.device)
        causal = torch.zeros(width, total, dtype=dtype, device=attention.device)
        causal.masked_fill_(columns[None, :] > query_columns[:, None], hidden)
        padding = torch.zeros(attention.shape, dtype=dtype, device=attention.device)
        padding.masked_fill_(attention == 0, hidden)
        return padding, causal

    def _attention(self, attn: Any, h: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   query: list[tuple[int, int, int, torch.Tensor]], cache: Any, index: int, last_only: bool = False
                   ) -> torch.Tensor:
        """The layer's attention output [n, W, hidden] (`last_only`: [n, 1, hidden], the last column's query
        alone, while every column's keys and values still enter the cache). `query`: (first row, end row, first
        column queried, their mask) covering the rows in order; the columns before a group's first are padding
        that no real query reads, and their output is zero."""
        n, width, _ = h.shape
        k = F.linear(h, attn.k_proj.weight, attn.k_proj.bias).view(n, width, self.kv_heads, self.head_dim)
        v = F.linear(h, attn.v_proj.weight, attn.v_proj.bias).view(n, width, self.kv_heads, self.head_dim)
        k = _rms_norm(k, attn.k_norm.weight, self.eps).transpose(1, 2)
        v = v.transpose(1, 2)
        k = k * cos + _rotate_half(k) * sin
        if last_only:
            h, cos, sin, width = h[:, -1:], cos[:, :, -1:], sin[:, :, -1:], 1
        q = F.linear(h, attn.q_proj.weight, attn.q_proj.bias).view(n, width, self.heads, self.head_dim)
        q = _rms_norm(q, attn.q_norm.weight, self.eps).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        layers = getattr(cache, "layers", ())
        layer = layers[index] if len(layers) > index and not getattr(cache, "offloading", False) else None
        # a plain dynamic layer grows in place (`kv_room`); any other kind keeps its own update
        keys, values = append_kv(layer, k, v) if type(layer) is DynamicLayer else cache.update(k, v, index)
        groups = self.heads // self.kv_heads
        if groups > 1 and q.device.type != "cpu":
            # CUDA's fused kernels take no mask with `enable_gqa`: give every query head its key/value head instead
            keys, values = keys.repeat_interleave(groups, dim=1), values.repeat_interleave(groups, dim=1)
            groups = 1
        gqa = groups > 1
        if len(query) == 1 and query[0][2] == 0:
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=query[0][3], scale=self.scaling,
                                                 enable_gqa=gqa)
        else:
            out = q.new_zeros(q.shape)
            for lo, hi, start, mask in query:
                if start < width:
                    out[lo:hi, :, start:] = F.scaled_dot_product_attention(
                        q[lo:hi, :, start:], keys[lo:hi], values[lo:hi], attn_mask=mask, scale=self.scaling,
                        enable_gqa=gqa)
        return F.linear(out.transpose(1, 2).reshape(n, width, -1), attn.o_proj.weight, attn.o_proj.bias)

    def _mlp(self, mlp: Any, h: torch.Tensor) -> torch.Tensor:
        """The layer's feed-forward on tokens [T, hidden]: the sparse MoE block, or a dense MLP layer."""
        if h.shape[0] == 0:
            return h
        gate = getattr(mlp, "gate", None)
        if gate is None:  # a dense layer (`mlp_only_layers`)
            return F.linear(mlp.act_fn(F.linear(h, mlp.gate_proj.weight)) * F.linear(h, mlp.up_proj.weight),
                            mlp.down_proj.weight)
        logits = F.linear(h, gate.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float)
        top, chosen = torch.topk(probs, gate.top_k, dim=-1)
        if gate.norm_topk_prob:
            top = top / top.sum(dim=-1, keepdim=True)
        top = top.to(h.dtype)
        return self._experts(mlp.experts, h, top, chosen)

    @staticmethod
    def _experts(experts: Any, h: torch.Tensor, top: torch.Tensor, chosen: torch.Tensor) -> torch.Tensor:
        """The routed experts on tokens [T, hidden]: the tokens sorted by expert, then either padded to the busiest
        expert's count in one [experts, busiest, hidden] block through two batched matmuls, or one matmul per
        expert on its contiguous slice (see `GROUPED_ROWS_PER_EXPERT` and `MAX_PADDING`)."""
        k = chosen.shape[1]
        count, _, hidden = experts.gate_up_proj.shape
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        per_expert = torch.bincount(flat, minlength=count)
        token, weight = order // k, top.reshape(-1)[order, None]
        result = torch.zeros_like(h)
        if count <= flat.numel() < GROUPED_ROWS_PER_EXPERT * count:
            width = int(per_expert.max())
            if count * width <= MAX_PADDING * flat.numel():
                expert = flat[order]
                # the i-th routed row of expert e goes to slot e * width + i
                slot = expert * width + torch.arange(flat.numel(), device=h.device) - (per_expert.cumsum(0) - per_expert)[expert]
                block = h.new_zeros(count * width, hidden)
                block[slot] = h[token]
                gate_up = torch.bmm(block.view(count, width, hidden), experts.gate_up_proj.transpose(1, 2))
                out = torch.bmm(experts._apply_gate(gate_up), experts.down_proj.transpose(1, 2))
                return result.index_add_(0, token, out.view(count * width, hidden)[slot] * weight)
        rows = h[token]
        out = torch.empty_like(rows)
        start = 0
        for e, c in enumerate(per_expert.tolist()):
            if c:
                part = rows[start:start + c]
                out[start:start + c] = F.linear(experts._apply_gate(F.linear(part, experts.gate_up_proj[e])),
                                                experts.down_proj[e])
                start += c
        return result.index_add_(0, token, out * weight)


def query_groups(chunk: torch.Tensor, keys: int) -> list[tuple[int, int, int]]:
    """Runs of rows that attend together: (first row, end row, first column queried), covering the rows in order.

    `chunk` [n, W] is the mask of the columns this call feeds (1 = real), `keys` how many columns each query
    reads. A row's queries before its first real column are left padding that no real query reads; rows
    whose chunks differ in length (observations of different lengths in one prefill) would otherwise all
    query from the longest one's first column. A row joins the run before it unless starting a run of its own
    (one more attention call, `GROUP_CALL_CELLS`) saves more query x key cells than it costs. Only
    contiguous runs: their keys and values are views of the cache, never copies.
    """
    n, width = chunk.shape
    real = chunk != 0
    if n == 0 or bool(real.all()):
        return [(0, n, 0)]
    first = torch.where(real.any(1), real.to(torch.int8).argmax(1), width).tolist()
    call_columns = GROUP_CALL_CELLS / max(keys, 1)
    groups, lo, start = [], 0, first[0]
    for i in range(1, n):
        size, column = i - lo, first[i]
        joined = (size + 1) * (width - min(start, column))
        apart = size * (width - start) + (width - column) + call_columns
        if joined <= apart:
            start = min(start, column)
        else:
            groups.append((lo, i, start))
            lo, start = i, column
    groups.append((lo, n, start))
    return groups


def _merged(runs: list[tuple[int, int, int]], width: int) -> list[tuple[int, int, int]]:
    """The runs for a one-column query: neighbouring runs that query at all become one (their start no longer
    differs), runs that query nothing stay apart."""
    merged: list[tuple[int, int, int]] = []
    for lo, hi, start in runs:
        queries = start < width
        if merged and (merged[-1][2] < width) == queries:
            merged[-1] = (merged[-1][0], hi, min(merged[-1][2], start))
        else:
            merged.append((lo, hi, start))
    return merged
