"""PettingZoo contracts, determinism, seeds, pickling, options and the registry."""

import pickle
import string
import warnings

import numpy as np
import pytest
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec
from scenario_helpers import mixed_action

import scenarios
from scenarios.base import TRAIN_SEED_LIMIT
from scenarios.tool_use import ToolUseEnv


@pytest.mark.parametrize("n_agents", [1, 3])
def test_pettingzoo_parallel_api(n_agents):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(scenarios.make("tool_use", n_agents=n_agents, seed=0), num_cycles=20)


@pytest.mark.parametrize("n_agents", [1, 3])
def test_pettingzoo_aec_api(n_agents):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        api_test(parallel_to_aec(scenarios.make("tool_use", n_agents=n_agents, seed=0)), num_cycles=20)


def _trace(env, seed: int):
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    trace = [(obs, infos, env.state())]
    while env.agents:
        actions = {a: mixed_action(env, a, rng) for a in env.agents}
        trace.append((actions, *env.step(actions), env.state()))
    return trace


@pytest.mark.parametrize("split", ToolUseEnv.splits)
def test_multi_step_determinism(split):
    for seed in range(5):
        a = _trace(scenarios.make("tool_use", n_agents=3, split=split), seed)
        b = _trace(scenarios.make("tool_use", n_agents=3, split=split), seed)
        assert a == b
        assert len(a) > 2


def test_constructor_seed_equals_reset_seed():
    a = scenarios.make("tool_use", seed=7).reset()[0]
    b = scenarios.make("tool_use").reset(seed=7)[0]
    assert a == b


def test_eval_seeds_disjoint_from_training_and_each_other():
    blocks = {s: set(ToolUseEnv.eval_seeds(s, 1000)) for s in ToolUseEnv.splits}
    for split, seeds in blocks.items():
        assert len(seeds) == 1000
        assert min(seeds) >= TRAIN_SEED_LIMIT == ToolUseEnv.TRAIN_SEED_LIMIT == scenarios.make("tool_use").TRAIN_SEED_LIMIT
        for other, other_seeds in blocks.items():
            if other != split:
                assert not seeds & other_seeds
    with pytest.raises(ValueError, match="split must be one of"):
        ToolUseEnv.eval_seeds("nope", 3)


def test_pickle_round_trip_mid_episode():
    env = scenarios.make("tool_use", n_agents=2, split="hard", seed=4)
    env.reset()
    env.step({a: env.expert_action(a) for a in env.agents})
    clone = pickle.loads(pickle.dumps(env))
    assert clone.state() == env.state()
    actions = {a: env.expert_action(a) for a in env.agents}
    assert clone.step(actions) == env.step(actions)


def test_spaces_cached_and_observations_printable():
    env = scenarios.make("tool_use", n_agents=2, split="adversarial", seed=1)
    assert env.observation_space("agent_0") is env.observation_space("agent_0")
    assert env.action_space("agent_1") is env.action_space("agent_1")
    rng = np.random.default_rng(0)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        while True:
            for o in obs.values():
                assert set(o["text"]) <= set(string.printable)
                assert env.observation_space("agent_0").contains(o)
            assert env.state_space.contains(env.state())
            if not env.agents:
                break
            obs, *_ = env.step({a: mixed_action(env, a, rng) for a in env.agents})


def test_render_ansi():
    env = scenarios.make("tool_use", seed=0, render_mode="ansi")
    env.reset()
    assert "agent_0" in env.render()


def test_registry_and_options_errors():
    assert "tool_use" in scenarios.names()
    info = scenarios.info("tool_use")
    assert (info.kind, info.agent_range) == ("single", (1, 8)) and info.description
    with pytest.raises(ValueError, match="tool_use"):
        scenarios.make("nope")
    with pytest.raises(ValueError, match="registered"):
        scenarios.info("nope")
    with pytest.raises(ValueError, match="already registered"):
        scenarios.register("tool_use", type("Other", (ToolUseEnv,), {}))
    with pytest.raises(ValueError, match="valid options"):
        scenarios.make("tool_use", colour="red")
    with pytest.raises(ValueError, match="n_agents"):
        scenarios.make("tool_use", n_agents=9)
    with pytest.raises(ValueError, match="valid keys"):
        scenarios.make("tool_use", reward_weights={"style": 1.0})
    with pytest.raises(ValueError, match="split must be one of"):
        scenarios.make("tool_use", split="easy")
    with pytest.raises(ValueError, match="max_turns"):
        scenarios.make("tool_use", max_turns=0)
    with pytest.raises(ValueError, match="train_mix"):
        scenarios.make("tool_use", train_mix=(1, -1, 0))
    with pytest.raises(ValueError, match="tool_timeout_s"):
        scenarios.make("tool_use", tool_timeout_s=0)


def test_reward_weights_apply():
    env = scenarios.make("tool_use", split="basic", seed=2, reward_weights={"task": 5.0, "format": 1.0})
    env.reset()
    _, rew, *_ = env.step({"agent_0": "junk"})
    assert rew["agent_0"] == -1.0
