"""The scenario contract, run over every registered scenario (see ``contract_kit.py``).

Per scenario, agent count (smallest, middle, largest) and option variant: PettingZoo's AEC and
parallel API tests, seed tests, a 300-step determinism check of seeded mixed play, hostile action
values, pickling mid-episode, grammar / expert agreement over whole expert episodes of every split;
per scenario: the declared capabilities, evaluation seeds and rendering.
"""

from __future__ import annotations

import copy
import math
from functools import partial

import pytest
from contract_kit import (
    HOSTILE,
    case_id,
    cases,
    check_every_grammar_action,
    check_expert_episodes,
    check_hostile_actions,
    check_pickle_mid_episode,
    play_steps,
    run_api_tests,
    run_seed_tests,
)

import scenarios
from scenarios import OpponentStyles
from scenarios.base import EVAL_SEED_BLOCK, TRAIN_SEED_LIMIT

CASES = cases()
NAMES = scenarios.names()


def _maker(name: str, n: int, options: dict):
    return partial(scenarios.make, name, n_agents=n, **options)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_pettingzoo_api_and_seeds(case):
    name, n, options = case
    make = _maker(name, n, options)
    run_api_tests(lambda: make(seed=n))
    run_seed_tests(make)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_three_hundred_steps_are_deterministic_and_well_formed(case):
    name, n, options = case
    make = _maker(name, n, options)
    a = play_steps(make(), seed=n, check=True)
    b = play_steps(make(), seed=n)
    assert a == b
    assert sum(len(t) == 3 for t in a) > 1  # more than one episode: resets are part of the check


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_hostile_actions_are_invalid_and_never_raise(case):
    name, n, options = case
    check_hostile_actions(_maker(name, n, options)(), seed=n)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_pickled_mid_episode_clone_continues_identically(case):
    name, n, options = case
    check_pickle_mid_episode(_maker(name, n, options)(), seed=n + 1)


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_expert_action_is_in_the_grammar_over_whole_episodes(case):
    name, n, options = case
    check_expert_episodes(_maker(name, n, options)(), succeeds=not options)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_every_grammar_action_of_every_agent_is_valid(case):
    name, n, options = case
    check_every_grammar_action(_maker(name, n, options)(), seeds=3)


@pytest.mark.parametrize("name", NAMES)
def test_declared_capabilities_are_consistent(name):
    env = scenarios.make(name)
    classes = env.action_classes()
    assert isinstance(env.turn_budget_visible, bool)
    assert isinstance(classes, tuple) and all(isinstance(c, str) and c for c in classes)
    assert len(set(classes)) == len(classes)
    styles = env.opponent_styles()
    assert isinstance(styles, OpponentStyles)
    assert all(isinstance(s, str) for s in (*styles.train, *styles.held_out))
    assert not set(styles.train) & set(styles.held_out)
    assert all(isinstance(env.team_of(a), str) for a in env.possible_agents)
    assert env.episode_stats("agent_0") == {}  # nothing measured before the first reset
    for split in env.splits:
        obs, _ = env.reset(seed=3, options={"split": split})
        assert env.action_classes() == classes  # one set for every episode
        for a in env.possible_agents:
            assert env.observation_space(a) is env.observation_space(a)
            assert env.action_space(a) is env.action_space(a)
            stats = env.episode_stats(a)
            assert all(isinstance(k, str) and isinstance(v, float) and math.isfinite(v) for k, v in stats.items())
            assert isinstance(env.shared_view(a, obs[a]["text"]), str)
            assert all(isinstance(env.action_summary(a, v), str) for v in HOSTILE)
            action, message = env.expert_turn(a, [b for b in env.possible_agents if b != a])
            assert isinstance(action, str) and (message is None or isinstance(message, str))
        probe = copy.deepcopy(env)
        for a in probe.possible_agents:  # another agent's view never breaks the scenario
            assert probe.note_seen(a, obs[probe.possible_agents[-1]]["text"]) is None
        probe.step({a: probe.expert_action(a) for a in probe.agents})


@pytest.mark.parametrize("name", NAMES)
def test_eval_seeds_are_disjoint_from_training_and_each_other(name):
    env = scenarios.make(name)
    cls = type(env)
    blocks = {s: set(cls.eval_seeds(s, 500)) for s in cls.splits}
    assert all(len(b) == 500 and min(b) >= TRAIN_SEED_LIMIT for b in blocks.values())
    assert sum(len(b) for b in blocks.values()) == len(set().union(*blocks.values()))
    assert TRAIN_SEED_LIMIT == cls.TRAIN_SEED_LIMIT == env.TRAIN_SEED_LIMIT
    assert env.eval_seeds(cls.splits[-1], 3) == cls.eval_seeds(cls.splits[-1], 3)
    with pytest.raises(ValueError, match="split must be one of"):
        cls.eval_seeds("nope", 3)
    # Skipping passes over the development seeds and stays inside the split's block.
    fresh = cls.eval_seeds(cls.splits[-1], 3, skip=500)
    assert not set(fresh) & blocks[cls.splits[-1]] and fresh[0] == max(blocks[cls.splits[-1]]) + 1
    with pytest.raises(ValueError, match="n \\+ skip"):
        cls.eval_seeds(cls.splits[-1], 3, skip=EVAL_SEED_BLOCK)


@pytest.mark.parametrize("name", NAMES)
def test_render_ansi_shows_every_agent(name):
    env = scenarios.make(name, seed=0, render_mode="ansi")
    env.reset()
    assert all(a in env.render() for a in env.possible_agents)
    plain = scenarios.make(name, seed=0)
    plain.reset()
    assert plain.render() is None
    with pytest.raises(ValueError, match="render_mode"):
        scenarios.make(name, render_mode="rgb_array")
