"""Text scenarios for LLM agents: PettingZoo parallel environments, their registry and shared types.

``scenarios.make("tool_use", n_agents=..., seed=..., **options)`` builds one; ``names()`` lists them.
This package imports only pettingzoo, gymnasium, numpy and the standard library.
"""

from scenarios.base import TRAIN_SEED_LIMIT, ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar, Slot
from scenarios.registry import ScenarioInfo, info, make, names, register
from scenarios.tool_use import ToolUseEnv

register("tool_use", ToolUseEnv)

__all__ = [
    "TRAIN_SEED_LIMIT",
    "ActionGrammar",
    "ScenarioInfo",
    "ScenarioOptions",
    "Slot",
    "StepOutcome",
    "TextScenario",
    "ToolUseEnv",
    "info",
    "make",
    "names",
    "register",
]
