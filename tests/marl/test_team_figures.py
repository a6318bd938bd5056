"""Teams in evaluation: each team's figures on their own, and a trained team against a scripted one."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import numpy as np
import pytest

import scenarios
from marl.cli.eval import run_eval
from marl.config import ConfigError, EvalConfig, TrainConfig
from marl.engine.rollout import SCRIPTED, RolloutWorker, expert_actor, team_name
from marl.run.build import build_policy
from marl.run.evaluate import evaluate
from policies.chat import ChatFormat


def expert_figures(name: str, agents: int, split: str, episodes: int) -> dict[str, float]:
    make_env = partial(scenarios.make, name, n_agents=agents, split=split)
    seeds = make_env().eval_seeds(split, episodes)
    figures, _ = evaluate(RolloutWorker(make_env, policy=None, chat=None), seeds, actor=expert_actor)
    return figures


def test_predator_prey_reports_each_team_apart() -> None:
    figures = expert_figures("predator_prey", 4, "basic", 20)
    # The expert predators catch every expert prey on basic boards (the scenario's tested floor is 0.95).
    assert figures["team/predator/success_rate"] >= 0.95
    assert figures["team/prey/success_rate"] == 0.0  # a prey never "succeeds": it is caught or survives
    assert figures["team/prey/truncation_rate"] <= 0.05  # surviving to the last turn is the prey's win
    assert figures["team/predator/return_mean"] > figures["team/prey/return_mean"]
    # The mixed figure is the agent-weighted mean of the teams' (two of each here).
    mixed = (figures["team/predator/success_rate"] + figures["team/prey/success_rate"]) / 2
    assert figures["success_rate"] == pytest.approx(mixed)


def test_a_one_team_scenario_has_no_team_figures() -> None:
    figures = expert_figures("info_split", 3, "basic", 5)
    assert not [key for key in figures if key.startswith("team/")]
    assert figures["success_rate"] == 1.0


@pytest.fixture(scope="module")
def predators(tmp_path_factory):
    """An untrained tiny MoE for predator_prey N=4 (it plays whichever seats the expert does not)."""
    cfg = TrainConfig(scenario="predator_prey", agents=4, seed=0)
    cfg.policy.tokenizer_episodes = 40
    make_env = partial(scenarios.make, "predator_prey", n_agents=4, split="basic")
    out = Path(tmp_path_factory.mktemp("pp"))
    tokenizer, _, policy = build_policy(cfg, make_env, out, np.random.default_rng(0))
    return make_env, policy, ChatFormat(tokenizer), out


def test_a_scripted_team_plays_beside_the_policy(predators):
    make_env, policy, chat, _ = predators
    worker = RolloutWorker(make_env, policy, chat)
    prey = lambda env, agent: team_name(env, agent) == "prey"  # noqa: E731
    batch = worker.collect([3, 4, 5], greedy=True, actor=expert_actor, scripted=prey)
    for ep in batch.episodes:
        steps = [batch.turns[t] for t in ep.turns]
        assert ep.turns, "every agent acts at least once"
        if ep.team == "prey":  # the expert's turns carry no tokens: nothing of them can reach a loss
            assert ep.policy == SCRIPTED and all(not t.action_ids and not t.prompt_ids for t in steps)
        else:
            assert ep.policy != SCRIPTED and all(t.action_ids and len(t.logprobs) == len(t.action_ids) for t in steps)
            # Each predator turn holds the tokens of the action its own agent played (rows not mixed up).
            played = [text for role, text in ep.transcript if role == "action"]
            assert [chat.decode_action(t.action_ids) for t in steps] == played
    # Scripting every seat is the plain scripted rollout, move for move.
    everyone = worker.collect([3, 4], actor=expert_actor, scripted=lambda env, agent: True)
    alone = RolloutWorker(make_env, None, None).collect([3, 4], actor=expert_actor)
    assert [e.transcript for e in everyone.episodes] == [e.transcript for e in alone.episodes]


def test_eval_against_a_scripted_team_reports_both_teams(predators):
    _, _, _, out = predators
    args = EvalConfig(policy="untrained", scenario="predator_prey", agents=4, split="basic", episodes=6,
                    scripted_team="prey", output_dir=str(out))
    report = run_eval(args)
    assert report["scripted_team"] == "prey"
    # The expert's prey evade untrained predators far more often than untrained prey do (measured
    # here: 0.92 of scripted prey survive, 0.50 of untrained ones).
    plain = run_eval(EvalConfig(policy="untrained", scenario="predator_prey", agents=4, split="basic", episodes=6,
                              output_dir=str(out)))
    assert report["team/prey/truncation_rate"] >= 0.75 and report["team/predator/success_rate"] <= 0.25
    assert report["team/prey/truncation_rate"] - plain["team/prey/truncation_rate"] >= 0.25
    with pytest.raises(ConfigError, match="teams are"):
        run_eval(EvalConfig(policy="untrained", scenario="predator_prey", agents=4, episodes=2,
                          scripted_team="wolves", output_dir=str(out)))
    with pytest.raises(ConfigError, match="LLM policy"):
        run_eval(EvalConfig(policy="expert", scenario="predator_prey", agents=4, episodes=2, scripted_team="prey"))
