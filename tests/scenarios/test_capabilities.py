"""The optional capabilities TextScenario declares: their defaults, and what each scenario answers."""

from __future__ import annotations

import json
import re
from typing import Any

import numpy as np
import pytest
from contract_kit import sample_grammar
from scenario_helpers import play_expert

import scenarios
from scenarios import OpponentStyles
from scenarios.bargaining.deals import ACTS
from scenarios.base import CAPABILITIES, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar
from scenarios.grid.board import MOVES
from scenarios.info_split.actions import READ_BOARD, post_action
from scenarios.repeated_game import HELDOUT_STYLES, TRAIN_STYLES
from scenarios.repeated_game.styles import MOVES5
from scenarios.tool_use.tools import TOOLS


class Minimal(TextScenario):
    """Declares nothing beyond the required hooks."""

    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        return dict.fromkeys(self.possible_agents, "go")

    def _step_agent(self, agent: str, action: Any) -> StepOutcome:
        return StepOutcome("done", {"task": 1.0}, end="success")

    def action_grammar(self, agent: str) -> ActionGrammar:
        return ActionGrammar((("go",),))

    def entity_vocabulary(self) -> list[str]:
        return []

    def expert_action(self, agent: str) -> str:
        return "go"


def test_defaults_of_a_minimal_scenario():
    env = Minimal()
    env.reset(seed=0)
    assert all(callable(getattr(TextScenario, name)) or name == "turn_budget_visible" for name in CAPABILITIES)
    assert env.team_of("agent_0") == ""
    assert env.opponent_styles() == OpponentStyles() == OpponentStyles((), ())
    assert env.episode_stats("agent_0") == {}
    assert env.action_classes() == () and env.action_class("agent_0", "go") is None
    assert env.note_seen("agent_0", "anything") is None
    assert env.turn_budget_visible is False
    assert env.expert_turn("agent_0", ["agent_1"]) == ("go", None)
    assert env.action_summary("agent_0", "go") == "go" and env.action_summary("agent_0", 3) == "3"
    assert env.shared_view("agent_0", "a\nb") == "a\nb"
    with pytest.raises(AttributeError):
        OpponentStyles().train = ("x",)  # frozen: plain data
    assert "OpponentStyles" in scenarios.__all__ and scenarios.OpponentStyles is OpponentStyles


def _budget_line(text: str) -> tuple[int, int] | None:
    last = text.rpartition("\n")[2]
    match = re.fullmatch(r"turn (\d+) of (\d+)", last)
    return (int(match[1]), int(match[2])) if match else None


@pytest.mark.parametrize("name", scenarios.names())
def test_a_scenario_shows_its_turn_budget_exactly_when_it_declares_it(name):
    # Junk actions never end an episode (a format penalty), so every agent plays until the budget runs out.
    env = scenarios.make(name, n_agents=2 if name != "tool_use" else 1, max_turns=3)
    obs, _ = env.reset(seed=5)
    seen = {a: [_budget_line(o["text"])] for a, o in obs.items()}
    taken = dict.fromkeys(env.agents, 0)
    ends = {}
    while env.agents:
        live = list(env.agents)
        obs, _, _, _, infos = env.step(dict.fromkeys(live, "junk"))
        for a in live:
            taken[a] += 1
            if "termination_reason" in infos[a]:
                ends[a] = infos[a]["termination_reason"]
                assert _budget_line(obs[a]["text"]) is None  # an ended episode has no next turn to count
            else:
                seen[a].append(_budget_line(obs[a]["text"]))
    # every task but the repeated game's has a deadline (its match length is shown, max_turns is an outside cap)
    assert env.turn_budget_visible is (name != "repeated_game")
    if not env.turn_budget_visible:
        assert all(line is None for lines in seen.values() for line in lines)
        return
    for a, lines in seen.items():
        budget = lines[0][1]
        assert lines == [(k, budget) for k in range(1, len(lines) + 1)]  # turn 1, 2, ... of one budget
        assert ends[a] == "max_turns" and taken[a] == budget <= 3  # out of turns exactly when it said so


def test_info_split_shows_its_own_budget_not_the_outside_cap():
    env = scenarios.make("info_split", n_agents=3)  # default max_turns: the episode's budget is tighter
    budgets = set()
    for seed in range(6):
        obs, _ = env.reset(seed=seed)
        assert env._budget < env.opts.max_turns
        budgets |= {_budget_line(o["text"]) for o in obs.values()}
        assert {_budget_line(o["text"]) for o in obs.values()} == {(1, env._budget)}
    assert len(budgets) > 1  # the budget varies with the plan


def test_a_cut_observation_keeps_its_budget_line():
    env = scenarios.make("tool_use", max_turns=4)
    env.reset(seed=1)
    long_text = "x" * (3 * env.max_obs_length)
    text = env._observe("agent_0", long_text)["text"]
    assert len(text) <= env.max_obs_length and _budget_line(text) == (1, 4)


@pytest.mark.parametrize("name", scenarios.names())
def test_every_grammar_action_has_a_declared_class(name):
    env = scenarios.make(name, n_agents=scenarios.info(name).agent_range[0])
    classes = set(env.action_classes())
    rng = np.random.default_rng(0)
    assert classes
    seen = set()
    for split in env.splits:
        env.reset(seed=1, options={"split": split})
        while env.agents:
            for a in env.agents:
                grammar = env.action_grammar(a)
                try:
                    actions = grammar.expand(limit=600)
                except ValueError:  # a bargaining offer grammar is a huge product: sample it
                    actions = [sample_grammar(grammar, rng) for _ in range(100)]
                kinds = {env.action_class(a, x) for x in actions}
                assert kinds <= classes, kinds - classes
                seen |= kinds
            env.step({a: env.expert_action(a) for a in env.agents})
    assert len(seen) > 1


def test_repeated_game_styles_moves_and_rounds():
    env = scenarios.make("repeated_game", n_agents=2, seed=4, rounds=7)
    assert env.opponent_styles() == OpponentStyles(train=TRAIN_STYLES, held_out=HELDOUT_STYLES)
    assert env.action_classes() == MOVES5 == ("rock", "paper", "scissors", "spock", "lizard")
    obs, _ = env.reset()
    assert env.episode_stats("agent_0") == {"rounds_won": 0.0, "rounds_lost": 0.0, "rounds_drawn": 0.0}
    while env.agents:
        actions = {a: env.expert_action(a) for a in env.agents}
        for a, act in actions.items():
            assert env.action_class(a, act) == json.loads(act)["move"]
        obs, *_ = env.step(actions)
    for a in env.possible_agents:
        stats = env.episode_stats(a)
        assert stats["rounds_won"] + stats["rounds_lost"] + stats["rounds_drawn"] == 7.0
        style = env.opponent_style(a).name  # the match is over: whether it was won, under the opponent's style
        assert stats[f"match_won/{style}"] == float(stats["rounds_won"] > stats["rounds_lost"]) and len(stats) == 4
        assert f"{stats['rounds_won']:.0f}-{stats['rounds_lost']:.0f}" in obs[a]["text"]
    assert env.action_class("agent_0", '{"move": "spock"}') == "spock"  # a class, even in a three-move match
    assert env.action_class("agent_0", '{"move": "fire"}') is None and env.action_class("agent_0", None) is None


def test_bargaining_verbs_values_and_offers():
    env = scenarios.make("bargaining", n_agents=3, split="basic", seed=2)
    assert env.action_classes() == ACTS == ("offer", "accept", "reject", "wait", "leave")
    env.reset()
    assert env.episode_stats("agent_1") == {"value": 0.0, "offers": 0.0}
    final = {}
    while env.agents:
        actions = {a: env.expert_action(a) for a in env.agents}
        for a, act in actions.items():
            assert env.action_class(a, act) == next(iter(json.loads(act)))
        _, _, _, _, infos = env.step(actions)
        final.update({a: i for a, i in infos.items() if "termination_reason" in i})
    for a, info in final.items():
        assert info["termination_reason"] == "success"
        assert env.episode_stats(a)["value"] == pytest.approx(info["reward_components"]["value"])
    assert sum(env.episode_stats(a)["offers"] for a in env.possible_agents) >= 1
    assert env.action_class("agent_0", '{"offer": "9"}') == "offer"  # the verb, even of an offer that is not valid
    assert env.action_class("agent_0", '{"accept": "yes"}') is None


def test_grid_moves_coverage_teams_and_catches():
    nav = scenarios.make("navigation", n_agents=3, split="basic", seed=11)
    assert nav.action_classes() == MOVES
    nav.reset()
    assert nav.episode_stats("agent_0")["coverage"] < 1.0
    assert set(play_expert(nav, 11).values()) == {"success"}
    assert [nav.episode_stats(a) for a in nav.possible_agents] == [{"coverage": 1.0}] * 3
    assert nav.team_of("agent_0") == "" and nav.opponent_styles() == OpponentStyles()
    pp = scenarios.make("predator_prey", n_agents=4, split="basic")
    assert [pp.team_of(a) for a in pp.possible_agents] == ["predator", "predator", "prey", "prey"]
    reasons = play_expert(pp, 3)
    assert reasons["agent_0"] == "success"
    assert sum(pp.episode_stats(a)["catches"] for a in pp.predators) == pytest.approx(2.0)  # both prey
    assert [pp.episode_stats(q) for q in pp.prey] == [{"caught": 1.0}] * 2
    assert pp.action_class("agent_0", '{"move": "left"}') == "left" and pp.action_class("agent_0", "left") is None


def test_tool_names_answers_calls_and_contributions():
    env = scenarios.make("tool_use", split="hard", seed=5)
    assert env.action_classes() == (*TOOLS, "answer")
    env.reset()
    solution, family = env._tasks["agent_0"].task.solution, env._tasks["agent_0"].task.family
    assert env.action_class("agent_0", env.expert_action("agent_0")) == solution[0].tool
    assert env.episode_stats("agent_0") == {"calls": 0.0, "progress": 0.0, f"success/{family}": 0.0}
    play_expert(env, 5)
    assert env.episode_stats("agent_0") == {"calls": float(len(solution)), "progress": 1.0, f"success/{family}": 1.0}
    assert env.action_class("agent_0", '{"answer": "Paris"}') == "answer"
    assert env.action_class("agent_0", '{"tool": "get_stock", "args": {}}') is None
    team = scenarios.make("info_split", n_agents=4, split="hard")
    assert set(team.action_classes()) == {*TOOLS, "post", "read_board", "answer"}
    assert team.action_class("agent_0", READ_BOARD) == "read_board"
    assert team.action_class("agent_0", post_action("Paris")) == "post"
    assert set(play_expert(team, 7).values()) == {"success"}
    stats = [team.episode_stats(a) for a in team.possible_agents]
    assert sum(s["contribution"] for s in stats) == pytest.approx(1.0) and sum(s["calls"] for s in stats) >= 1
