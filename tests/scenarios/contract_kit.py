"""The scenario contract kit: checks every registered scenario must pass, whatever its rules.

``tests/scenarios/test_contract.py`` runs each check over every name in ``scenarios.names()`` at the
smallest, a middle and the largest agent count the scenario takes (and over the option variants in
``VARIANTS``), so a new scenario gets all of it by registering. A plain module like
``scenario_helpers``: tests/ has no packages, so conftest cannot be imported.

It leaves out each scenario's own rules (rewards, endings, expert floors over many seeds): those
stay in the scenario's own test file.
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium.spaces import Dict, Space, Text
from pettingzoo.test import api_test, parallel_api_test, parallel_seed_test
from pettingzoo.utils.conversions import parallel_to_aec

import scenarios
from scenarios.base import HARNESS_FAULTS, TERMINATION_REASONS, TRUNCATION_REASONS, TextScenario
from scenarios.grammar import ActionGrammar

# Option sets whose rules differ enough from the defaults to run the whole contract again.
VARIANTS: dict[str, list[dict[str, Any]]] = {
    "navigation": [{"settle": True}],
    "repeated_game": [{"pairing": "self"}],
}
STEPS = 300  # steps of the determinism check, over as many episodes as it takes
JUNK: list[object] = ["", "   ", "garbage", "null", "[]", "42", '{"": ""}', '{"x": [1, {"y": null}]}',
                      "{" * 40, None, 7, 2.5, {"action": "x"}, ["x"]]
HOSTILE: list[object] = [
    "", " \t\n ", "\x00\x1b[31m\x07", "caf\u00e9 \u2615", "\u00fcp", "x" * 100_000, "{" + "y" * 5_000 + "}",
    "null", "[]", '""', "42", "-1e999", '{"": ""}', '{"x": [1, {"y": null}]}', '{"move": ', "[" * 256 + "]" * 256,
    '{"a": ' * 70 + "1" + "}" * 70, "{" * 600, None, 0, 3.5, float("nan"), True, b"bytes", {"move": "up"},
    ["up"], object(),
]


def clone(env: TextScenario) -> TextScenario:
    """A copy to probe an action on (a pickle round trip: much cheaper than deepcopy for the tool worlds)."""
    return pickle.loads(pickle.dumps(env, protocol=pickle.HIGHEST_PROTOCOL))


def contains(space: Space, x: object) -> bool:
    """``space.contains(x)``, with gymnasium's rule for ``Text`` and ``Dict`` checked set-wise (it is
    the hot spot of the 300-step check); any other space asks the space itself."""
    if isinstance(space, Text):
        return isinstance(x, str) and space.min_length <= len(x) <= space.max_length and set(x) <= space.character_set
    if isinstance(space, Dict):
        return isinstance(x, dict) and x.keys() == space.spaces.keys() and all(
            contains(space[k], x[k]) for k in space.spaces)
    return space.contains(x)


def valid_count(name: str, n: int) -> int | None:
    """``n`` if the scenario takes it, else the nearest count it takes (upward first), else None."""
    lo, hi = scenarios.info(name).agent_range
    for k in sorted(range(lo, hi + 1), key=lambda k: (abs(k - n), k < n)):
        try:
            scenarios.make(name, n_agents=k)
        except ValueError:
            continue
        return k
    return None


def agent_counts(name: str) -> list[int]:
    """The smallest, a middle and the largest agent count the scenario takes."""
    lo, hi = scenarios.info(name).agent_range
    counts = [valid_count(name, n) for n in (lo, (lo + hi) // 2, hi)]
    return list(dict.fromkeys(n for n in counts if n is not None))


def cases() -> list[tuple[str, int, dict[str, Any]]]:
    """(name, agent count, options) for every registered scenario and count, and every option variant
    at the scenario's middle and largest counts (its smallest team rarely exercises a variant's rules)."""
    out = []
    for name in scenarios.names():
        counts = agent_counts(name)
        out.extend((name, n, {}) for n in counts)
        for options in VARIANTS.get(name, []):
            out.extend((name, n, options) for n in counts[-2:])
    return out


def case_id(case: tuple[str, int, dict[str, Any]]) -> str:
    name, n, options = case
    return "-".join([name, str(n), *(f"{k}={v}" for k, v in options.items())])


def sample_grammar(grammar: ActionGrammar, rng: np.random.Generator) -> str:
    """A random valid action without expanding the grammar (some grammars are huge products)."""
    template = grammar.templates[int(rng.integers(len(grammar.templates)))]
    return "".join(p if isinstance(p, str) else p.values[int(rng.integers(len(p.values)))] for p in template)


def mixed_action(env: TextScenario, agent: str, rng: np.random.Generator) -> object:
    """The expert, a random grammar action or junk (deterministic given ``rng``)."""
    r = rng.random()
    if r < 0.45:
        return env.expert_action(agent)
    if r < 0.85:
        grammar = env.action_grammar(agent)
        return sample_grammar(grammar, rng) if grammar.templates else env.expert_action(agent)
    return JUNK[int(rng.integers(len(JUNK)))]


def quiet(check: Callable[[], None]) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check()


def run_api_tests(make: Callable[[], TextScenario]) -> None:
    quiet(lambda: parallel_api_test(make(), num_cycles=15))
    quiet(lambda: api_test(parallel_to_aec(make()), num_cycles=15))


def run_seed_tests(make: Callable[..., TextScenario]) -> None:
    quiet(lambda: parallel_seed_test(lambda: make(seed=0)))
    a, b = make(seed=7), make()
    assert a.reset() == b.reset(seed=7)
    assert a.state() == b.state() and a.episode_seed == b.episode_seed == 7


def check_step(env: TextScenario, live: list[str], out: tuple, actions: dict[str, object], state: str) -> None:
    """The invariants of one step's outputs (``live``: the agents that acted; ``state``: ``env.state()`` after it)."""
    obs, rew, term, trunc, infos = out
    assert set(obs) == set(rew) == set(term) == set(trunc) == set(infos) == set(live)
    classes = set(env.action_classes())
    for a in live:
        assert contains(env.observation_space(a), obs[a]), obs[a]
        assert math.isfinite(rew[a])
        info = infos[a]
        assert set(info["reward_components"]) == set(env.default_reward_weights)
        text = obs[a]["text"]
        ended = "termination_reason" in info
        assert ended == (a not in env.agents) == (term[a] or trunc[a])
        if ended:
            reason = info["termination_reason"]
            assert reason in TERMINATION_REASONS | TRUNCATION_REASONS and reason not in HARNESS_FAULTS, reason
            assert term[a] == (reason in TERMINATION_REASONS) and trunc[a] == (reason in TRUNCATION_REASONS)
            stats = env.episode_stats(a)
            assert all(isinstance(k, str) and isinstance(v, float) and math.isfinite(v) for k, v in stats.items())
        # A malformed action is an error observation (unless the episode ended on that step, e.g. a deal).
        assert text.startswith("error:") == info["invalid_action"] or (ended and info["invalid_action"])
        cls = env.action_class(a, actions.get(a))
        assert cls is None or cls in classes
        if classes and not info["invalid_action"]:
            assert cls in classes, (actions.get(a), cls)
    assert contains(env.state_space, state)


def play_steps(env: TextScenario, seed: int, steps: int = STEPS, check: bool = False) -> list:
    """Observations, rewards, infos and states of ``steps`` steps of seeded mixed play, episodes rotating splits."""
    rng = np.random.default_rng(seed)
    trace: list = []
    done, episode = 0, 0
    while done < steps:
        split = env.splits[episode % len(env.splits)]
        trace.append((*env.reset(seed=seed * 1000 + episode, options={"split": split}), env.state()))
        while env.agents and done < steps:
            live = list(env.agents)
            actions = {a: mixed_action(env, a, rng) for a in live}
            out = env.step(actions)
            state = env.state()
            if check:
                check_step(env, live, out, actions, state)
            trace.append((*out, state, list(env.agents)))
            done += 1
        episode += 1
    return trace


def check_invalid(env: TextScenario, agent: str, value: object, out: tuple) -> None:
    """``agent``'s hostile ``value`` became an invalid action and an error observation."""
    obs, rew, _, _, infos = out
    info = infos[agent]
    assert info["invalid_action"] is True, (value, obs[agent])
    assert obs[agent]["text"].startswith("error:") or agent not in env.agents, (value, obs[agent])
    assert contains(env.observation_space(agent), obs[agent]) and math.isfinite(rew[agent])
    assert info.get("termination_reason") not in HARNESS_FAULTS
    if "format" in info["reward_components"]:
        assert info["reward_components"]["format"] == -1.0
    assert env.action_class(agent, value) is None
    assert isinstance(env.action_summary(agent, value), str)


def check_hostile_actions(env: TextScenario, seed: int) -> None:
    """Every hostile value, from every live agent at once at reset, then from one agent mid-episode."""
    env.reset(seed=seed)
    for value in HOSTILE:
        probe = clone(env)
        live = list(probe.agents)
        out = probe.step(dict.fromkeys(live, value))
        for a in live:
            check_invalid(probe, a, value, out)
    probe = clone(env)
    live = list(probe.agents)
    out = probe.step({})  # nobody acted: a missing action is malformed too
    for a in live:
        check_invalid(probe, a, None, out)
    for _ in range(2):
        if env.agents:
            env.step({a: env.expert_action(a) for a in env.agents})
    for i, value in enumerate(HOSTILE):
        if not env.agents:
            break
        probe = clone(env)
        live = list(probe.agents)
        agent = live[i % len(live)]
        out = probe.step({**{a: probe.expert_action(a) for a in live}, agent: value})
        check_invalid(probe, agent, value, out)


def check_pickle_mid_episode(env: TextScenario, seed: int) -> None:
    """A pickled copy taken mid-episode continues exactly like the original."""
    rng = np.random.default_rng(seed)
    env.reset(seed=seed, options={"split": env.splits[-1]})
    for _ in range(3):
        if env.agents:
            env.step({a: mixed_action(env, a, rng) for a in env.agents})
    clone = pickle.loads(pickle.dumps(env))
    assert clone.state() == env.state() and clone.agents == env.agents
    while env.agents:
        assert {a: clone.expert_action(a) for a in clone.agents} == {a: env.expert_action(a) for a in env.agents}
        assert all(clone.action_grammar(a) == env.action_grammar(a) for a in env.agents)
        actions = {a: mixed_action(env, a, rng) for a in env.agents}
        assert clone.step(actions) == env.step(actions)
        assert clone.state() == env.state()
    assert clone.agents == []


def _probe_grammar(env: TextScenario, agent: str, expert: dict[str, str], rng: np.random.Generator) -> None:
    """Five of ``agent``'s grammar actions (all of them when there are no more) are valid and classed."""
    grammar = env.action_grammar(agent)
    try:
        actions = grammar.expand(limit=5)  # every move of a grid or of the repeated game
    except ValueError:
        actions = [sample_grammar(grammar, rng) for _ in range(5)]
    classes = set(env.action_classes())
    for action in actions:
        probe = clone(env)
        _, _, _, _, infos = probe.step({**expert, agent: action})
        assert infos[agent]["invalid_action"] is False, (action, infos[agent])
        assert not classes or env.action_class(agent, action) in classes, action


def check_every_grammar_action(env: TextScenario, seeds: int, limit: int = 512, sample: int = 64) -> None:
    """Over expert episodes of every split: every action in every live agent's grammar, at every turn, is a
    valid action with a declared class (all of them up to ``limit`` actions, else ``sample`` drawn at random)."""
    rng = np.random.default_rng(0)
    classes = set(env.action_classes())
    for split in env.splits:
        for seed in env.eval_seeds(split, seeds):
            env.reset(seed=seed, options={"split": split})
            while env.agents:
                expert = {a: env.expert_action(a) for a in env.agents}
                for agent in env.agents:
                    grammar = env.action_grammar(agent)
                    try:
                        actions = grammar.expand(limit=limit)
                    except ValueError:
                        actions = [sample_grammar(grammar, rng) for _ in range(sample)]
                    for action in actions:
                        _, _, _, _, infos = clone(env).step({**expert, agent: action})
                        assert infos[agent]["invalid_action"] is False, (split, seed, agent, action, infos[agent])
                        assert not classes or env.action_class(agent, action) in classes, action
                env.step(expert)


def check_expert_episodes(env: TextScenario, seeds: int = 2, succeeds: bool = True) -> None:
    """Whole expert episodes of every split: the expert's action is in the grammar and classed, a sample
    of one agent's grammar actions is valid every turn of the split's first episode (the agent rotates),
    departed agents have an empty grammar, no harness fault occurs, and
    (``succeeds``) some agent-episode of every split ends in success. Self-play variants turn that off:
    an expert against itself may draw every match (repeated_game, pairing="self")."""
    rng = np.random.default_rng(0)
    classes = set(env.action_classes())
    for split in env.splits:
        reasons: list[str] = []
        for k, seed in enumerate(env.eval_seeds(split, seeds)):
            env.reset(seed=seed, options={"split": split})
            turn = 0
            while env.agents:
                live = list(env.agents)
                expert = {a: env.expert_action(a) for a in live}
                for a in live:
                    assert expert[a] in env.action_grammar(a), (split, a, expert[a])
                    assert env.expert_turn(a)[0] == expert[a]
                    assert not classes or env.action_class(a, expert[a]) in classes
                if k == 0:
                    _probe_grammar(env, live[turn % len(live)], expert, rng)
                *_, infos = env.step(expert)
                reasons += [i["termination_reason"] for i in infos.values() if "termination_reason" in i]
                for a in env.possible_agents:
                    if a not in env.agents:
                        assert env.action_grammar(a).templates == (), (split, a)
                turn += 1
        assert not set(reasons) & HARNESS_FAULTS, (split, reasons)
        assert "success" in reasons or not succeeds, (split, reasons)
