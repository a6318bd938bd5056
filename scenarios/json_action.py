"""Reading an action text as one JSON object: the checks every JSON-action scenario shares.

Text, length, printable ASCII, non-empty, valid JSON, an object; each failure becomes a reason
that names the valid shapes, so the agent can fix its next action. It never raises on agent text
and never evaluates it. What the object must hold is each scenario's own business; the tool-call
scenarios share how a call reads to teammates (``tool_action_summary``) and its class
(``tool_action_class``).
"""

from __future__ import annotations

import json
import string
from collections.abc import Collection

_PRINTABLE = frozenset(string.printable)


def json_type(value: object) -> str:
    """JSON's name for a decoded value's type (what an agent wrote, in its own terms)."""
    names = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}
    return names.get(type(value), "null")


def read_json_object(action: object, max_chars: int, formats: str) -> tuple[dict | None, str | None]:
    """``(object, None)`` when ``action`` is text holding one JSON object, else ``(None, reason)``.

    The checks every JSON-action scenario shares: text, length, printable ASCII, non-empty, valid
    JSON, an object. ``formats`` (the valid shapes) goes into each reason so the agent can fix it.
    """
    if not isinstance(action, str):
        return None, f"the action must be text: one JSON object, {formats}"
    if len(action) > max_chars:
        return None, f"the action has {len(action)} characters; the limit is {max_chars}"
    if not set(action) <= _PRINTABLE:
        return None, "the action must be printable ASCII"
    if not action.strip():
        return None, f"empty action; write one JSON object: {formats}"
    try:
        obj = json.loads(action)
    except (ValueError, RecursionError):
        return None, f"not valid JSON; write one JSON object: {formats}"
    if not isinstance(obj, dict):
        return None, f"the action must be a JSON object, not a JSON {json_type(obj)}: {formats}"
    return obj, None


def tool_action_summary(action: object) -> str:
    """A tool call or answer in a few tokens (``post(Sun)``, ``read_board()``, ``answer(BK23)``) for teammates' views.

    Anything that is not a well-formed call or answer comes back as ``invalid action``: a teammate
    learns that the turn was wasted, not the malformed text itself.
    """
    if not isinstance(action, str):
        return "invalid action"
    try:
        obj = json.loads(action)
    except (ValueError, RecursionError):
        return "invalid action"
    if isinstance(obj, dict) and set(obj) == {"answer"} and isinstance(obj["answer"], str):
        return f"answer({obj['answer']})"
    if isinstance(obj, dict) and set(obj) == {"tool", "args"} and isinstance(obj["tool"], str) \
            and isinstance(obj["args"], dict) and all(isinstance(v, str) for v in obj["args"].values()):
        return f"{obj['tool']}({', '.join(obj['args'].values())})"
    return "invalid action"


def tool_action_class(action: object, tools: Collection[str], max_chars: int) -> str | None:
    """The tool a tool-call action text calls (one of ``tools``), ``"answer"`` for an answer, else ``None``.

    Read from the text alone: a call of one of ``tools`` with an ``args`` object has that tool's
    class whether or not its arguments (or the tool itself, for this agent) are valid now.
    """
    obj, _ = read_json_object(action, max_chars, "")
    if obj is None:
        return None
    if set(obj) == {"answer"}:
        answer = obj["answer"]
        return "answer" if isinstance(answer, str) and answer.strip() else None
    tool = obj.get("tool")
    if set(obj) == {"tool", "args"} and isinstance(tool, str) and tool in tools and isinstance(obj["args"], dict):
        return tool
    return None
