"""Reading an action text as one JSON object: the checks every JSON-action scenario shares.

Text, length, printable ASCII, non-empty, valid JSON, an object; each failure becomes a reason
that names the valid shapes, so the agent can fix its next action. It never raises on agent text
and never evaluates it. What the object must hold is each scenario's own business.
"""

from __future__ import annotations

import json
import string

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
