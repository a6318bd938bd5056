"""The curriculum inside a run: the expert's success promotes it, newcomers get their source's weights,
and a whole `marl train` run logs the curriculum, checkpoints its state and evaluates every team."""

import json

import numpy as np
import pytest
import torch
from run_helpers import tiny

import mlflow
from marl.config import CurriculumConfig, TrainConfig
from marl.engine.rollout import RolloutWorker, expert_actor
from marl.run.build import build_policy, build_policy_map
from marl.run.curriculum import CurriculumRun, stage_factory
from marl.run.train import train


def growing_run(tmp_path, mapping="agent", scenario="info_split", stages=("agents=2", "agents=4")):
    cfg = TrainConfig(scenario=scenario, seed=0, policy_mapping=mapping,
                      curriculum=CurriculumConfig(stages=stages, window=8, min_episodes=8)).resolved()
    cfg.policy.tokenizer_episodes, cfg.policy.device = 20, "cpu"
    run = CurriculumRun(cfg)
    first = stage_factory(cfg, run.stages[0])
    _, _, policy = build_policy(cfg, first, tmp_path, np.random.default_rng(0), tuple(run.factories.values()))
    policies = build_policy_map(mapping, scenario, policy, first)
    worker = RolloutWorker(first, policies, chat=None, variants=run.factories)
    return run, policies, worker


def test_expert_success_promotes_and_newcomers_copy_their_source(tmp_path):
    run, policies, worker = growing_run(tmp_path)
    assert sorted(policies.policies) == ["agent_0", "agent_1"]
    batch = run.collect(worker, [1, 2, 3, 4], group_size=2, actor=expert_actor)
    assert {ep.variant for ep in batch.episodes} == {"n2"}
    move = run.after_batch(batch, iteration=1)
    assert move is not None and (move.source, move.target) == (0, 1)
    assert run.metrics()["curriculum/n_agents"] == 2.0  # the figure of the batch that earned the move
    assert run.metrics()["curriculum/promotions"] == 1.0
    added = run.newcomers(policies, run.stages[1])
    assert added == [("agent_2", "agent_0"), ("agent_3", "agent_1")]  # place modulo the existing team
    with torch.no_grad():
        policies["agent_0"].model.lm_head.weight.add_(1.0)  # the copy is its own
    new, source = policies["agent_2"].model, policies["agent_0"].model
    assert not torch.equal(new.lm_head.weight, source.lm_head.weight)
    assert torch.equal(new.lm_head.weight + 1.0, source.lm_head.weight)
    assert run.newcomers(policies, run.stages[1]) == []  # already fielded
    assert [s.name for s in run.eval_stages(policies)] == ["n2", "n4"]


def test_a_shared_or_team_policy_plays_the_larger_team_as_is(tmp_path):
    run, policies, _ = growing_run(tmp_path, mapping="team", scenario="predator_prey",
                                   stages=("agents=2", "agents=4"))
    before = dict(policies.policies)
    assert run.newcomers(policies, run.stages[1]) == []
    assert policies.policies == before
    assert [s.name for s in run.eval_stages(policies)] == ["n2", "n4"]


def test_agent_mapping_evaluates_only_the_teams_it_can_field(tmp_path):
    run, policies, _ = growing_run(tmp_path)
    assert [s.name for s in run.eval_stages(policies)] == ["n2"]
    assert run.furthest().agents == 2


@pytest.mark.slow
def test_a_curriculum_run_logs_moves_checkpoints_its_state_and_evaluates_each_team(tmp_path):
    # repeated_game: an untrained policy already wins some rounds, so a low bar promotes it in the first iteration
    cfg = tiny(tmp_path, scenario="repeated_game", policy_mapping="agent",
               curriculum=CurriculumConfig(stages=("agents=2", "agents=3"), promote_at=0.05, demote_at=0.0,
                                           hysteresis=0.0, window=4, min_episodes=2))
    cfg.scenario_options, cfg.iterations = {"rounds": 3}, 2
    cfg.eval_splits = ("basic",)
    result = train(cfg)
    state = json.loads((result.checkpoint / "curriculum.json").read_text())
    assert state["stage"] == 1 and state["promotions"] == 1 and state["history"][0]["iteration"] == 1
    meta = json.loads((result.checkpoint / "marl_checkpoint.json").read_text())
    assert meta["agents"] == 3 and sorted(meta["policies"]) == ["agent_0", "agent_1", "agent_2"]
    client = mlflow.tracking.MlflowClient(result.tracking_uri)
    history = {k: [m.value for m in client.get_metric_history(result.run_id, k)]
               for k in ("curriculum/n_agents", "curriculum/promotions", "progress/env_steps")}
    assert history["curriculum/n_agents"] == [2.0, 3.0]  # what each iteration's batch trained on
    assert history["curriculum/promotions"] == [1.0, 1.0]
    assert history["progress/env_steps"][1] > history["progress/env_steps"][0] > 0
    final = client.get_run(result.run_id).data.metrics
    assert {"eval/basic/success_rate", "eval/n2/basic/success_rate", "eval/n3/basic/success_rate"} <= set(final)
    artifacts = [a.path for a in client.list_artifacts(result.run_id, "curriculum")]
    assert artifacts == ["curriculum/curriculum.png"]

