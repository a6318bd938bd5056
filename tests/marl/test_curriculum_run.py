"""The curriculum inside a run: the expert's success promotes it, newcomers get their source's weights,
and a whole `marl train` run logs the curriculum, checkpoints its state and evaluates every team."""

import json

import mlflow
import numpy as np
import pytest
import torch
from run_helpers import tiny

from marl.config import ConfigError, CurriculumConfig, TrainConfig
from marl.engine.rollout import RolloutWorker, expert_actor
from marl.run.build import build_policy, build_policy_map
from marl.run.curriculum import CurriculumRun, stage_factory
from marl.run.train import role_function, train


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
    move = run.after_batch(batch, iteration=1, env_steps=batch.env_steps)
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
               for k in ("curriculum/n_agents", "curriculum/promotions", "progress/env_steps", "progress/agent_steps")}
    assert history["curriculum/n_agents"] == [2.0, 3.0]  # what each iteration's batch trained on
    assert history["curriculum/promotions"] == [1.0, 1.0]
    assert history["progress/env_steps"][1] > history["progress/env_steps"][0] > 0
    # an env step of a larger team is more agent actions: the second batch (3 agents) adds more per env step
    steps, actions = history["progress/env_steps"], history["progress/agent_steps"]
    assert (actions[1] - actions[0]) / (steps[1] - steps[0]) > actions[0] / steps[0] >= 1.0
    final = client.get_run(result.run_id).data.metrics
    assert {"eval/basic/success_rate", "eval/n2/basic/success_rate", "eval/n3/basic/success_rate"} <= set(final)
    assert final["eval/basic/return_mean"] == final["eval/n3/basic/return_mean"]  # the last team, played once
    artifacts = [a.path for a in client.list_artifacts(result.run_id, "curriculum")]
    assert artifacts == ["curriculum/curriculum.png"]



def test_a_difficulty_curriculum_for_one_agent_trains_on_each_stage_s_split(tmp_path):
    stages = ("agents=1 split=basic", "agents=1 split=hard", "agents=1 split=adversarial")
    run, policies, worker = growing_run(tmp_path, mapping="shared", scenario="tool_use", stages=stages)
    run.curriculum.stage = 2
    batch = run.collect(worker, list(range(40)), group_size=1, actor=expert_actor)
    played = {ep.variant for ep in batch.episodes}
    assert "n1-adversarial" in played and played <= {"n1-basic", "n1-hard", "n1-adversarial"}
    assert {env.split for env in worker.envs} == {v.removeprefix("n1-") for v in played}
    assert [s.team for s in run.eval_stages(policies)] == ["n1"]  # one team: evaluated once, on every split


def test_each_stage_rebuilds_the_comms_graph_for_its_team():
    cfg = TrainConfig(scenario="info_split", curriculum=CurriculumConfig(stages=("agents=2", "agents=4")))
    cfg.comms.topology = "ring"
    run = CurriculumRun(cfg.resolved())
    graphs = {}
    for name, factory in run.factories.items():
        env = factory()
        env.reset(seed=0)
        graphs[name] = env.topology_graph
    assert (graphs["n2"].number_of_nodes(), graphs["n4"].number_of_nodes()) == (2, 4)
    assert graphs["n4"].number_of_edges() == 4  # a ring of four, not the first stage's pair


def test_an_agent_that_changes_sides_between_stages_is_refused_under_agent_mapping():
    # predator_prey: agent_1 is the prey with two agents and a predator with four
    stages = CurriculumConfig(stages=("agents=2", "agents=4"))
    with pytest.raises(ConfigError, match="agent_1 is on team 'prey' with 2 agents"):
        TrainConfig(scenario="predator_prey", policy_mapping="agent", curriculum=stages)
    assert TrainConfig(scenario="predator_prey", policy_mapping="team", curriculum=stages)


def test_role_normalization_knows_every_stage_s_agents():
    cfg = TrainConfig(scenario="info_split", curriculum=CurriculumConfig(stages=("agents=2", "agents=4")))
    cfg.rl.normalize_by = "role"
    run = CurriculumRun(cfg.resolved())
    role_of = role_function(cfg, *run.factories.values())
    assert {role_of(f"agent_{k}") for k in range(4)} == {"team"}
