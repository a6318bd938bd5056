"""Helpers shared by the grid scenario tests (navigation, predator_prey)."""

import json
import pickle
import string
import warnings

import numpy as np
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec

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


def trace(env, seed: int) -> list:
    """Observations, rewards, infos and state of one episode under seeded mixed actions."""
    rng = np.random.default_rng(seed)
    obs, infos = env.reset(seed=seed)
    out = [(obs, infos, env.state())]
    while env.agents:
        actions = {a: mixed_action(env, a, rng) for a in env.agents}
        out.append((repr(actions), *env.step(actions), env.state(), list(env.agents)))
    return out


def run_api_tests(env_factory) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(env_factory(), num_cycles=25)
        api_test(parallel_to_aec(env_factory()), num_cycles=25)


def check_pickle_mid_episode(env, seed: int) -> None:
    env.reset(seed=seed)
    for _ in range(2):
        env.step({a: env.expert_action(a) for a in env.agents})
    clone = pickle.loads(pickle.dumps(env))
    assert clone.state() == env.state()
    while env.agents:
        actions = {a: env.expert_action(a) for a in env.agents}
        assert clone.step(actions) == env.step(actions)
        assert clone.state() == env.state()
    assert clone.agents == []


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
