"""Opponent modeling on real parts: scenarios' labels, the head's inputs, its SFT and RL losses, checkpoints.

What a user relies on: the labels are what the opponent really played in that step (scripted or
learning, read from the scenario, never from the agent's view); the head reads the hidden state
where the agent's own prompt ends; SFT and the RL learner train it by the mean cross-entropy over
labels (micro-batches adding up to the minibatch's); the head survives a checkpoint; a scenario
with nobody to predict is refused at startup.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import re
from functools import partial

import pytest
import torch
from mlflow.tracking import MlflowClient
from run_helpers import game_policy, tiny

import scenarios
from marl.config import ConfigError, OpponentModelConfig, TrainConfig
from marl.engine.advantages import group_advantages, per_turn
from marl.engine.learner import Learner
from marl.engine.opponent import build_head, prediction_metrics, round_bucket
from marl.engine.rollout import RolloutWorker
from marl.engine.sequences import subset
from marl.run.build import frozen_reference, load_policy
from marl.run.sft import conversations, demo_opponent_targets, demonstration_episodes, run_sft
from marl.run.train import train
from policies.chat import ChatFormat

MOVE = re.compile(r"opp (\w+)")


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """repeated_game with two agents: the tokenizer, a tiny policy with a fresh head, the env factory."""
    cfg, make_env, tokenizer, policy = game_policy(tmp_path_factory.mktemp("runs"))
    policy.opponent_head = build_head(policy.model, make_env())
    return cfg, make_env, tokenizer, policy


def _expert_episodes(make_env, n=24):
    return demonstration_episodes(RolloutWorker(make_env, None, None), list(range(n)))


@pytest.mark.parametrize("pairing", ["scripted", "self"])
def test_repeated_game_labels_are_the_move_the_opponent_played(pairing):
    make_env = partial(scenarios.make, "repeated_game", n_agents=2, split="train", pairing=pairing)
    classes = make_env().action_classes()
    checked = 0
    for ep in _expert_episodes(make_env):
        after = [text for role, text in ep.transcript[2::2] if role == "observation"]  # the round's report
        after.append(ep.final_observation or "")
        assert len(ep.opponent) == len(after)
        for labels, text in zip(ep.opponent, after, strict=True):
            assert len(labels) == 1
            assert classes[labels[0]] == MOVE.search(text).group(1)
            checked += 1
    assert checked > 100


@pytest.mark.parametrize(("name", "agents"), [("bargaining", 2), ("predator_prey", 2)])
def test_default_labels_read_the_other_agents_last_actions(name, agents):
    env = scenarios.make(name, n_agents=agents, split="train")
    env.reset(seed=3)
    classes = env.action_classes()
    for _ in range(4):
        if len(env.agents) < agents:
            break
        actions = {a: env.expert_action(a) for a in env.agents}
        env.step(actions)
        for agent in env.possible_agents:
            slots = env.opponent_slots(agent)
            assert slots and agent not in slots
            seen = env.opponent_actions(agent)
            assert list(seen) == list(slots)
            for other in slots:
                assert seen[other] == env.action_class(other, actions[other]) and seen[other] in classes


def test_a_head_is_seeded_on_its_own_and_leaves_the_global_random_state_alone(game):
    _, make_env, _, policy = game
    state = torch.random.get_rng_state()
    a, b = build_head(policy.model, make_env(), seed=1), build_head(policy.model, make_env(), seed=1)
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a.linear.weight, b.linear.weight)
    assert not torch.equal(a.linear.weight, build_head(policy.model, make_env(), seed=2).linear.weight)


def test_a_scenario_without_opponents_is_refused_with_a_message():
    with pytest.raises(ConfigError, match="opponent.mode"):
        TrainConfig(scenario="tool_use", opponent=OpponentModelConfig(mode="aux"))
    with pytest.raises(ConfigError, match="opponent.coef"):
        OpponentModelConfig(mode="aux", coef=-1.0)
    anneal = OpponentModelConfig(mode="aux", coef=1.0, final_coef=0.0)
    assert [anneal.weight(i, 5) for i in range(5)] == [1.0, 0.75, 0.5, 0.25, 0.0]
    assert OpponentModelConfig(mode="aux", coef=0.3).weight(7, 10) == 0.3
    assert [round_bucket(k) for k in (0, 4, 5, 9, 10, 30)] == ["1-5", "1-5", "6-10", "6-10", "11_plus", "11_plus"]


def test_prompt_hidden_is_the_last_hidden_state_where_each_prompt_ends(game):
    _, make_env, tokenizer, policy = game
    chat = ChatFormat(tokenizer)
    columns = conversations(chat, _expert_episodes(make_env, 4))
    sequences = columns["input_ids"][:3]
    spans = [[(end + 1, 2) for end in ends] for ends in columns["prompt_ends"][:3]]
    scores = policy.span_logprobs(sequences, spans, [[None] * len(s) for s in spans], with_prompt_hidden=True)
    with torch.no_grad():
        for r, seq in enumerate(sequences):
            hidden = policy.model(input_ids=torch.tensor([seq]), output_hidden_states=True).hidden_states[-1][0]
            rows = [k for k in range(len(scores.prompt_hidden)) if sum(len(s) for s in spans[:r]) <= k
                    < sum(len(s) for s in spans[: r + 1])]
            for k, (start, _) in zip(rows, spans[r], strict=True):
                assert seq[start - 1] == chat.assistant_id
                torch.testing.assert_close(scores.prompt_hidden[k], hidden[start - 1], atol=2e-5, rtol=1e-4)


def test_sft_trains_the_head_at_each_prompt_end_on_the_played_moves(game):
    cfg, make_env, tokenizer, policy = game
    chat = ChatFormat(tokenizer)
    episodes = _expert_episodes(make_env, 64)
    columns = conversations(chat, episodes)
    rows, cols, labels = demo_opponent_targets(columns, [0, 1], slots=1)
    ids = columns["input_ids"]
    assert all(ids[[0, 1][r]][c] == chat.assistant_id for r, c in zip(rows.tolist(), cols.tolist(), strict=True))
    assert labels[:, 0].tolist() == [lab[0] for i in (0, 1) for lab in columns["opponent"][i]]
    model, head = copy.deepcopy(policy.model), copy.deepcopy(policy.opponent_head)
    before = copy.deepcopy(head.state_dict())
    logged: list[dict] = []
    budget = dataclasses.replace(cfg.sft, seconds=600.0, max_steps=40, batch_size=8, warmup_steps=2)
    run_sft(model, tokenizer, columns, budget, seed=0, log=lambda m, step: logged.append(m), head=head, head_coef=1.0)
    losses = [m["sft/opponent_loss"] for m in logged]
    assert len(losses) == 4 and all(0 <= m["sft/opponent_accuracy"] <= 1 for m in logged)
    assert losses[-1] < losses[0]  # from a uniform guess over five moves towards the three most matches use
    assert not torch.equal(before["linear.weight"], head.state_dict()["linear.weight"])


def test_learner_opponent_term_is_the_mean_cross_entropy_over_every_label(game):
    cfg, make_env, tokenizer, policy = game
    policy = copy.copy(policy)
    policy.model, policy.opponent_head = copy.deepcopy(policy.model), copy.deepcopy(policy.opponent_head)
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    batch = worker.collect([s for s in range(4) for _ in range(2)], [g for g in range(4) for _ in range(2)],
                           sample_seed=1)
    # a policy's own part of a batch (team and agent mappings) keeps every turn's labels
    part = subset(batch, lambda ep: ep.agent == "agent_1")
    assert [t.opponent for t in part.turns] == [batch.turns[i].opponent for ep in batch.episodes
                                                 if ep.agent == "agent_1" for i in ep.turns]
    before = prediction_metrics(policy, batch)
    assert before["opponent/loss"] > 0 and "opponent/accuracy/rounds_6-10" in before
    # one minibatch scored in several micro-batches: the logged term is the whole minibatch's mean
    rl = dataclasses.replace(cfg.rl, minibatches=1, micro_batch_tokens=600, learning_rate=1e-3)
    learner = Learner(policy, frozen_reference(policy), rl, aux_coef=0.0, seed=0)
    learner.opponent_weight = 1.0
    head_before = copy.deepcopy(policy.opponent_head.state_dict())
    body_before = copy.deepcopy(policy.model.state_dict())
    out = learner.update(batch, per_turn(batch, group_advantages(batch.episodes)))
    assert out["opponent/loss"] == pytest.approx(before["opponent/loss"], rel=1e-4)
    assert out["opponent/accuracy"] == pytest.approx(before["opponent/accuracy"], rel=1e-6)
    assert out["loss_weight/opponent"] == 1.0
    assert not torch.equal(head_before["linear.weight"], policy.opponent_head.state_dict()["linear.weight"])
    # the head's own step descends its loss (the body also took the policy-gradient step, which may not)
    policy.model.load_state_dict(body_before)
    after = prediction_metrics(policy, batch)
    assert after["opponent/loss"] < before["opponent/loss"]


def test_a_run_with_the_head_logs_it_checkpoints_it_and_eval_reads_it(tmp_path):
    cfg = tiny(tmp_path, scenario="repeated_game", agents=2, eval_splits=("heldout",),
               opponent=OpponentModelConfig(mode="aux"))
    result = train(cfg)
    metrics = MlflowClient(tracking_uri=cfg.tracking.tracking_uri).get_run(result.run_id).data.metrics
    for key in ("sft/opponent_loss", "opponent/loss", "opponent/accuracy", "eval/heldout/opponent/accuracy",
                "eval/heldout/opponent/accuracy/rounds_6-10"):
        assert key in metrics and math.isfinite(metrics[key]), key
    policy, _, _ = load_policy(result.checkpoint, device="cpu")
    assert policy.opponent_head is not None and policy.opponent_head.classes == scenarios.make(
        "repeated_game").action_classes()
    # a run that starts from the checkpoint keeps the head it learned
    again = dataclasses.replace(cfg, policy=dataclasses.replace(cfg.policy, model=str(result.checkpoint)))
    from marl.run.build import attach_opponent_head

    fresh = copy.copy(policy)
    fresh.opponent_head = None
    attach_opponent_head(again, fresh, partial(scenarios.make, "repeated_game", n_agents=2))
    torch.testing.assert_close(fresh.opponent_head.linear.weight, policy.opponent_head.linear.weight)
