"""Helpers shared by the grid scenario tests (navigation, predator_prey)."""

import json
import string

import numpy as np

JUNK = [
    None, 3, "", "   ", "garbage", "up", '"up"', "[]", "null", '{"move": 1}', '{"move": "north"}',
    '{"move": "up", "msg": "hi"}', '{"mv": "up"}', '{"move": ["up"]}', '{"move": "UP"}',
    '{"move": "\u00fcp"}', "{" * 600, "[" * 400 + "]" * 400, '{"move": "up"', {"move": "up"}, ["up"],
]


def junk_action(rng: np.random.Generator) -> object:
    return JUNK[int(rng.integers(len(JUNK)))]


def mixed_action(env, agent: str, rng: np.random.Generator) -> object:
    """Expert, a random grammar action, or junk (deterministic given ``rng``)."""
    r = rng.random()
    if r < 0.4:
        return env.expert_action(agent)
    if r < 0.8:
        options = env.action_grammar(agent).expand()
        return options[int(rng.integers(len(options)))]
    return junk_action(rng)


def random_episodes(make_env, counts: list[int], n_episodes: int, seed: int = 0) -> dict[str, int]:
    """Play many short episodes of mixed actions; check every output; return reason counts."""
    rng = np.random.default_rng(seed)
    envs = {n: make_env(n) for n in counts}
    reasons: dict[str, int] = {}
    printable = set(string.printable)
    for i in range(n_episodes):
        env = envs[counts[i % len(counts)]]
        obs, _ = env.reset(seed=i)
        while env.agents:
            live = list(env.agents)
            actions = {a: mixed_action(env, a, rng) for a in live}
            obs, rew, term, trunc, infos = env.step(actions)
            assert set(obs) == set(rew) == set(term) == set(trunc) == set(infos) == set(live)
            for a in live:
                assert set(obs[a]["text"]) <= printable and 0 < len(obs[a]["text"]) <= 2048
                assert np.isfinite(rew[a])
                assert infos[a]["invalid_action"] == obs[a]["text"].startswith("error:")
                if term[a] or trunc[a]:
                    reason = infos[a]["termination_reason"]
                    reasons[reason] = reasons.get(reason, 0) + 1
                    assert a not in env.agents
                    assert trunc[a] == (reason == "max_turns")
        assert len(env.state()) <= env.state_space.max_length
    return reasons


def canonical(move: str) -> str:
    return json.dumps({"move": move})
