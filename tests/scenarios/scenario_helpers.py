"""Helpers shared by the scenario tests (a plain module: tests/ has no packages, so conftest cannot be imported)."""

import json

import numpy as np


def play_expert(env, seed: int) -> dict[str, str]:
    """Run every agent with the expert until all finish; return each agent's termination reason."""
    env.reset(seed=seed)
    reasons = {}
    while env.agents:
        actions = {a: env.expert_action(a) for a in env.agents}
        _, _, _, _, infos = env.step(actions)
        for a, info in infos.items():
            if "termination_reason" in info:
                reasons[a] = info["termination_reason"]
    return reasons


def mixed_action(env, agent: str, rng: np.random.Generator) -> str:
    """Expert, a random grammar action, or junk: exercises every branch deterministically."""
    r = rng.random()
    if r < 0.5:
        return env.expert_action(agent)
    if r < 0.85:
        options = env.action_grammar(agent).expand()
        return options[int(rng.integers(len(options)))]
    return json.dumps({"tool": "nope", "args": {}}) if r < 0.93 else "garbage"
