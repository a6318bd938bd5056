"""Hugging Face checkpoints the way users bring them: a byte-level BPE trained offline with the tokenizers
library (its own special tokens and chat template, no scenario entities) and a small random-init MoE saved
with `save_pretrained` beside it.

Families: `qwen3_moe` (also `qwen2_moe`, `olmoe`, `deepseek_v3`) with a ChatML template whose tool results go
inside a user turn (and consecutive results share one), and `mixtral` with an [INST] template that only knows
alternating user/assistant turns.
The templates are written here in the style of those families, not copied from them.
"""

from __future__ import annotations

from pathlib import Path

from policy_helpers import corpus
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

CHATML = (
    "{%- for message in messages %}"
    "{%- if message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
INST = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if (message.role == 'user') != (loop.index0 % 2 == 0) %}"
    "{{- raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{%- endif %}"
    "{%- if message.role == 'user' %}{{- '[INST] ' + message.content + ' [/INST]' }}"
    "{%- else %}{{- message.content + eos_token }}{%- endif %}"
    "{%- endfor %}"
)
# Per family: special tokens (bos, eos, pad, unk, others), template, and the MoE config fields.
FAMILIES = {
    "qwen3_moe": dict(
        tokens=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), extra=["<|im_start|>"], template=CHATML,
        config=dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, head_dim=16, num_experts=4, num_experts_per_tok=2,
                    norm_topk_prob=True, tie_word_embeddings=True)),
    "olmoe": dict(
        tokens=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), extra=["<|im_start|>"], template=CHATML,
        config=dict(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, tie_word_embeddings=False)),
    "qwen2_moe": dict(
        tokens=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), extra=["<|im_start|>"], template=CHATML,
        config=dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
                    shared_expert_intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, num_experts=4, num_experts_per_tok=2, tie_word_embeddings=True)),
    "deepseek_v3": dict(
        tokens=dict(eos_token="<|im_end|>", pad_token="<|endoftext|>"), extra=["<|im_start|>"], template=CHATML,
        config=dict(hidden_size=64, intermediate_size=128, moe_intermediate_size=64, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4, n_shared_experts=1,
                    num_experts_per_tok=2, first_k_dense_replace=0, kv_lora_rank=16, q_lora_rank=32,
                    qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, head_dim=8, n_group=1, topk_group=1,
                    tie_word_embeddings=False)),
    "mixtral": dict(
        tokens=dict(bos_token="<s>", eos_token="</s>", unk_token="<unk>"), extra=[], template=INST,
        config=dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                    tie_word_embeddings=False)),
}


def bpe_tokenizer(family: str, texts: list[str] | None = None, vocab_size: int = 600) -> PreTrainedTokenizerFast:
    """A byte-level BPE (GPT-2 pre-tokenization, no entity tokens) with `family`'s special tokens and template."""
    spec = FAMILIES[family]
    specials = [*spec["tokens"].values(), *spec["extra"]]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts if texts is not None else corpus(), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, clean_up_tokenization_spaces=False,
                                   extra_special_tokens=spec["extra"], **spec["tokens"])
    fast.chat_template = spec["template"]
    return fast


def save_checkpoint(folder: Path, family: str, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> Path:
    """A random-init `family` MoE sized to `tokenizer`, saved with it by `save_pretrained` into `folder`."""
    import torch

    fields = dict(FAMILIES[family]["config"], vocab_size=len(tokenizer), max_position_embeddings=4096,
                  pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                  eos_token_id=tokenizer.eos_token_id)
    config = AutoConfig.for_model(family, **fields)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder
