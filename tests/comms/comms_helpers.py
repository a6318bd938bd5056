"""A tiny text scenario for the comms tests: every observation carries its agent's unique marker."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from scenarios.base import ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar

MARK = re.compile(r"<<(agent_\d+):(\d+)>>|act-(agent_\d+)")


@dataclass(frozen=True)
class EchoOptions(ScenarioOptions):
    """Echo options."""

    max_turns: int = 64
    """Turn cap."""
    pad: int = 0
    """Characters of filler after each marker."""
    leave: bool = False
    """agent_i ends its episode at turn i + 1."""


class Echo(TextScenario):
    """Observations are ``<<agent_i:turn>>`` plus filler; the expert action is ``act-agent_i``."""

    metadata = {"render_modes": ["ansi"], "name": "echo", "is_parallelizable": True}
    agent_range = (1, 8)
    options_cls = EchoOptions
    max_obs_length = 300

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.noted: dict[str, list[str]] = {}

    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        self.noted = {a: [] for a in self.possible_agents}
        return {a: self._text(a, 0) for a in self.possible_agents}

    def _text(self, agent: str, turn: int) -> str:
        return f"<<{agent}:{turn}>>" + "x" * self.opts.pad

    def _step_agent(self, agent: str, action: Any) -> StepOutcome:
        turn = self._turns[agent]
        end = "success" if self.opts.leave and turn == int(agent.split("_")[1]) + 1 else None
        return StepOutcome(self._text(agent, turn), {"task": 1.0 if end else 0.0}, end=end)

    def note_seen(self, agent: str, text: str) -> None:
        self.noted[agent].append(text)

    def action_grammar(self, agent: str) -> ActionGrammar:
        return ActionGrammar(())

    def entity_vocabulary(self) -> list[str]:
        return []

    def expert_action(self, agent: str) -> str:
        return f"act-{agent}"


def senders_in(text: str) -> set[str]:
    """Agents whose marker or action appears in ``text``."""
    return {m.group(1) or m.group(3) for m in MARK.finditer(text)}


def run(env, seed: int, steps: int) -> list[dict[str, str]]:
    """Observation texts of reset and up to ``steps`` expert steps."""
    obs, _ = env.reset(seed=seed)
    out = [{a: o["text"] for a, o in obs.items()}]
    for _ in range(steps):
        if not env.agents:
            break
        obs, *_ = env.step({a: env.expert_action(a) for a in env.agents})
        out.append({a: o["text"] for a, o in obs.items()})
    return out
