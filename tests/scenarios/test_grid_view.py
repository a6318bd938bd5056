"""Option ``view`` of the grid scenarios: an agent reads only what is within its square of view."""

import re

import numpy as np
import pytest
from grid_helpers import random_episodes

import scenarios


def _cell(token: str) -> tuple[int, int]:
    return int(token[1]), int(token[2])


def _seen(text: str, label: str) -> list[tuple[int, int]]:
    """Cells listed after ``label`` up to the next ``;``, ``.`` or line end."""
    m = re.search(rf"{label}:? ((?:(?:agent_\d+ )?c\d\d ?)+)", text)
    return [_cell(t) for t in re.findall(r"c\d\d", m.group(1))] if m else []


def _you(text: str) -> tuple[int, int]:
    return _cell(re.search(r"(?:you|at) (c\d\d)", text).group(1))


def _near(a: tuple[int, int], b: tuple[int, int], view: int) -> bool:
    return max(abs(a[0] - b[0]), abs(a[1] - b[1])) <= view


@pytest.mark.parametrize("view", [0, -1, 1.5, True, "2"])
def test_view_must_be_a_whole_number_of_cells(view):
    for name, n in (("navigation", 2), ("predator_prey", 2)):
        with pytest.raises(ValueError, match="view"):
            scenarios.make(name, n_agents=n, view=view)


def test_navigation_lists_only_what_is_in_view():
    env = scenarios.make("navigation", n_agents=16, view=1)
    rng = np.random.default_rng(0)
    hidden = 0
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        for o in obs.values():  # turn 1: every landmark (the task), only the agents in view
            assert len(_seen(o["text"], "landmarks")) == 16
            me = _you(o["text"])
            assert all(_near(me, c, 1) for c in _seen(o["text"], "others"))
        while env.agents:
            actions = {}
            for a in env.agents:
                legal = env.action_grammar(a).expand()
                actions[a] = legal[int(rng.integers(len(legal)))]
            obs, *_ = env.step(actions)
            for agent, o in obs.items():
                me = _you(o["text"])
                seen = _seen(o["text"], "others") + _seen(o["text"], "landmarks")
                assert all(_near(me, c, 1) for c in seen), o["text"]
                truth = [c for a, c in env.pos.items() if a != agent] + list(env.landmarks)
                shown = [divmod(c, env.board.size) for c in truth if _near(me, divmod(c, env.board.size), 1)]
                assert sorted(seen) == sorted(shown)
                hidden += len(truth) - len(seen)
                assert re.search(r"covered \d+/16", o["text"])
    assert hidden > 0


def test_predator_prey_lists_only_agents_in_view_from_the_first_turn():
    env = scenarios.make("predator_prey", n_agents=8, view=2, split="hard")
    rng = np.random.default_rng(1)
    for seed in range(10):
        obs, _ = env.reset(seed=seed)
        while True:
            for agent, o in obs.items():
                if agent not in env.pos:
                    continue  # caught this turn
                me = _you(o["text"])
                seen = _seen(o["text"], "predator") + _seen(o["text"], "prey")
                others = [divmod(c, env.board.size) for a, c in env.pos.items() if a != agent]
                assert sorted(seen) == sorted(c for c in others if _near(me, c, 2)), o["text"]
            if not env.agents:
                break
            obs, *_ = env.step({a: env.expert_action(a) if rng.random() < 0.7 else '{"move": "stay"}'
                                for a in env.agents})


def test_view_bounds_what_an_observation_lists_however_large_the_team():
    def later_turns(name: str, n: int, **options) -> list[str]:
        env = scenarios.make(name, n_agents=n, **options)
        texts = []
        for seed in range(20):
            env.reset(seed=seed)
            obs, *_ = env.step({a: env.expert_action(a) for a in env.agents})
            texts += [o["text"] for o in obs.values()]
        return texts

    for name in ("navigation", "predator_prey"):
        seen = later_turns(name, 16, view=1)
        # A 3x3 square holds 8 cells besides the agent's: at most 8 agents and 9 landmarks to list.
        assert max(len(re.findall(r"agent_\d+", t)) for t in seen) <= 8
        assert max(len(re.findall(r"c\d\d", t)) for t in seen) <= 1 + 8 + 9
        whole = later_turns(name, 16)
        assert np.mean([len(t) for t in seen]) < 0.4 * np.mean([len(t) for t in whole]), name


def test_sixteen_agents_with_view_never_raise():
    for name in ("navigation", "predator_prey"):
        reasons = random_episodes(lambda n, name=name: scenarios.make(name, n_agents=n, max_turns=6, view=2),
                                  [2, 16], 100)
        assert reasons
