"""Model presets and the one place that turns a model spec into a `PreTrainedModel`.

A spec is either a preset name (a tiny Qwen3-MoE built from a config with random weights: no
download, runs on a laptop CPU), a local folder written by `save_pretrained`, or a hub id.
Left out on purpose: quantization, device placement and dtype policy beyond a `dtype` argument,
and any training-specific wrapping (LoRA, DDP): the caller owns those.
"""

from __future__ import annotations

import os
from typing import Any

import torch
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedModel

# Qwen3-MoE configs. Sizes are chosen so that a vocabulary of about 1-1.5k tokens gives
# ~1.1M parameters (tiny) and ~7-8M (small), small enough to train on a laptop CPU; what each
# learns is in docs/results/ (README.md there lists the studies). `output_router_logits` stays False: generation with the KV cache
# breaks when it is on in the config; the training forward asks for router logits explicitly.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny-moe": {
        "model_type": "qwen3_moe",
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "intermediate_size": 256,
        "moe_intermediate_size": 128,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "router_aux_loss_coef": 0.01,
        "output_router_logits": False,
    },
    "small-moe": {
        "model_type": "qwen3_moe",
        "hidden_size": 256,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "intermediate_size": 512,
        "moe_intermediate_size": 256,
        "num_experts": 8,
        "num_experts_per_tok": 2,
        "norm_topk_prob": True,
        "max_position_embeddings": 2048,
        "tie_word_embeddings": True,
        "router_aux_loss_coef": 0.01,
        "output_router_logits": False,
    },
}


def _looks_like_path(spec: str) -> bool:
    # A hub id is "name" or "org/name"; anything starting like a path, or with more than one
    # slash, or with a backslash, is meant as a folder.
    return (
        spec.startswith((".", "/", "~"))
        or os.sep in spec.replace("/", "", 1)
        or spec.count("/") > 1
        or "\\" in spec
    )


def model_source(spec: str) -> str:
    """A model spec that is not a preset as what `from_pretrained` takes: an existing folder (user home
    expanded) or a hub id. A spec that looks like a path but names no folder raises FileNotFoundError."""
    expanded = os.path.expanduser(spec)
    if os.path.isdir(expanded):
        return expanded
    if _looks_like_path(spec) or os.path.exists(expanded):
        raise FileNotFoundError(
            f"model spec {spec!r} looks like a local path but no such folder exists; pass a preset "
            f"name ({', '.join(sorted(PRESETS))}), an existing folder written by save_pretrained, "
            "or a hub id like 'org/name'"
        )
    return spec


def build_model(
    spec: str,
    vocab_size: int,
    seed: int = 0,
    *,
    pad_token_id: int | None = None,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
    router_aux_loss_coef: float | None = None,
    experts_implementation: str | None = None,
    dtype: torch.dtype | None = None,
    overrides: dict[str, Any] | None = None,
) -> PreTrainedModel:
    """Build a causal LM from a preset name, a local folder or a hub id.

    For a preset, `vocab_size` and the special token ids size and label the random-init model;
    `seed` makes its weights reproducible without touching the global RNG. For a folder or hub id
    the checkpoint's own vocabulary is kept; a mismatch with `vocab_size` raises (a tokenizer
    that does not match the model would silently produce garbage).
    `experts_implementation` defaults to transformers' choice (`grouped_mm`, fast on CPU too);
    never pass `batched_mm` on CPU (far slower there).
    """
    if spec in PRESETS:
        fields = dict(PRESETS[spec])
        fields.update(overrides or {})
        model_type = fields.pop("model_type")
        fields.update(vocab_size=vocab_size, pad_token_id=pad_token_id, bos_token_id=bos_token_id,
                      eos_token_id=eos_token_id)
        if router_aux_loss_coef is not None:
            fields["router_aux_loss_coef"] = router_aux_loss_coef
        fields["output_router_logits"] = False
        config = AutoConfig.for_model(model_type, **fields)
        kwargs: dict[str, Any] = {}
        if experts_implementation is not None:
            kwargs["experts_implementation"] = experts_implementation
        # fork_rng keeps the caller's global RNG stream untouched by weight init.
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = AutoModelForCausalLM.from_config(config, **kwargs)
        if dtype is not None:
            model = model.to(dtype)
        return model

    source = model_source(spec)
    kwargs = {}
    if experts_implementation is not None:
        kwargs["experts_implementation"] = experts_implementation
    if dtype is not None:
        kwargs["dtype"] = dtype
    try:
        model = AutoModelForCausalLM.from_pretrained(source, **kwargs)
    except ValueError as exc:
        if "Unrecognized configuration class" not in str(exc):
            raise
        model_type = getattr(AutoConfig.from_pretrained(source), "model_type", "?")
        raise ValueError(f"model {spec!r} ({model_type}) is not a causal language model: an agent must generate "
                         "text; pass a checkpoint that AutoModelForCausalLM loads") from None
    if router_aux_loss_coef is not None and hasattr(model.config, "router_aux_loss_coef"):
        model.config.router_aux_loss_coef = router_aux_loss_coef
        if hasattr(model, "router_aux_loss_coef"):
            model.router_aux_loss_coef = router_aux_loss_coef
    if getattr(model.config, "output_router_logits", False):
        # Saved configs sometimes carry True; it breaks cached generation (see module docstring).
        model.config.output_router_logits = False
    model_vocab = model.get_input_embeddings().weight.shape[0]
    if model_vocab < vocab_size:
        raise ValueError(
            f"model {spec!r} has {model_vocab} embeddings but the tokenizer has {vocab_size} tokens; "
            "use the tokenizer saved with this checkpoint, or resize the model's embeddings first"
        )
    return model


def count_parameters(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """Number of distinct parameters (tied weights counted once)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) in seen or (trainable_only and not p.requires_grad):
            continue
        seen.add(id(p))
        total += p.numel()
    return total
