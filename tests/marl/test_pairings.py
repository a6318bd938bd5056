"""The pairings an update relies on: each row's advantage and old logprobs after shuffling and minibatching,
each critic read and its target, the decision mask, and the entropy the learner logs.

A pairing bug trains silently on the wrong numbers, so each test gives every turn a value of its own
and checks that the value arrives where its turn is scored.
"""

import copy
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

import scenarios
from marl.config import TrainConfig
from marl.engine import learner as learner_module
from marl.engine.advantages import Advantages
from marl.engine.critic import Critic
from marl.engine.learner import Learner
from marl.engine.losses import exact_kl
from marl.engine.rollout import RolloutWorker, Turn
from marl.engine.sequences import decision_mask
from marl.run.build import build_policy, frozen_reference
from policies.chat import ChatFormat
from policies.llm_policy import LLMPolicy
from policies.value_model import build_value_model


@pytest.fixture(scope="module")
def played(tmp_path_factory):
    cfg = TrainConfig(scenario="info_split", agents=2, seed=0)
    cfg.policy.tokenizer_episodes = 60
    make_env = partial(scenarios.make, "info_split", n_agents=2, split="train")
    tokenizer, _, policy = build_policy(cfg, make_env, Path(tmp_path_factory.mktemp("runs")),
                                        np.random.default_rng(0))
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect(list(range(6)), sample_seed=4)
    return cfg, tokenizer, policy, batch


def _distinct_advantages(batch) -> Advantages:
    n = len(batch.turns)
    return Advantages(advantages=np.arange(1, n + 1, dtype=np.float64) / n, include=np.ones(n, dtype=bool),
                      returns=np.arange(n, dtype=np.float64) * 10.0)


def test_every_row_gets_its_own_turns_advantage_and_old_logprobs(played, monkeypatch):
    cfg, _, policy, batch = played
    adv = _distinct_advantages(batch)
    seen: list[tuple[torch.Tensor, torch.Tensor, list[int]]] = []
    context: dict = {}
    real = learner_module.ppo_clip_loss

    def spy(logprobs, old, advantages, mask, eps, *rest):
        seen.append((old.detach().cpu(), advantages.detach().cpu(), list(context["turn_ids"])))
        return real(logprobs, old, advantages, mask, eps, *rest)

    monkeypatch.setattr(learner_module, "ppo_clip_loss", spy)
    rl = copy.deepcopy(cfg.rl)
    rl.minibatches, rl.epochs, rl.micro_batch_tokens = 3, 2, 600
    learner = Learner(copy.deepcopy(policy), frozen_reference(policy), rl, aux_coef=0.0, seed=7)
    real_micro, real_step = learner._micro_terms, learner._step  # the rows of each micro-batch, in scoring order
    steps = []

    def step(*args):
        steps.append(True)  # a step begins: its first micro-batch comes next
        return real_step(*args)

    def micro(batch_, adv_, anchor, pieces, totals):
        context["turn_ids"] = [i for p in pieces for i in p.turn_ids]
        steps.append(False)
        return real_micro(batch_, adv_, anchor, pieces, totals)

    monkeypatch.setattr(learner, "_step", step)
    monkeypatch.setattr(learner, "_micro_terms", micro)
    learner.update(batch, adv)
    assert sum(steps) == 6 and len(steps) - 6 > 6  # 3 minibatches x 2 epochs, in micro-batches
    orders = [ids for _, _, ids in seen]
    assert len({tuple(o) for o in orders}) > 1
    micro_of_step = [sum(steps[: k + 1]) for k, s in enumerate(steps) if not s]  # the step of each micro-batch
    first_epoch = sum(step <= 3 for step in micro_of_step)
    covered = sorted(i for ids in orders[:first_epoch] for i in ids)
    assert covered == sorted(i for i, t in enumerate(batch.turns) if t.action_ids)
    for old, advantages, ids in seen:
        for row, i in enumerate(ids):
            assert advantages[row].item() == pytest.approx(adv.advantages[i])
            n = len(batch.turns[i].logprobs)
            assert torch.allclose(old[row, :n], torch.tensor(batch.turns[i].logprobs))


def test_every_critic_read_meets_its_own_turns_target(played, monkeypatch):
    _, tokenizer, policy, batch = played
    model = build_value_model("tiny-critic", len(tokenizer), tokenizer.pad_token_id)
    critic = Critic(model, tokenizer, ChatFormat(tokenizer), centralized=False, learning_rate=1e-3,
                    max_grad_norm=1.0, minibatches=2)
    episodes = list(range(len(batch.episodes)))
    inputs = critic.inputs(batch, episodes)
    # The value before turn t reads the last token of exactly that turn's prompt.
    flat = [(row, pos) for row, positions in enumerate(inputs.positions) for pos in positions]
    for (row, pos), read in zip(flat, inputs.turns, strict=True):
        if read >= 0:
            assert inputs.sequences[row][: pos + 1] == batch.turns[read].prompt_ids
    # Values stand in for their read's turn index; the loss must pair each with that turn's target (10 x).
    monkeypatch.setattr(critic, "predict", lambda inp: torch.tensor([float(max(t, 0)) for t in inp.turns],
                                                                    requires_grad=True))
    pairs = []
    monkeypatch.setattr(learner_module, "value_loss",
                        lambda values, targets: pairs.append((values.detach(), targets)) or (values * 0).sum())
    monkeypatch.setattr(critic, "step", lambda: 0.0)
    learner = Learner(policy, frozen_reference(policy), TrainConfig().rl, aux_coef=0.0, critic=critic)
    learner._critic_step(batch, _distinct_advantages(batch), episodes)
    values, targets = pairs[0]
    assert len(values) > 0 and torch.allclose(targets, values * 10.0)


@pytest.mark.parametrize("centralized", [False, True])
def test_a_critic_step_in_parts_gives_the_whole_steps_gradient(played, centralized):
    # The same critic step in one forward and in parts of one team each: the same gradient and figures.
    _, tokenizer, policy, batch = played
    if centralized:  # the centralized critic reads the state recorded with every turn
        make_env = partial(scenarios.make, "info_split", n_agents=2, split="train")
        batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect(list(range(6)), sample_seed=4,
                                                                               record_state=True)
    adv = _distinct_advantages(batch)
    adv.returns = adv.returns / len(batch.turns)
    episodes = list(range(len(batch.episodes)))
    grads, figures = [], []
    for budget in (0, 1):
        model = build_value_model("tiny-critic", len(tokenizer), tokenizer.pad_token_id, seed=0)
        critic = Critic(model, tokenizer, ChatFormat(tokenizer), centralized=centralized, learning_rate=1e-3,
                        max_grad_norm=1.0, minibatches=1)
        critic.step = lambda m=model: grads.append([p.grad.clone() for p in m.parameters()]) or 0.0
        rl = copy.deepcopy(TrainConfig().rl)
        rl.micro_batch_tokens = budget
        learner = Learner(policy, frozen_reference(policy), rl, aux_coef=0.0, critic=critic)
        assert len(learner._critic_parts(batch, episodes)) == (1 if budget == 0 else len({e.env for e in batch.episodes}))
        figures.append(learner._critic_step(batch, adv, episodes))
    for a, b in zip(*grads, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-4)
    for key in ("train/value_loss", "train/value_mean"):
        assert figures[0][key] == pytest.approx(figures[1][key], rel=1e-5), key


def test_the_decision_mask_marks_exactly_the_tokens_with_a_choice():
    turns = [Turn(0, [1], [5, 6, 7], [0.0, -0.5, -1.0], [[5], [6, 9], [7, 8, 3]], 0.0, False),
             Turn(0, [1], [4, 2], [-0.1, -0.2], None, 0.0, False)]  # free decoding: every token chose
    assert decision_mask(turns, 4).tolist() == [[False, True, True, False], [True, True, False, False]]


def test_the_entropy_is_that_of_the_masked_temperature_scaled_distribution(played):
    _, tokenizer, played_policy, batch = played
    policy = LLMPolicy(played_policy.model, tokenizer, temperature=0.7)
    turn = next(t for t in batch.turns if t.allowed and any(len(a) > 1 for a in t.allowed))
    args = ([turn.prompt_ids + turn.action_ids], [[(len(turn.prompt_ids), len(turn.action_ids))]], [[turn.allowed]])
    with torch.no_grad():
        scores = policy.span_logprobs(*args)
        ref = frozen_reference(policy).span_logprobs(*args)
    # The reference is read over the same allowed sets at the same temperature: the exact KL of a copy is 0.
    assert torch.equal(torch.isfinite(ref.log_dist), torch.isfinite(scores.log_dist))
    assert torch.allclose(exact_kl(scores.log_dist, ref.log_dist), torch.zeros(len(scores.log_dist)), atol=1e-6)
    with torch.no_grad():
        ids = torch.tensor([turn.prompt_ids + turn.action_ids], device=policy.device)
        logits = policy.model(input_ids=ids).logits[0].float() / policy.temperature
    for j, allowed in enumerate(turn.allowed):
        row = logits[len(turn.prompt_ids) + j - 1, allowed]
        p = torch.softmax(row.double(), -1)
        assert scores.entropy[0, j].item() == pytest.approx(float(-(p * p.log()).sum()), abs=1e-4)
