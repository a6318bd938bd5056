"""Every registered scenario trains end to end with the shared learner at several agents.

Real parts: the scenario, its tokenizer trained on expert transcripts, a tiny random-init MoE,
TRL's SFTTrainer, the RL update and a sqlite MLflow store. Budgets are tiny: the test asserts the
plumbing a user relies on (a FINISHED run, one `agent/<id>/return` per agent, evaluation on
every non-training split, a checkpoint that records the agent count), not learning.
"""

import dataclasses

import pytest
from mlflow.tracking import MlflowClient
from run_helpers import tiny

import scenarios
from marl.cli.eval import run_eval
from marl.config import ConfigError, EvalConfig, TrainConfig
from marl.run.checkpoint import read_meta
from marl.run.train import train

CASES = [("navigation", 3), ("predator_prey", 4), ("repeated_game", 3), ("bargaining", 5), ("info_split", 3),
         ("tool_use", 2)]


@pytest.mark.slow
@pytest.mark.parametrize(("name", "n_agents"), CASES)
def test_scenario_trains_end_to_end(tmp_path, name, n_agents):
    cfg = tiny(tmp_path, scenario=name, agents=n_agents)

    result = train(cfg)

    run = MlflowClient(tracking_uri=cfg.tracking.tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    for i in range(n_agents):
        assert f"agent/agent_{i}/return" in metrics
    for split in scenarios.info(name).splits:
        if split != "train":
            assert f"eval/{split}/success_rate" in metrics
    assert not [k for k in metrics if k.startswith("curriculum/")]  # only a curriculum moves them
    assert metrics["progress/env_steps"] > 0
    assert run.data.params["agents"] == str(n_agents)
    assert (result.checkpoint / "model.safetensors").is_file()


@pytest.mark.slow
def test_training_with_shared_observations_logs_the_graph_and_message_stats(tmp_path):
    cfg = tiny(tmp_path, scenario="info_split", agents=3)
    cfg.iterations = 2
    cfg.comms.topology, cfg.comms.drop, cfg.comms.mode = "ring", 0.3, "both"

    result = train(cfg)

    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["comms.topology"] == "ring"
    assert run.data.params["comms.topology"] == "ring"
    assert {a.path for a in client.list_artifacts(result.run_id, "comms")} == {"comms/topology.png"}
    sent = run.data.metrics["comms/sent"]
    assert sent > 0 and run.data.metrics["comms/delivered"] < sent  # 30% drop
    assert 0.0 < run.data.metrics["comms/drop_rate"] < 1.0
    assert run.data.metrics["comms/messages"] > 0  # the sampled policy used the "say" field

    # The checkpoint carries its sharing; `marl eval` can also evaluate under another channel.
    base = EvalConfig(checkpoint=str(result.checkpoint), split="basic", episodes=3)
    same = run_eval(base)
    assert (same["comms_topology"], same["comms_drop"]) == ("ring", 0.3)
    lossless = run_eval(dataclasses.replace(base, comms_drop=0.0))
    assert lossless["comms_drop"] == 0.0 and lossless["episodes"] == 3
    alone = run_eval(dataclasses.replace(base, comms_topology="none"))
    assert "comms_topology" not in alone
    with pytest.raises(ConfigError, match="drop"):
        run_eval(dataclasses.replace(base, comms_drop=2.0))


def test_a_bad_comms_setting_says_what_to_change():
    cfg = TrainConfig(scenario="info_split", agents=3)
    cfg.comms.topology = "hexagon"
    with pytest.raises(ConfigError, match="comms"):
        cfg.validate()
    cfg.comms.topology, cfg.comms.drop = "ring", 1.5
    with pytest.raises(ConfigError, match="drop"):
        cfg.validate()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["mappo", "ippo", "grpo"])
def test_single_agent_tool_use_trains_through_every_algorithm(tmp_path, algo):
    # N=1 is the multi-agent code path with one agent: same rollout, advantages, learner, checkpoint.
    cfg = tiny(tmp_path, scenario="tool_use", algo=algo)
    cfg.iterations = 2
    critic = algo != "grpo"
    cfg.critic.warmup_iterations = int(critic)  # iteration 1 fits the critic only
    cfg.rl.explore = {"mappo": 0.5, "ippo": 0.9, "grpo": 0.0}[algo]  # logged only where actions explore
    cfg.rl.explore_unit = "episode" if algo == "ippo" else "action"  # measures iteration 1, explores from 2
    result = train(cfg)
    client = MlflowClient(tracking_uri=cfg.tracking.tracking_uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["algo"] == algo
    metrics = run.data.metrics
    warmup = {m.step: m.value for m in client.get_metric_history(result.run_id, "train/critic_warmup")}
    assert warmup == ({1: 1.0, 2: 0.0} if critic else {1: 0.0, 2: 0.0})
    policy_steps = {m.step for m in client.get_metric_history(result.run_id, "train/policy_loss")}
    assert policy_steps == ({2} if critic else {1, 2})
    assert ("train/value_loss" in metrics) == critic
    assert ("rollout/zero_variance_group_frac" in metrics) == (not critic)
    assert ("rollout/explored_share" in metrics) == (algo != "grpo")
    explored = {m.step: m.value for m in client.get_metric_history(result.run_id, "rollout/explored_share")}
    if algo == "mappo":
        assert len(explored) == 2 and all(0 < share < 1 for share in explored.values())  # a few actions each
    if algo == "ippo":
        chance = {m.step: m.value for m in client.get_metric_history(result.run_id, "rollout/explore_chance")}
        assert explored[1] == chance[1] == 0.0 and 0 < chance[2] < 0.9 and explored[2] > 0
    for key in ("train/policy_loss", "train/kl", "loss_weight/policy", "moe/rollout_train_logprob_gap",
                "eval/basic/success_rate"):
        assert key in metrics, key
    assert (result.checkpoint / "critics" / "shared" / "value_head.safetensors").is_file() == critic


@pytest.mark.slow
def test_competitive_scenario_trains_one_model_per_team(tmp_path):
    cfg = tiny(tmp_path, scenario="predator_prey", agents=4, algo="mappo", policy_mapping="team")
    result = train(cfg)
    run = MlflowClient(tracking_uri=cfg.tracking.tracking_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    metrics = run.data.metrics
    for team in ("team_predator", "team_prey"):
        assert f"policy/{team}/train/kl" in metrics and f"policy/{team}/train/value_loss" in metrics
    meta = read_meta(result.checkpoint)
    assert meta.policies == ("team_predator", "team_prey") and meta.policy_mapping == "team"
    assert (result.checkpoint / "policies" / "team_prey" / "model.safetensors").is_file()
    report = run_eval(EvalConfig(checkpoint=str(result.checkpoint), split="basic", episodes=2))
    assert report["agents"] == 4 and report["agent_episodes"] == 8
