"""The registry and option validation (tool_use as the example); the PettingZoo contract itself is in test_contract.py."""

import pytest

import scenarios
from scenarios.tool_use import ToolUseEnv


def test_registry_and_options_errors():
    assert "tool_use" in scenarios.names()
    info = scenarios.info("tool_use")
    assert (info.kind, info.agent_range) == ("single", (1, 16)) and info.description
    with pytest.raises(ValueError, match="tool_use"):
        scenarios.make("nope")
    with pytest.raises(ValueError, match="registered"):
        scenarios.info("nope")
    with pytest.raises(ValueError, match="already registered"):
        scenarios.register("tool_use", type("Other", (ToolUseEnv,), {}))
    with pytest.raises(ValueError, match="valid options"):
        scenarios.make("tool_use", colour="red")
    with pytest.raises(ValueError, match="n_agents"):
        scenarios.make("tool_use", n_agents=17)
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
