"""SFT warm start on real expert demonstrations (tiny model, seconds)."""

import copy
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

import scenarios
from marl.config import TrainConfig, WarmStartConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import build_policy
from marl.run.sft import conversations, demonstration_episodes, run_sft
from policies.chat import ChatFormat


def test_sft_learns_and_leaves_a_clean_model(tmp_path):
    cfg = TrainConfig(seed=0)
    cfg.policy.tokenizer_episodes = 100
    make_env = partial(scenarios.make, "tool_use", split="train")
    tokenizer, model, policy = build_policy(cfg, make_env, Path(tmp_path), np.random.default_rng(0))
    chat = ChatFormat(tokenizer)
    episodes = demonstration_episodes(RolloutWorker(make_env, None, None), list(range(64)))
    columns = conversations(chat, episodes)
    # The demonstrations are the expert's own actions, masked to the action tokens only.
    ids, mask = columns["input_ids"][0], columns["assistant_masks"][0]
    assert 0 < sum(mask) < len(ids)
    logged: list[dict] = []
    # A step budget, not a wall-clock one, so the test does not depend on how busy the machine is.
    budget = WarmStartConfig(seconds=600, max_steps=12, batch_size=8, warmup_steps=2, lr_decay_fraction=0.5)
    figures = run_sft(model, tokenizer, columns, budget, seed=0, log=lambda m, step: logged.append(m))
    assert figures["sft/steps"] == 12
    # annealed over the last 6 of the 12 steps, and logged as the rate the optimizer really used
    assert [m["sft/learning_rate"] for m in logged if "sft/learning_rate" in m] == [pytest.approx(budget.learning_rate / 3)]
    losses = [m["sft/loss"] for m in logged if "sft/loss" in m]
    assert losses and np.isfinite(losses).all()

    # Nothing of the trainer may stay attached: generation works (router logits off again) and a
    # deepcopy (the RL reference) is independent of the policy.
    assert model.config.output_router_logits is False
    assert "forward" not in vars(model)
    reference = copy.deepcopy(model)
    x = torch.tensor([ids[:20]], device=model.device)
    with torch.no_grad():
        next(model.parameters()).add_(0.5)
        assert not torch.equal(model(x).logits, reference(x).logits)
    env = make_env()
    obs, _ = env.reset(seed=5)
    gen = policy.generate([chat.first(obs["agent_0"]["text"])], [env.action_grammar("agent_0")], greedy=True)
    assert gen.finished[0] and gen.texts[0] in env.action_grammar("agent_0")


def test_a_step_budget_anneals_too_whichever_budget_ends_first():
    from marl.run.sft import budget_decay

    steps = WarmStartConfig(seconds=100_000, max_steps=1000, lr_decay_fraction=0.2)
    assert budget_decay(50.0, 700, steps) == 1.0
    assert budget_decay(50.0, 900, steps) == pytest.approx(0.5)  # the clock is far from its end
    clock = WarmStartConfig(seconds=450, max_steps=100_000, lr_decay_fraction=0.2)
    assert budget_decay(405.0, 10, clock) == pytest.approx(0.5)
    assert budget_decay(405.0, 10, WarmStartConfig(seconds=450, max_steps=100_000)) == 1.0  # off


def test_learning_rate_anneals_over_the_end_of_the_time_budget():
    from marl.run.sft import decay_factor

    assert decay_factor(100.0, 450.0, 0.0) == 1.0  # off: constant to the end
    assert decay_factor(300.0, 450.0, 0.2) == 1.0  # before the last 20% (360 s)
    assert decay_factor(405.0, 450.0, 0.2) == pytest.approx(0.5)
    assert decay_factor(450.0, 450.0, 0.2) == 0.0 and decay_factor(500.0, 450.0, 0.2) == 0.0
    assert decay_factor(0.0, 450.0, 1.0) == 1.0 and decay_factor(225.0, 450.0, 1.0) == pytest.approx(0.5)


def test_perturbed_demonstrations_show_recovery_and_never_teach_the_slip(tmp_path):
    from marl.run.sft import Perturbation, imitable, perturbed_fraction

    make_env = partial(scenarios.make, "info_split", n_agents=3, split="train")
    worker = RolloutWorker(make_env, None, None)
    seeds = list(range(120))
    clean = demonstration_episodes(worker, seeds)
    noisy = demonstration_episodes(worker, seeds, noise=0.15, seed=3)
    assert perturbed_fraction(clean) == 0.0 and 0.10 < perturbed_fraction(noisy) < 0.20
    assert noisy[0].transcript == demonstration_episodes(worker, seeds, noise=0.15, seed=3)[0].transcript  # seeded
    # the expert gets teams back on track: most perturbed teams still succeed
    perturbed = {ep.seed for ep in noisy if any(isinstance(t, Perturbation) for _, t in ep.transcript)}
    solved = {ep.seed for ep in noisy if ep.reason == "success"}
    assert len(perturbed) > 30 and len(perturbed & solved) / len(perturbed) > 0.8

    cfg = TrainConfig(seed=0, scenario="info_split", agents=3)
    cfg.policy.tokenizer_episodes = 60
    tokenizer, _, _ = build_policy(cfg, make_env, Path(tmp_path), np.random.default_rng(0))
    chat = ChatFormat(tokenizer)
    columns = conversations(chat, noisy)
    kept = [ep for ep in noisy if imitable(ep)]
    assert len(columns["input_ids"]) == len(kept)
    for ep, ids, mask in zip(kept, columns["input_ids"], columns["assistant_masks"], strict=True):
        trained = [ids[i] for i in range(len(ids)) if mask[i]]
        expected = [tok for role, text in ep.transcript if role == "action" and not isinstance(text, Perturbation)
                    for tok in chat.encode_action(text)]
        assert trained == expected  # exactly the expert's actions are imitated, never a perturbation
    with pytest.raises(ValueError, match="demo_noise"):
        bad = TrainConfig()
        bad.sft.demo_noise = 1.0
        bad.validate()


def test_sft_weighs_load_balancing_by_the_configs_coefficient(tmp_path):
    # The model's own loss with labels (what SFT minimizes) adds coef * aux: that coef is the config's.
    cfg = TrainConfig(seed=0)
    cfg.policy.tokenizer_episodes, cfg.policy.router_aux_loss_coef = 100, 0.123
    make_env = partial(scenarios.make, "tool_use", split="train")
    tokenizer, model, _ = build_policy(cfg, make_env, Path(tmp_path), np.random.default_rng(0))
    x = torch.tensor([list(range(3, 40))], device=model.device)
    with torch.no_grad():
        out = model(input_ids=x, labels=x, output_router_logits=True)
        plain = model(input_ids=x, labels=x).loss  # no router logits: the causal-LM loss alone
    assert out.aux_loss is not None and out.aux_loss > 0
    assert out.loss.item() == pytest.approx(plain.item() + 0.123 * out.aux_loss.item(), rel=1e-5)
