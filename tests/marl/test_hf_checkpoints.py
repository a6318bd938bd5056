"""`--policy.model <folder>` with a user's own Hugging Face MoE checkpoint: its tokenizer and chat template,
trained end to end, saved, loaded back; clear errors for what cannot work."""

from __future__ import annotations

import os
import sys

import mlflow
import pytest
from run_helpers import tiny

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "policies"))
from hf_helpers import bpe_tokenizer, save_checkpoint  # noqa: E402

from marl.run.build import load_policy  # noqa: E402
from marl.run.train import train  # noqa: E402


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral", "olmoe", "qwen2_moe", "deepseek_v3"])
def checkpoint(request, tmp_path_factory):
    family = request.param
    return family, save_checkpoint(tmp_path_factory.mktemp(family) / "model", family, bpe_tokenizer(family))


def test_a_users_checkpoint_trains_and_loads_back(checkpoint, tmp_path):
    family, folder = checkpoint
    cfg = tiny(tmp_path)
    cfg.policy.model, cfg.policy.max_new_tokens = str(folder), 128
    result = train(cfg)
    run = mlflow.MlflowClient(result.tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    assert metrics["sft/loss"] > 0 and "train/kl" in metrics
    # the MoE figures of every family: the share of tokens per expert in every layer, how routing moved, and the
    # load-balancing loss where the family defines one (DeepSeek-V3 balances by a router bias instead)
    assert (family == "deepseek_v3") == ("moe/aux_loss" not in metrics)
    assert family == "deepseek_v3" or metrics["moe/aux_loss"] > 0
    assert {f"moe/expert_load/layer_{i}/expert_{j}" for i in range(2) for j in range(4)} <= set(metrics)
    assert 0.0 < metrics["moe/routing_agreement"] <= 1.0 and "moe/routing_agreement/layer_1" in metrics
    policy, chat, _ = load_policy(result.checkpoint, device="cpu")
    assert policy.model.config.model_type == family
    assert chat.end_id == policy.tokenizer.convert_tokens_to_ids(policy.tokenizer.eos_token)
    assert chat.pieces == policy.chat.pieces and chat.pieces.head.startswith(("<s>", "<|im_start|>"))


def test_a_folder_without_its_tokenizer_is_refused(tmp_path):
    folder = save_checkpoint(tmp_path / "model", "qwen3_moe", bpe_tokenizer("qwen3_moe"))
    for name in os.listdir(folder):
        if name.startswith(("tokenizer", "special_tokens", "chat_template")):
            os.remove(folder / name)
    cfg = tiny(tmp_path)
    cfg.policy.model = str(folder)
    with pytest.raises(ValueError, match="has no tokenizer"):
        train(cfg)


def test_a_tokenizer_larger_than_the_model_is_refused(tmp_path):
    small = bpe_tokenizer("qwen3_moe", vocab_size=400)
    folder = save_checkpoint(tmp_path / "model", "qwen3_moe", small)
    bpe_tokenizer("qwen3_moe", vocab_size=700).save_pretrained(folder)  # another tokenizer over the model's
    cfg = tiny(tmp_path)
    cfg.policy.model = str(folder)
    with pytest.raises(ValueError, match="embeddings but the tokenizer has"):
        train(cfg)


def test_a_model_that_is_not_a_causal_lm_is_refused(tmp_path):
    from transformers import AutoConfig, AutoModel

    tok = bpe_tokenizer("qwen3_moe")
    config = AutoConfig.for_model("t5", vocab_size=len(tok), d_model=16, d_kv=8, d_ff=32, num_layers=1, num_heads=2)
    AutoModel.from_config(config).save_pretrained(tmp_path / "t5")
    tok.save_pretrained(tmp_path / "t5")
    cfg = tiny(tmp_path)
    cfg.policy.model = str(tmp_path / "t5")
    with pytest.raises(ValueError, match="not a causal language model"):
        train(cfg)


def test_a_path_that_does_not_exist_is_refused(tmp_path):
    cfg = tiny(tmp_path)
    cfg.policy.model = str(tmp_path / "missing" / "model")
    with pytest.raises(FileNotFoundError, match="no such folder"):
        train(cfg)
