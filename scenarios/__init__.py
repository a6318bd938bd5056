"""Text scenarios for LLM agents: PettingZoo parallel environments, their registry and shared types.

``scenarios.make("tool_use", n_agents=..., seed=..., **options)`` builds one; ``names()`` lists them.
This package imports only pettingzoo, gymnasium, numpy and the standard library.
"""

from scenarios.bargaining import BargainingEnv
from scenarios.base import TRAIN_SEED_LIMIT, OpponentStyles, ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar, Slot
from scenarios.grid import NavigationEnv, PredatorPreyEnv
from scenarios.info_split import InfoSplitEnv
from scenarios.registry import ScenarioInfo, info, make, names, register
from scenarios.repeated_game import RepeatedGameEnv
from scenarios.tool_use import ToolUseEnv

register("tool_use", ToolUseEnv)
register("navigation", NavigationEnv)
register("predator_prey", PredatorPreyEnv)
register("repeated_game", RepeatedGameEnv)
register("bargaining", BargainingEnv)
register("info_split", InfoSplitEnv)

__all__ = [
    "TRAIN_SEED_LIMIT",
    "ActionGrammar",
    "InfoSplitEnv",
    "BargainingEnv",
    "RepeatedGameEnv",
    "NavigationEnv",
    "OpponentStyles",
    "PredatorPreyEnv",
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
