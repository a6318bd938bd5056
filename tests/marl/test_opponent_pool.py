"""The opponent pool on real parts: seating, scripted seats in a rollout, PFSP, snapshots, checkpoints, a run.

What a user relies on: the learner plays one side of each task and the drawn entry every other
side (a scripted style playing by its rule, or a frozen snapshot); held-out styles never enter
the pool; PFSP draws the entries the learner loses to more often; snapshots come every K
iterations up to a cap; the pool survives a checkpoint; a run logs its pool and measures the
final policy against each entry and each held-out style.
"""

from __future__ import annotations

import json
from collections import Counter, deque

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from run_helpers import game_policy, tiny

import comms
import scenarios
from marl.config import ConfigError, OpponentPoolConfig, TrainConfig
from marl.engine.opponent_pool import OpponentPool, PoolEntry, seating, sides
from marl.engine.policy_map import PolicyMap, single
from marl.engine.rollout import SCRIPTED, RolloutWorker, expert_actor
from marl.run.build import frozen_snapshot
from marl.run.pool import PoolRun
from marl.run.train import train
from policies.chat import ChatFormat
from scenarios.bargaining.styles import HELDOUT_STYLES as BARGAINING_HELDOUT
from scenarios.bargaining.styles import TRAIN_STYLES as BARGAINING_TRAIN
from scenarios.repeated_game.styles import HELDOUT_STYLES, MOVES3, TRAIN_STYLES


def _route(env, agent):
    return "shared"


@pytest.fixture(scope="module")
def game(tmp_path_factory):
    """repeated_game, two agents playing each other: env factory, a tiny policy and its chat format."""
    cfg, make_env, tokenizer, policy = game_policy(tmp_path_factory.mktemp("runs"), tokenizer_episodes=60,
                                                   split="basic", pairing="self")
    return cfg, make_env, policy, ChatFormat(tokenizer)


def test_sides_are_teams_where_there_are_teams_else_index_parity():
    env = scenarios.make("repeated_game", n_agents=3, pairing="self")
    env.reset(seed=0)
    assert sides(env) == [("agent_0", "agent_2"), ("agent_1",)]
    assert seating(env, 0, "style:cycle", _route) == {"agent_1": "style:cycle"}
    assert seating(env, 1, "snapshot:5", _route) == {"agent_0": "snapshot:5/shared", "agent_2": "snapshot:5/shared"}
    prey = scenarios.make("predator_prey", n_agents=4)
    prey.reset(seed=0)
    teams = sides(prey)
    assert len(teams) == 2 and all(len({prey.team_of(a) for a in side}) == 1 for side in teams)
    per_team = seating(prey, 0, "snapshot:2", lambda env, a: f"team_{env.team_of(a)}")
    assert set(per_team) == set(teams[1]) and all(v == f"snapshot:2/team_{prey.team_of(a)}" for a, v in per_team.items())
    with pytest.raises(ValueError, match="at least 2 agents"):
        sides(scenarios.make("tool_use", n_agents=1))


def test_pfsp_draws_the_entries_the_learner_loses_to_more_often():
    pool = OpponentPool("pfsp", ["a", "b", "c"], pfsp_power=2.0, window=4)
    pool.entry("style:a").results.extend([0.0, 0.0])  # always lost to
    pool.entry("style:b").results.extend([1.0, 1.0, 0.5, 0.5])  # mostly won
    weights = dict(zip(pool.names, pool.weights(), strict=True))
    assert weights["style:a"] == pytest.approx(1.0 / (1 + 0.0625 + 0.25))  # (1-0)^2, (1-.75)^2, unplayed: .5^2
    assert weights["style:a"] > weights["style:c"] > weights["style:b"]
    drawn = Counter(pool.draw(4000, np.random.default_rng(0)))
    assert drawn["style:a"] / 4000 == pytest.approx(weights["style:a"], abs=0.03)
    uniform = OpponentPool("uniform", ["a", "b", "c"])
    uniform.entries[0].results.append(0.0)
    assert np.allclose(uniform.weights(), 1 / 3)
    beaten = OpponentPool("pfsp", ["a", "b"])
    for e in beaten.entries:
        e.results.append(1.0)
    assert np.allclose(beaten.weights(), 0.5)  # the learner wins everywhere: uniform, not a division by zero
    pool.entry("style:b").results.extend([0.0] * 4)
    assert pool.entry("style:b").win_rate() == 0.0  # only the last `window` results count


def test_snapshots_enter_up_to_the_cap_and_the_oldest_leaves():
    pool = OpponentPool("uniform", ["x"], max_snapshots=2)
    for it in (5, 10, 15):
        pool.add_snapshot({"shared": f"policy@{it}"}, it)
    assert pool.names == ["style:x", "snapshot:10", "snapshot:15"]
    assert pool.seated_policies() == {"snapshot:10/shared": "policy@10", "snapshot:15/shared": "policy@15"}
    assert pool.metrics()["opponent/pool_size"] == 3.0
    with pytest.raises(ValueError, match="already"):
        pool.add_snapshot({"shared": "again"}, 15)


def test_held_out_styles_never_enter_the_pool(game):
    cfg, make_env, policy, _ = game
    cfg = TrainConfig(scenario="repeated_game", agents=2, scenario_options={"pairing": "self"},
                      pool=OpponentPoolConfig(sampling="uniform"))
    run = PoolRun(cfg, make_env, single(policy))
    names = {n.removeprefix("style:") for n in run.pool.names}
    assert names == {"expert", *TRAIN_STYLES} and not names & set(HELDOUT_STYLES)
    assert run.held_out == HELDOUT_STYLES


def test_a_seated_style_plays_by_its_rule_and_never_enters_the_learners_batch(game):
    _, make_env, policy, chat = game
    worker = RolloutWorker(make_env, policy, chat)
    seeds = [11, 12, 13]
    seats = [{"agent_1": "style:beat_last"}] * 3
    batch = worker.collect(seeds, seats=seats, greedy=True)
    by_agent = {(ep.seed, ep.agent): ep for ep in batch.episodes}
    for seed in seeds:
        learner, style = by_agent[(seed, "agent_0")], by_agent[(seed, "agent_1")]
        assert learner.policy == "shared" and style.policy == "style:beat_last"
        assert all(not batch.turns[t].action_ids for t in style.turns)  # no tokens: nothing to learn from
        assert all(batch.turns[t].action_ids for t in learner.turns)
        mine = [json.loads(text)["move"] for role, text in learner.transcript if role == "action"]
        theirs = [json.loads(text)["move"] for role, text in style.transcript if role == "action"]
        for k in range(1, len(theirs)):  # beat_last: the move that beats the learner's last move
            if mine[k - 1] in MOVES3:
                assert theirs[k] == MOVES3[(MOVES3.index(mine[k - 1]) + 1) % 3]
    with pytest.raises(ValueError, match="seats has .* give one per seed"):
        worker.collect(seeds, seats=seats[:1])
    with pytest.raises(KeyError, match="lacks"):
        worker.collect(seeds[:1], seats=[{"agent_1": "snapshot:3/shared"}])


def test_a_frozen_snapshot_never_explores_while_the_learner_does(game):
    _, make_env, policy, chat = game
    seated = PolicyMap({"shared": policy, "snapshot:3/shared": frozen_snapshot(policy)}, _route)
    batch = RolloutWorker(make_env, seated, chat).collect([21, 22, 23], seats=[{"agent_1": "snapshot:3/shared"}] * 3,
                                                          greedy=False, sample_seed=4, explore=0.99)
    explored = {"shared": [], "snapshot:3/shared": []}
    for ep in batch.episodes:
        explored[ep.policy] += [batch.turns[t].explored for t in ep.turns if batch.turns[t].action_ids]
    assert explored["snapshot:3/shared"] and not any(explored["snapshot:3/shared"])
    assert sum(explored["shared"]) >= 0.9 * len(explored["shared"]) > 0


def test_a_seat_wins_over_an_actor_so_the_expert_can_face_a_seated_style(game):
    _, make_env, _, _ = game
    batch = RolloutWorker(make_env, None, None).collect([11, 12], actor=expert_actor,
                                                        seats=[{"agent_1": "style:fixed"}] * 2)
    owners = {(ep.seed, ep.agent): ep.policy for ep in batch.episodes}
    assert owners == {(11, "agent_0"): SCRIPTED, (11, "agent_1"): "style:fixed",
                      (12, "agent_0"): SCRIPTED, (12, "agent_1"): "style:fixed"}
    for ep in batch.episodes:
        if ep.agent == "agent_1":  # fixed: one move the whole match
            assert len({text for role, text in ep.transcript if role == "action"}) == 1


def test_scripted_seats_are_declared_and_forwarded_by_comms():
    env = scenarios.make("repeated_game", n_agents=2, pairing="self")
    env.reset(seed=4)
    first = [env.scripted_action("agent_1", "pattern") for _ in range(1)]
    again = scenarios.make("repeated_game", n_agents=2, pairing="self")
    again.reset(seed=4)
    assert again.scripted_action("agent_1", "pattern") == first[0]  # drawn from the episode seed
    with pytest.raises(ValueError, match="no style"):
        env.scripted_action("agent_1", "nonsense")
    wrapped = comms.wrap(scenarios.make("bargaining", n_agents=2), "full")
    wrapped.reset(seed=1)
    assert wrapped.scripted_action("agent_0", "expert") == wrapped.expert_action("agent_0")
    with pytest.raises(ValueError, match="expert"):
        wrapped.scripted_action("agent_0", "cycle")


def test_a_pool_needs_agents_that_face_each_other():
    with pytest.raises(ConfigError, match="pairing: self"):
        TrainConfig(scenario="repeated_game", agents=2, pool=OpponentPoolConfig(sampling="pfsp"))
    with pytest.raises(ConfigError, match="pool.sampling"):
        TrainConfig(scenario="info_split", agents=2, pool=OpponentPoolConfig(sampling="uniform"))
    with pytest.raises(ConfigError, match="stay empty"):
        OpponentPoolConfig(sampling="uniform", scripted=False, snapshot_every=0)


def test_the_pool_survives_a_checkpoint(game, tmp_path):
    _, _, policy, _ = game
    pool = OpponentPool("pfsp", ["cycle"], window=3)
    pool.add_snapshot({"shared": policy}, 4)
    pool.entry("style:cycle").results.extend([1.0, 0.0])
    pool.save(tmp_path / "pool")
    loaded = OpponentPool.load(tmp_path / "pool", lambda folder: folder)
    assert loaded.names == pool.names and loaded.state() == pool.state()
    assert loaded.snapshots == {"snapshot:4": {"shared": tmp_path / "pool" / "snapshot_4" / "shared"}}
    assert (tmp_path / "pool" / "snapshot_4" / "shared" / "model.safetensors").is_file()
    assert isinstance(loaded.entry("style:cycle"), PoolEntry) and loaded.entry("style:cycle").results == deque([1.0, 0.0])


def test_a_run_against_a_pool_logs_it_grows_it_and_measures_against_it(tmp_path):
    cfg = tiny(tmp_path, scenario="repeated_game", agents=2, scenario_options={"pairing": "self", "rounds": 4})
    cfg.iterations = 3
    cfg.pool = OpponentPoolConfig(sampling="pfsp", snapshot_every=1, max_snapshots=2, eval_episodes=4)
    result = train(cfg)
    client = MlflowClient(result.tracking_uri)
    sizes = [m.value for m in client.get_metric_history(result.run_id, "opponent/pool_size")]
    scripted = len(TRAIN_STYLES) + 1  # the training styles and the expert
    assert sizes == [scripted + 1.0, scripted + 2.0, scripted + 2.0]  # + a snapshot per iteration, capped at 2
    metrics = client.get_run(result.run_id).data.metrics
    assert 0.0 <= metrics["eval/pool/win_rate"] <= 1.0 and 0.0 <= metrics["eval/heldout/win_rate"] <= 1.0
    assert {f"eval/heldout/style/{s}/win_rate" for s in HELDOUT_STYLES} <= set(metrics)
    assert "eval/pool/snapshot:3/win_rate" in metrics and "eval/pool/snapshot:1/win_rate" not in metrics
    snapshots = [metrics[f"eval/pool/snapshot:{k}/win_rate"] for k in (2, 3)]
    assert metrics["eval/pool/snapshots/win_rate"] == pytest.approx(sum(snapshots) / 2)
    saved = json.loads((result.checkpoint / "pool" / "pool.json").read_text())
    assert [e["name"] for e in saved["entries"]][-2:] == ["snapshot:2", "snapshot:3"]
    assert sum(e["games"] for e in saved["entries"]) == 3 * cfg.rl.tasks_per_iteration


def test_a_team_mapping_seats_each_teams_own_snapshot(tmp_path):
    cfg = tiny(tmp_path, scenario="predator_prey", agents=4, policy_mapping="team")
    cfg.iterations = 2
    cfg.pool = OpponentPoolConfig(sampling="uniform", snapshot_every=1, eval_episodes=2)
    result = train(cfg)
    saved = result.checkpoint / "pool"
    teams = sorted(d.name for d in (saved / "snapshot_2").iterdir())
    assert teams == ["team_predator", "team_prey"]
    names = [e["name"] for e in json.loads((saved / "pool.json").read_text())["entries"]]
    assert names == ["style:expert", "snapshot:1", "snapshot:2"]  # no styles in predator_prey: its expert
    metrics = MlflowClient(result.tracking_uri).get_run(result.run_id).data.metrics
    assert {"eval/pool/style:expert/win_rate", "eval/pool/snapshot:2/win_rate", "opponent/pool_size"} <= set(metrics)


@pytest.mark.slow
def test_bargaining_trains_against_its_partner_styles_and_is_measured_against_the_held_out_ones(tmp_path):
    cfg = tiny(tmp_path, scenario="bargaining", agents=2)
    cfg.pool = OpponentPoolConfig(sampling="uniform", snapshot_every=5, eval_episodes=2)
    result = train(cfg)
    names = [e["name"] for e in json.loads((result.checkpoint / "pool" / "pool.json").read_text())["entries"]]
    assert names == ["style:expert", *(f"style:{s}" for s in BARGAINING_TRAIN)]
    metrics = MlflowClient(result.tracking_uri).get_run(result.run_id).data.metrics
    assert {f"eval/heldout/style/{s}/win_rate" for s in BARGAINING_HELDOUT} <= set(metrics)  # deal rates
    assert {f"eval/heldout/style/{s}/return_mean" for s in BARGAINING_HELDOUT} <= set(metrics)
