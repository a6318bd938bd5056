"""Rollouts on Ray actors (a real local cluster): the same episodes as in-process, new weights reach the
workers, a worker whose process dies is restarted and its part played again, and a run trains with them."""

from __future__ import annotations

import math
import os
import signal
import sys

import mlflow
import pytest
import test_rollout_turn_cache
import torch
from run_helpers import tiny
from test_lora_runs import lora_cfg, user_model  # noqa: F401 (a fixture)
from test_rollout_turn_cache import setup  # noqa: F401 (a fixture: an info_split policy)

from marl.config import ConfigError, TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.checkpoint import read_meta
from marl.run.remote import RemoteRollouts
from marl.run.train import train
from policies.chat import ChatFormat

ray = pytest.importorskip("ray")
# The env factories live in test modules, which Ray's workers cannot import: pickle them by value.
for module in (sys.modules[__name__], test_rollout_turn_cache):
    ray.cloudpickle.register_pickle_by_value(module)
shared_info_split = test_rollout_turn_cache._shared_info_split


class DiesOnce:
    """An env factory whose first call in any process but the test's kills that process (a worker dying in
    the middle of an iteration); `marker` remembers that it happened."""

    def __init__(self, marker: str) -> None:
        self.marker, self.driver = marker, os.getpid()

    def __call__(self):
        if os.getpid() != self.driver:
            try:  # created atomically: of two workers building envs at once, one dies
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return shared_info_split()
            os._exit(1)
        return shared_info_split()


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False)
    yield
    ray.shutdown()


def assert_same_episodes(a, b):
    assert [e.transcript for e in a.episodes] == [e.transcript for e in b.episodes]
    assert [(e.seed, e.group, e.agent, e.env, e.ret) for e in a.episodes] == \
        [(e.seed, e.group, e.agent, e.env, e.ret) for e in b.episodes]
    assert [t.action_ids for t in a.turns] == [t.action_ids for t in b.turns]
    assert [t.prompt_ids for t in a.turns] == [t.prompt_ids for t in b.turns]
    worst = max(abs(x - y) for s, t in zip(a.turns, b.turns, strict=True)
                for x, y in zip(s.logprobs, t.logprobs, strict=True))
    assert worst < 1e-4


def test_two_workers_play_the_episodes_of_one_in_process_worker(cluster, setup):  # noqa: F811
    tokenizer, policy = setup
    chat = ChatFormat(tokenizer)
    seeds, groups = [s for s in range(4) for _ in range(2)], [g for g in range(4) for _ in range(2)]
    local = RolloutWorker(shared_info_split, policy, chat, max_rows=6)  # parts of two envs (3 agents each)
    remote = RemoteRollouts(RolloutWorker(shared_info_split, policy, chat, max_rows=6), workers=2)
    try:
        here = local.collect(seeds, groups, sample_seed=11, record_state=True)
        there = remote.collect(seeds, groups, sample_seed=11, record_state=True)
        assert_same_episodes(here, there)
        assert [t.state for t in here.turns] == [t.state for t in there.turns]
        assert there.generated_tokens == here.generated_tokens and there.env_steps == here.env_steps
        # the messages the scenario's comms carried were counted in the workers' environments
        assert remote.message_stats()["comms/sent"] == local.message_stats()["comms/sent"] > 0
        # new weights reach the workers at the next collection
        with torch.no_grad():
            for p in policy.model.parameters():
                p.mul_(0.8)
        # (an exploring collection, `rl.explore`, explores the same actions on the workers)
        here, there = (w.collect(seeds, groups, sample_seed=12, explore=0.3) for w in (local, remote))
        assert_same_episodes(here, there)
        assert [t.explored for t in here.turns] == [t.explored for t in there.turns] and any(t.explored for t in here.turns)
        assert remote.restarts == 0
    finally:
        remote.close()
        with torch.no_grad():
            for p in policy.model.parameters():
                p.div_(0.8)


def test_a_worker_that_dies_mid_iteration_is_restarted_and_its_part_played_again(cluster, setup, tmp_path):  # noqa: F811
    tokenizer, policy = setup
    chat = ChatFormat(tokenizer)
    seeds = list(range(6))
    local = RolloutWorker(shared_info_split, policy, chat, max_rows=9)
    dying = DiesOnce(str(tmp_path / "died"))
    remote = RemoteRollouts(RolloutWorker(dying, policy, chat, max_rows=9), workers=2, max_restarts=2)
    try:
        there = remote.collect(seeds, sample_seed=5)
        assert os.path.exists(dying.marker)  # a worker's process did die during the collection
        assert remote.restarts == 1
        assert_same_episodes(local.collect(seeds, sample_seed=5), there)
        # a worker killed from outside between iterations comes back too, and is counted
        os.kill(remote.pids()[0], signal.SIGKILL)
        assert_same_episodes(local.collect(seeds, sample_seed=6), remote.collect(seeds, sample_seed=6))
        assert remote.restarts == 2
    finally:
        remote.close()


def test_more_workers_than_the_cluster_has_cpus_is_refused_with_the_fix(cluster, setup):  # noqa: F811
    tokenizer, policy = setup
    with pytest.raises(RuntimeError, match="lower rollout_workers or ray.cpus_per_worker"):
        RemoteRollouts(RolloutWorker(shared_info_split, policy, ChatFormat(tokenizer)), workers=3)


def test_bad_worker_settings_are_refused():
    with pytest.raises(ConfigError, match="rollout_workers"):
        TrainConfig(rollout_workers=-1).validate()
    cfg = TrainConfig()
    cfg.ray.cpus_per_worker = 0
    with pytest.raises(ConfigError, match="ray.cpus_per_worker"):
        cfg.validate()


@pytest.mark.slow
def test_a_run_with_rollout_workers_and_an_opponent_pool_trains_and_logs_restarts(tmp_path):
    cfg = tiny(tmp_path, scenario="repeated_game", agents=2, rollout_workers=2,
               scenario_options={"pairing": "self"})
    cfg.iterations, cfg.sft.seconds = 3, 0.0
    cfg.pool.sampling, cfg.pool.snapshot_every = "uniform", 1  # snapshots join the pool: new policies to ship
    was_up = ray.is_initialized()
    result = train(cfg)
    client = mlflow.MlflowClient(result.tracking_uri)
    restarts = client.get_metric_history(result.run_id, "rollout/worker_restarts")
    assert [m.value for m in restarts] == [0.0, 0.0, 0.0]
    assert client.get_metric_history(result.run_id, "train/policy_loss")
    assert ray.is_initialized() == was_up  # a local cluster the run started went with it


@pytest.mark.slow
def test_lora_adapters_per_agent_train_through_the_workers(tmp_path, user_model):  # noqa: F811
    # every agent's adapter shares one frozen base: the workers get the base once and the adapters each call
    cfg = lora_cfg(tmp_path, user_model, rollout_workers=2)
    cfg.iterations = 2
    result = train(cfg)
    history = mlflow.MlflowClient(result.tracking_uri).get_metric_history(result.run_id, "rollout/worker_restarts")
    assert [m.value for m in history] == [0.0, 0.0]
    assert read_meta(result.checkpoint).adapters == ("agent_0", "agent_1")


def test_async_rollouts_need_workers_and_a_plain_loop():
    cfg = TrainConfig()
    cfg.ray.async_rollouts = True
    with pytest.raises(ConfigError, match="set rollout_workers > 0"):
        cfg.validate()
    cfg = TrainConfig(scenario="repeated_game", agents=2, rollout_workers=2, scenario_options={"pairing": "self"})
    cfg.ray.async_rollouts, cfg.pool.sampling = True, "uniform"
    with pytest.raises(ConfigError, match="use pool.sampling off and no curriculum"):
        cfg.validate()


@pytest.mark.slow
def test_async_rollouts_train_on_the_seeds_a_synchronous_run_draws(tmp_path):
    runs = {}
    for mode in (False, True):
        cfg = tiny(tmp_path / str(mode), scenario="info_split", agents=2, rollout_workers=2)
        cfg.iterations, cfg.ray.async_rollouts, cfg.sft.seconds, cfg.eval_episodes = 3, mode, 0.0, 0
        result = train(cfg)
        runs[mode] = mlflow.MlflowClient(result.tracking_uri), result.run_id
    (sync_client, sync), (client, ahead) = runs[False], runs[True]  # each run its own store
    waits = client.get_metric_history(ahead, "perf/rollout_wait_seconds")
    assert len(waits) == 3 and not sync_client.get_metric_history(sync, "perf/rollout_wait_seconds")
    assert all(math.isfinite(m.value) for m in client.get_metric_history(ahead, "train/policy_loss"))
    # the first batch comes from the same weights and seeds either way; later ones from one update behind
    first = [c.get_metric_history(run, "rollout/return_mean")[0].value for c, run in runs.values()]
    assert first[0] == first[1]
