"""Parse and validate one action text of the tool-use scenario.

An action is one JSON object: ``{"tool": NAME, "args": {...}}`` or ``{"answer": VALUE}``. Any
JSON with that content is accepted (whitespace and key order are free). Anything else yields
an error reason that tells the agent what is valid; this module never raises on agent text
and never evaluates it.

It also builds the grammar templates of a tool call (``call_templates``), shared with ``info_split``.
It leaves out running the call (``tools.call_tool``) and rewards (``env.py``).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Collection
from dataclasses import dataclass

from scenarios.grammar import Part, Slot
from scenarios.json_action import read_json_object
from scenarios.tool_use.tasks import Call
from scenarios.tool_use.tools import TOOLS, Param
from scenarios.tool_use.world import ENTITY_KINDS

FORMATS = '{"tool": "<name>", "args": {"<param>": "<value>"}} or {"answer": "<value>"}'


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
    obj, reason = read_json_object(action, max_chars, FORMATS)
    if obj is None:
        return None, reason
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


def call_templates(name: str, params: tuple[Param, ...], by_kind: dict[str, list[str]],
                   done: Collection[Call]) -> list[tuple[Part, ...]]:
    """Templates for one tool and argument set, in canonical ``json.dumps`` form, minus repeats."""
    if any(p.kind not in by_kind for p in params):
        return []  # some argument has no seen value yet
    head = json.dumps({"tool": name, "args": {}})[:-2]  # '{"tool": NAME, "args": {'
    repeats = {c for c in done if c.tool == name and [k for k, _ in c.args] == [p.name for p in params]}
    if not repeats:
        parts: list[Part] = [head]
        for i, p in enumerate(params):
            parts += [("" if i == 0 else ", ") + json.dumps(p.name) + ': "', Slot(p.name, tuple(by_kind[p.kind])), '"']
        parts.append("}}")
        return [tuple(parts)]
    # A repeat of a successful call is invalid, so list the remaining combinations literally.
    out = []
    for combo in itertools.product(*(by_kind[p.kind] for p in params)):
        call = Call.make(name, dict(zip((p.name for p in params), combo, strict=True)))
        if call not in repeats:
            out.append((call.json(),))
    return out
