"""Parse and validate one action text of the tool-use scenario.

An action is one JSON object: ``{"tool": NAME, "args": {...}}`` or ``{"answer": VALUE}``. Any
JSON with that content is accepted (whitespace and key order are free). Anything else yields
an error reason that tells the agent what is valid; this module never raises on agent text
and never evaluates it.

It leaves out running the call (``tools.call_tool``) and rewards (``env.py``).
"""

from __future__ import annotations

import json
import string
from collections.abc import Collection
from dataclasses import dataclass

from scenarios.tool_use.tasks import Call
from scenarios.tool_use.tools import TOOLS
from scenarios.tool_use.world import ENTITY_KINDS

FORMATS = '{"tool": "<name>", "args": {"<param>": "<value>"}} or {"answer": "<value>"}'
_PRINTABLE = frozenset(string.printable)


@dataclass(frozen=True)
class Parsed:
    call: Call | None = None
    answer: str | None = None


def _valid_values(kind: str) -> str:
    values = ENTITY_KINDS[kind]
    if len(values) <= 16:
        return ", ".join(values)
    return f"a {kind} entity like {values[0]} (from the task text or a tool result)"


def parse_action(action: object, tools: tuple[str, ...], done: Collection[Call],
                 max_chars: int) -> tuple[Parsed | None, str | None]:
    """Return ``(parsed, None)`` for a well-formed action, else ``(None, reason)``."""
    if not isinstance(action, str):
        return None, f"the action must be text: one JSON object, {FORMATS}"
    if len(action) > max_chars:
        return None, f"the action has {len(action)} characters; the limit is {max_chars}"
    if not set(action) <= _PRINTABLE:
        return None, "the action must be printable ASCII"
    if not action.strip():
        return None, f"empty action; write one JSON object: {FORMATS}"
    try:
        obj = json.loads(action)
    except (ValueError, RecursionError):
        return None, f"not valid JSON; write one JSON object: {FORMATS}"
    if not isinstance(obj, dict):
        return None, f"the action must be a JSON object, not a JSON {type(obj).__name__}: {FORMATS}"
    keys = set(obj)
    if keys == {"answer"}:
        answer = obj["answer"]
        if not isinstance(answer, str) or not answer.strip():
            return None, 'the answer must be a non-empty string, e.g. {"answer": "<value>"}'
        return Parsed(answer=answer), None
    if keys != {"tool", "args"}:
        return None, f"wrong keys {sorted(keys)}; use exactly {FORMATS}"
    name, args = obj["tool"], obj["args"]
    if not isinstance(name, str) or name not in tools:
        return None, f"unknown tool {str(name)[:40]!r}; listed tools: {', '.join(tools)}"
    spec = TOOLS[name]
    if not isinstance(args, dict):
        return None, f"args must be a JSON object for {spec.signature()}"
    extra = sorted(set(args) - {p.name for p in spec.params})
    if extra:
        return None, f"unexpected argument(s) {[e[:40] for e in extra]} for {spec.signature()}"
    missing = [p.name for p in spec.params if p.required and p.name not in args]
    if missing:
        return None, f"missing argument(s) {missing} for {spec.signature()}"
    for key, value in args.items():
        param = spec.param(key)
        if not isinstance(value, str):
            return None, f"argument {key} of {name} must be a string, not a JSON {type(value).__name__}"
        if value not in ENTITY_KINDS[param.kind]:
            return None, f"unknown {param.kind} {value[:40]!r} for {key}; valid: {_valid_values(param.kind)}"
    call = Call.make(name, args)
    if call in done:
        return None, f"repeated call: {name} was already called with these arguments; use its result above"
    return Parsed(call=call), None
