"""RL with LoRA adapters per agent on one frozen base: the base stays as SFT left it, each agent's adapter
learns, the checkpoint holds the base and peft adapters, evaluation reads it, and a resumed run ends identical."""

from __future__ import annotations

import dataclasses
import math
import os
import shutil
import sys

import mlflow
import pytest
import torch
from run_helpers import tiny
from safetensors.torch import load_file, load_model
from test_resume import assert_identical, weights

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "policies"))
from hf_helpers import bpe_tokenizer, save_checkpoint  # noqa: E402

from marl.config import ConfigError  # noqa: E402
from marl.engine.policy_map import PolicyMap  # noqa: E402
from marl.run.build import LORA_BASE_FILE, load_policy, new_policy  # noqa: E402
from marl.run.checkpoint import read_meta  # noqa: E402
from marl.run.resume import points  # noqa: E402
from marl.run.train import train  # noqa: E402
from policies.presets import build_model  # noqa: E402


@pytest.fixture(scope="module")
def user_model(tmp_path_factory):
    return save_checkpoint(tmp_path_factory.mktemp("qwen") / "model", "qwen3_moe", bpe_tokenizer("qwen3_moe"))


def lora_cfg(tmp_path, model, **fields):
    cfg = tiny(tmp_path, scenario="info_split", agents=2, policy_mapping="agent", **fields)
    cfg.policy.model, cfg.policy.max_new_tokens = str(model), 128
    cfg.lora.rank, cfg.lora.learning_rate = 4, 1e-2
    cfg.iterations = 3
    return cfg


def test_each_agent_trains_its_own_adapter_on_the_untouched_base(tmp_path, user_model):
    result = train(lora_cfg(tmp_path, user_model))
    meta = read_meta(result.checkpoint)
    assert meta.adapters == ("agent_0", "agent_1") and meta.tokenizer.kind == "pretrained"
    run_dir = result.checkpoint.parent
    base = build_model(str(result.checkpoint), 0).state_dict()
    sft_end = build_model(str(user_model), 0)
    load_model(sft_end, str(run_dir / LORA_BASE_FILE))  # the base as SFT left it, written when RL started
    assert all(torch.equal(base[k], v) for k, v in sft_end.state_dict().items())  # RL left it alone
    adapters = {pid: load_file(result.checkpoint / "adapters" / pid / "adapter_model.safetensors")
                for pid in meta.adapters}
    for pid, tensors in adapters.items():  # LoRA's B starts at zero: a non-zero B is an adapter that learned
        assert any(t.abs().sum() > 0 for k, t in tensors.items() if "lora_B" in k), pid
    a, b = adapters["agent_0"], adapters["agent_1"]
    assert any(not torch.equal(a[k], b[k]) for k in a if "lora_B" in k)  # each agent its own
    run = mlflow.MlflowClient(result.tracking_uri).get_run(result.run_id)
    trainable = int(run.data.params["lora.trainable_parameters"])
    assert 0 < trainable < int(run.data.params["model.parameters"]) // 2
    assert run.data.metrics["train/kl"] >= 0 and "moe/routing_agreement" in run.data.metrics
    policies, chat, _ = load_policy(result.checkpoint, device="cpu")
    assert isinstance(policies, PolicyMap) and set(policies.policies) == {"agent_0", "agent_1"}
    # a run that starts from this checkpoint starts from agent_0's policy: its adapter merged into the base
    start = dataclasses.replace(lora_cfg(tmp_path, user_model).policy, model=str(result.checkpoint), device="cpu")
    merged = new_policy(start, policies["agent_0"].tokenizer, seed=0)
    ids = torch.tensor([chat.first("Task: which card do you hold?")])
    with torch.no_grad():
        torch.testing.assert_close(merged.model(input_ids=ids).logits, policies["agent_0"].model(input_ids=ids).logits,
                                   atol=1e-4, rtol=0)


def test_a_lora_run_resumed_from_a_middle_point_ends_bit_identical(tmp_path, user_model):
    def cfg_at(path):
        cfg = lora_cfg(path, user_model)
        cfg.iterations, cfg.eval_episodes = 4, 0
        cfg.checkpoint.every, cfg.checkpoint.keep = 1, 10
        return cfg

    whole = train(cfg_at(tmp_path / "whole"))
    found = points(whole.checkpoint.parent / "resume")
    expected = weights(whole.checkpoint)
    shutil.rmtree(whole.checkpoint)
    for later in found[3:]:
        shutil.rmtree(later)
    resumed = train(dataclasses.replace(cfg_at(tmp_path / "other"), resume=str(found[2])))
    assert resumed.run_id == whole.run_id
    assert_identical(expected, resumed.checkpoint)


def test_a_bfloat16_base_carries_float32_adapters(tmp_path, user_model):
    cfg = lora_cfg(tmp_path, user_model)
    cfg.policy.dtype, cfg.iterations = "bfloat16", 2
    result = train(cfg)
    base = load_file(result.checkpoint / "model.safetensors")
    assert {t.dtype for t in base.values()} == {torch.bfloat16}
    adapter = load_file(result.checkpoint / "adapters" / "agent_0" / "adapter_model.safetensors")
    assert {t.dtype for t in adapter.values()} == {torch.float32}  # updates accumulate in full precision
    run = mlflow.MlflowClient(result.tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED" and math.isfinite(run.data.metrics["train/kl"])


def test_lora_settings_are_checked():
    from marl.config import LoraConfig

    with pytest.raises(ConfigError, match="lora.rank"):
        LoraConfig(rank=-1)
    with pytest.raises(ConfigError, match="lora.targets"):
        LoraConfig(rank=4, targets=())
