"""The action language of ``info_split``: parse one action text, and list the valid ones (grammar).

An action is one JSON object: ``{"tool": NAME, "args": {...}}`` (a world tool the agent holds,
or a board tool: ``post`` with ``{"value": ENTITY}``, ``read_board`` with ``{}``) or
``{"answer": VALUE}``. Any JSON with that content is accepted (whitespace and key order are
free). Anything else yields an error reason that says what is valid; nothing here raises on
agent text or evaluates it. ``EXTRA_KEYS`` is empty: the comms layer will admit its ``"msg"``
field there, so that parsing the action itself stays unchanged.

It leaves out running calls and rewards (``env.py``).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass

from scenarios.grammar import ActionGrammar, Part, Slot
from scenarios.json_action import json_type, read_json_object
from scenarios.tool_use.actions import call_templates
from scenarios.tool_use.tasks import Call
from scenarios.tool_use.tools import TOOLS
from scenarios.tool_use.world import ENTITY_KINDS, KIND_OF, entity_vocabulary

BOARD_TOOLS = ("post", "read_board")
EXTRA_KEYS: frozenset[str] = frozenset()
FORMATS = '{"tool": "<name>", "args": {"<param>": "<value>"}} or {"answer": "<value>"}'
READ_BOARD = json.dumps({"tool": "read_board", "args": {}})
_POST_HEAD = json.dumps({"tool": "post", "args": {"value": ""}})[:-3]  # up to the value's opening quote
_ORDER = {e: i for i, e in enumerate(entity_vocabulary())}


def post_action(value: str) -> str:
    return json.dumps({"tool": "post", "args": {"value": value}})


def signature(name: str) -> str:
    """Compact form for observations: ``find_flights(origin, destination, day, slot?)``, ``post(value)``."""
    if name == "post":
        return "post(value)"
    if name == "read_board":
        return "read_board()"
    return TOOLS[name].signature()


def tool_schema(name: str) -> dict:
    """The OpenAI-style function declaration of a world or board tool."""
    if name in TOOLS:
        return TOOLS[name].schema()
    props = {} if name == "read_board" else {"value": {
        "type": "string", "enum": entity_vocabulary(), "description": "One entity to write on the team board."}}
    desc = ("Show the entities teammates posted on the team board." if name == "read_board"
            else "Write one entity on the team board (readable by teammates from the next turn).")
    return {"type": "function", "function": {"name": name, "description": desc, "parameters": {
        "type": "object", "properties": props, "required": list(props), "additionalProperties": False}}}


@dataclass(frozen=True)
class Parsed:
    """A well-formed action: exactly one of a world-tool call, a post, a board read or an answer."""

    call: Call | None = None
    post: str | None = None
    read: bool = False
    answer: str | None = None


def parse_action(action: object, tools: tuple[str, ...], done: Collection[Call],
                 max_chars: int) -> tuple[Parsed | None, str | None]:
    """Return ``(parsed, None)`` for a well-formed action, else ``(None, reason)``."""
    obj, reason = read_json_object(action, max_chars, FORMATS)
    if obj is None:
        return None, reason
    keys = set(obj) - EXTRA_KEYS
    if keys == {"answer"}:
        answer = obj["answer"]
        if not isinstance(answer, str) or not answer.strip():
            return None, 'the answer must be a non-empty string, e.g. {"answer": "<value>"}'
        return Parsed(answer=answer), None
    if keys != {"tool", "args"}:
        return None, f"wrong keys {sorted(keys)[:4]}; use exactly {FORMATS}"
    name, args = obj["tool"], obj["args"]
    listed = (*tools, *BOARD_TOOLS)
    if not isinstance(name, str) or name not in listed:
        return None, f"unknown tool {str(name)[:40]!r}; your tools: {', '.join(listed)}"
    if not isinstance(args, dict):
        return None, f"args must be a JSON object for {signature(name)}"
    if name == "read_board":
        if args:
            return None, f"read_board takes no arguments: {READ_BOARD}"
        return Parsed(read=True), None
    if name == "post":
        value = args.get("value") if set(args) == {"value"} else None
        if not isinstance(value, str) or value not in KIND_OF:
            return None, 'post takes one entity as written in the text: {"tool": "post", "args": {"value": "<entity>"}}'
        return Parsed(post=value), None
    return _parse_call(name, args, done)


def _parse_call(name: str, args: dict, done: Collection[Call]) -> tuple[Parsed | None, str | None]:
    spec = TOOLS[name]
    extra = sorted(set(args) - {p.name for p in spec.params})
    if extra:
        return None, f"unexpected argument(s) {[e[:40] for e in extra[:4]]} for {spec.signature()}"
    missing = [p.name for p in spec.params if p.required and p.name not in args]
    if missing:
        return None, f"missing argument(s) {missing} for {spec.signature()}"
    for key, value in args.items():
        kind = spec.param(key).kind
        if not isinstance(value, str):
            return None, f"argument {key} of {name} must be a string, not a JSON {json_type(value)}"
        if value not in ENTITY_KINDS[kind]:
            return None, f"unknown {kind} {value[:40]!r} for {key}; use a {kind} from the text or a result"
    call = Call.make(name, args)
    if call in done:
        return None, f"repeated call: you already called {name} with these arguments; use its result above"
    return Parsed(call=call), None


def build_grammar(tools: tuple[str, ...], seen: Iterable[str], done: Collection[Call],
                  answer_kind: str) -> ActionGrammar:
    """Every valid action: calls of the agent's tools with seen entities (minus its own repeats),
    posts of seen entities, the board read, and answers among seen entities of the answer kind."""
    ordered = sorted(seen, key=_ORDER.__getitem__)
    by_kind: dict[str, list[str]] = {}
    for e in ordered:
        by_kind.setdefault(KIND_OF[e], []).append(e)
    templates: list[tuple[Part, ...]] = []
    for name in tools:
        params = TOOLS[name].params
        variants = [params]
        if any(not p.required for p in params):
            variants.insert(0, tuple(p for p in params if p.required))
        for variant in variants:
            templates.extend(call_templates(name, variant, by_kind, done))
    if ordered:
        templates.append((_POST_HEAD, Slot("value", tuple(ordered)), '"}}'))
    templates.append((READ_BOARD,))
    if by_kind.get(answer_kind):
        templates.append(('{"answer": "', Slot("answer", tuple(by_kind[answer_kind])), '"}'))
    return ActionGrammar(tuple(templates))


