"""The tool-use scenario: mock tools over a seeded world; see ``env.py`` for its documentation page."""

from scenarios.tool_use.env import ToolUseEnv, ToolUseOptions

__all__ = ["ToolUseEnv", "ToolUseOptions"]
