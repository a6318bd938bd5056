"""The RL step on real parts: tool_use, a tiny random-init MoE, the offline tokenizer, seeded.

What a user relies on: constrained decoding never produces an invalid action on the real grammar;
the learner's recomputed logprobs equal the rollout's before the first update; an update changes
the policy (and never the frozen reference); a NaN loss skips the step and a streak aborts;
checkpoints refuse NaN weights and never lose the previous good one.
"""

import copy
import dataclasses
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

import scenarios
from marl.config import TrainConfig
from marl.engine.advantages import group_advantages, per_turn
from marl.engine.errors import NonFiniteError
from marl.engine.learner import Learner
from marl.engine.rollout import RolloutWorker
from marl.engine.sequences import episode_sequence
from marl.engine.summary import summarize
from marl.run.build import build_policy
from marl.run.checkpoint import CheckpointError, CheckpointMeta, TokenizerInfo, read_meta, save_checkpoint
from policies.chat import ChatFormat
from policies.llm_policy import LLMPolicy


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = TrainConfig(seed=0)
    cfg.policy.tokenizer_episodes = 200
    make_env = partial(scenarios.make, "tool_use", n_agents=1, split="train")
    out = Path(tmp_path_factory.mktemp("runs"))
    tokenizer, model, policy = build_policy(cfg, make_env, out, np.random.default_rng(0))
    return cfg, make_env, tokenizer, model, policy


def reference_of(policy: LLMPolicy) -> LLMPolicy:
    ref = copy.deepcopy(policy.model).eval()
    return LLMPolicy(ref, policy.tokenizer, constrained=policy.constrained, temperature=policy.temperature,
                     max_new_tokens=policy.max_new_tokens)


def test_constrained_decoding_never_yields_an_invalid_action(setup):
    _, make_env, tokenizer, _, policy = setup
    for split in ("basic", "hard", "adversarial"):
        worker = RolloutWorker(partial(scenarios.make, "tool_use", split=split), policy, ChatFormat(tokenizer))
        seeds = make_env().eval_seeds(split, 24)
        batch = worker.collect(seeds, greedy=False, sample_seed=1)
        assert len(batch.turns) >= 24
        assert summarize(batch)["rollout/invalid_action_rate"] == 0.0, split


def test_rollout_logprobs_equal_recomputed_before_update(setup):
    _, make_env, tokenizer, _, policy = setup
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    batch = worker.collect(list(range(16)), greedy=False, sample_seed=3)
    turns = batch.turns
    with torch.no_grad():
        scores = policy.sequence_logprobs([t.prompt_ids for t in turns], [t.action_ids for t in turns],
                                          [t.allowed for t in turns])
    worst = 0.0
    for row, t in enumerate(turns):
        got = scores.logprobs[row, : len(t.action_ids)].cpu()
        worst = max(worst, (got - torch.tensor(t.logprobs)).abs().max().item())
    assert worst < 1e-4
    # The learner scores each episode as one sequence (all turns' spans in one forward): same numbers.
    pieces = [episode_sequence(batch, e) for e in range(len(batch.episodes))]
    with torch.no_grad():
        spans = policy.span_logprobs([p.sequence for p in pieces], [p.spans for p in pieces],
                                     [[t.allowed for t in p.turns] for p in pieces])
    flat = [t for p in pieces for t in p.turns]
    assert len(flat) == len(turns) and any(len(p.turns) > 1 for p in pieces)
    worst = max((spans.logprobs[row, : len(t.action_ids)].cpu() - torch.tensor(t.logprobs)).abs().max().item()
                for row, t in enumerate(flat))
    assert worst < 1e-4


def test_update_changes_policy_not_reference(setup):
    cfg, make_env, tokenizer, model, _ = setup
    policy = LLMPolicy(copy.deepcopy(model), tokenizer)
    reference = reference_of(policy)
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    seeds = [s for s in range(4) for _ in range(4)]
    batch = worker.collect(seeds, groups=[s for s in range(4) for _ in range(4)], sample_seed=5)
    adv = group_advantages(batch.episodes)
    if not adv.include.any():  # untrained returns can tie: give the update something to learn from
        adv.advantages[:] = np.linspace(-1, 1, len(adv.advantages))
        adv.include[:] = True
    adv = per_turn(batch, adv)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    ref_before = {k: v.clone() for k, v in reference.model.state_dict().items()}
    metrics = Learner(policy, reference, cfg.rl, aux_coef=0.001).update(batch, adv)
    changed = sum(not torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert changed > 0
    assert all(torch.equal(ref_before[k], v) for k, v in reference.model.state_dict().items())
    for key in ("train/policy_loss", "train/kl", "train/entropy", "train/clip_frac", "train/grad_norm",
                "moe/aux_loss", "moe/expert_load_entropy"):
        assert np.isfinite(metrics[key]), key
    assert metrics["moe/aux_loss"] > 0


def test_turns_without_a_signal_keep_their_kl_anchor(setup):
    # Every group with zero advantage variance: no policy-gradient signal at all. A policy that drifted
    # from its reference is still pulled back by the KL term over those turns, and their entropy is logged.
    cfg, make_env, tokenizer, model, _ = setup
    policy = LLMPolicy(copy.deepcopy(model), tokenizer)
    reference = reference_of(policy)
    drift = torch.Generator().manual_seed(0)  # seeded: how far the KL term can pull back depends on the drift
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.02 * torch.randn(p.shape, generator=drift, dtype=p.dtype))
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect(list(range(8)), sample_seed=2)
    adv = per_turn(batch, group_advantages(batch.episodes))  # one rollout per seed: no group has a signal
    assert not adv.include.any()
    rl = copy.deepcopy(cfg.rl)
    rl.kl_coef, rl.target_kl, rl.learning_rate, rl.minibatches = 1.0, 0.0, 1e-3, 1
    learner = Learner(policy, reference, rl, aux_coef=0.0)
    first = learner.update(batch, adv)
    assert first["train/decision_tokens"] == 0 and first["train/entropy"] > 0 and first["train/kl"] > 0
    assert np.isnan(first["train/policy_loss"]) and np.isnan(first["train/clip_frac"])  # measured nothing: not 0
    for _ in range(3):
        last = learner.update(batch, adv)
    assert last["train/kl"] < first["train/kl"]


@pytest.mark.parametrize("ratio", ["token", "sequence"])
def test_micro_batches_give_the_minibatchs_gradient(setup, ratio):
    # The same minibatch scored in one forward and in micro-batches of one episode each: the
    # accumulated gradient and every logged figure are the same (no MoE aux term here: it is a
    # per-forward mean, weighted by token share across micro-batches).
    cfg, make_env, tokenizer, model, _ = setup
    batch = RolloutWorker(make_env, LLMPolicy(model, tokenizer), ChatFormat(tokenizer)).collect(
        [s for s in range(4) for _ in range(3)], groups=[s for s in range(4) for _ in range(3)], sample_seed=6)
    adv = group_advantages(batch.episodes)
    adv.advantages[:] = np.linspace(-1, 1, len(adv.advantages))
    adv.include[:] = True
    adv.include[:3] = False  # some turns only anchor the KL
    adv = per_turn(batch, adv)
    grads, figures = [], []
    for budget in (0, 1):
        policy = LLMPolicy(copy.deepcopy(model), tokenizer)
        rl = copy.deepcopy(cfg.rl)
        rl.minibatches, rl.micro_batch_tokens, rl.ratio = 1, budget, ratio
        learner = Learner(policy, reference_of(LLMPolicy(model, tokenizer)), rl, aux_coef=0.0)
        with torch.no_grad():  # a policy away from its reference and its rollout: KL gradients, clipped tokens
            gen = torch.Generator().manual_seed(0)
            for p in policy.model.parameters():
                p.add_(0.05 * torch.randn(p.shape, generator=gen))
        learner.optimizer.step = lambda m=policy.model: grads.append([p.grad.clone() for p in m.parameters()])
        figures.append(learner.update(batch, adv))
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    for key in ("train/policy_loss", "train/kl", "train/entropy", "train/clip_frac", "train/decision_tokens",
                "train/logprob_gap", "train/loss"):
        assert figures[0][key] == pytest.approx(figures[1][key], rel=1e-4, abs=1e-7), key
    assert figures[0]["train/clip_frac"] > 0  # clipping happened, so its pairing was checked too


def test_nan_loss_skips_the_step_then_aborts(setup, monkeypatch):
    cfg, make_env, tokenizer, model, _ = setup
    policy = LLMPolicy(copy.deepcopy(model), tokenizer)
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    batch = worker.collect([0, 0], groups=[0, 0], sample_seed=1)
    adv = group_advantages(batch.episodes)
    adv.advantages[:] = [1.0, -1.0]
    adv.include[:] = True
    adv = per_turn(batch, adv)
    real = policy.span_logprobs

    def poisoned(*args, **kwargs):
        scores = real(*args, **kwargs)
        scores.logprobs = scores.logprobs * float("nan")
        return scores

    monkeypatch.setattr(policy, "span_logprobs", poisoned)
    cfg = copy.deepcopy(cfg)
    cfg.rl.minibatches, cfg.rl.max_nonfinite_streak = 1, 2
    learner = Learner(policy, reference_of(policy), cfg.rl, aux_coef=0.0)
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    skipped = learner.update(batch, adv)
    assert skipped["train/skipped_steps"] == 1.0
    assert np.isnan(skipped["train/kl"]) and np.isnan(skipped["train/loss"])  # no partial sums of a skipped step
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    with pytest.raises(NonFiniteError, match="learning_rate"):
        learner.update(batch, adv)


def _meta(tokenizer, iteration: int) -> CheckpointMeta:
    return CheckpointMeta(scenario="tool_use", agents=1, model="tiny-moe", tokenizer=TokenizerInfo("offline-bpe", len(tokenizer)),
                          policy_mapping="shared", policies=("shared",), algo="grpo", critic_view=None, constrained=True,
                          temperature=1.0, max_new_tokens=48, run_id="test", seed=0, iteration=iteration)


def test_checkpoint_refuses_nan_and_keeps_the_last_good_one(setup, tmp_path):
    _, _, tokenizer, model, _ = setup
    model = copy.deepcopy(model)
    path = save_checkpoint(tmp_path / "ckpt", model, tokenizer, _meta(tokenizer, 1))
    assert read_meta(path).iteration == 1
    with torch.no_grad():
        next(model.parameters()).fill_(float("nan"))
    with pytest.raises(CheckpointError, match="non-finite"):
        save_checkpoint(path, model, tokenizer, _meta(tokenizer, 2))
    assert read_meta(path).iteration == 1
    assert (path / "model.safetensors").is_file()


def test_a_run_from_a_checkpoint_reads_ids_with_the_checkpoints_tokenizer(setup, tmp_path):
    cfg, make_env, tokenizer, model, _ = setup
    path = save_checkpoint(tmp_path / "ckpt", copy.deepcopy(model), tokenizer, _meta(tokenizer, 1))
    other = TrainConfig(seed=7)  # another seed's corpus trains another tokenizer
    other.policy.tokenizer_episodes = cfg.policy.tokenizer_episodes
    fresh, _, _ = build_policy(other, make_env, tmp_path / "runs", np.random.default_rng(7))
    assert fresh.get_vocab() != tokenizer.get_vocab()
    other.policy.model = str(path)
    rng = np.random.default_rng(7)
    loaded, loaded_model, _ = build_policy(other, make_env, tmp_path / "runs", rng)
    assert loaded.get_vocab() == tokenizer.get_vocab()
    assert torch.equal(loaded_model.get_input_embeddings().weight, model.get_input_embeddings().weight)
    after_fresh = np.random.default_rng(7)
    build_policy(other.__class__(seed=7, policy=dataclasses.replace(other.policy, model="tiny-moe")), make_env,
                 tmp_path / "runs", after_fresh)
    assert rng.integers(1 << 30) == after_fresh.integers(1 << 30)  # later draws (demos, tasks) as from a preset


def test_checkpoint_checks_every_policy_and_critic_of_a_mapping(setup, tmp_path):
    from policies.value_model import build_value_model

    _, _, tokenizer, model, _ = setup
    good, bad = copy.deepcopy(model), copy.deepcopy(model)
    critic = build_value_model("tiny-critic", len(tokenizer), tokenizer.pad_token_id)
    path = save_checkpoint(tmp_path / "ckpt", good, tokenizer, _meta(tokenizer, 1), extra_models={"team_b": good},
                           critics={"team_b": critic})
    assert (path / "policies" / "team_b" / "model.safetensors").is_file()
    assert (path / "critics" / "team_b" / "value_head.safetensors").is_file()
    with torch.no_grad():
        next(bad.parameters()).fill_(float("nan"))
    # Same id for a policy and a critic: the bad policy must not hide behind the good critic.
    with pytest.raises(CheckpointError, match="policy team_b"):
        save_checkpoint(path, good, tokenizer, _meta(tokenizer, 2), extra_models={"team_b": bad},
                        critics={"team_b": critic})
    assert read_meta(path).iteration == 1
