"""Agent-written messages: a `"say"` field on a JSON action, its grammar, and what an agent may say.

With channel mode ``"message"`` (or ``"both"``) an action may carry a message::

    {"tool": "read_board", "args": {}, "say": "Sydney"}

The wrapper strips the field before the scenario sees the action (the scenario's rules, rewards
and validity checks never change) and sends the message to the agent's out-neighbours through the
channel; it shows up in their next observation. What an agent may say is what it can know: the
scenario's entities (whole tokens of its vocabulary) that appeared in the agent's own observations,
the most recent ``limit`` of them. Under constrained decoding the grammar offers each action with
and without a message, so saying nothing is always allowed and a message never costs a turn.

Free decoding may produce a malformed ``say`` (not a string, or text that is not JSON): the message
is dropped and counted, and the action goes to the scenario as written (the scenario turns
malformed text into an error observation, as always). Left out: free-text messages (a tiny model
cannot spell them, and no grammar could bound them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from scenarios.grammar import ActionGrammar, Slot

SAY_KEY = "say"
_TAIL = re.compile(r', "say": "([^"\\]*)"\}\s*$')
_WORD = re.compile(r"[A-Za-z0-9_]+")
_SAY_OPEN = f', "{SAY_KEY}": "'  # how a message field starts, after an action's own fields


def split_message(action: str) -> tuple[str, str | None, bool]:
    """(action for the scenario, message or None, whether a message field was malformed).

    Only a top-level ``say`` key is a message (a tool argument may be called ``say``). When the
    action is in the grammar's own form, the field is cut out textually, so the scenario gets the
    action byte for byte as it would have been without a message.
    """
    if f'"{SAY_KEY}"' not in action:
        return action, None, False
    try:
        data = json.loads(action)
    except (json.JSONDecodeError, RecursionError):
        return action, None, True
    if not isinstance(data, dict):
        return action, None, True
    if SAY_KEY not in data:
        return action, None, False
    message = data.pop(SAY_KEY)
    rest = json.dumps(data)
    match = _TAIL.search(action)
    if match:
        try:
            if json.loads(action[: match.start()] + "}") == data:
                rest = action[: match.start()] + "}"
        except (json.JSONDecodeError, RecursionError):
            pass
    if not isinstance(message, str) or not message.strip():
        return rest, None, True
    return rest, message, False


def with_message(action: str, message: str) -> str:
    """A JSON-object action carrying ``message``, written exactly as the ``with_messages`` grammar writes it."""
    return f'{action[:-1]}{_SAY_OPEN}{message}"}}'


def with_messages(grammar: ActionGrammar, values: Iterable[str]) -> ActionGrammar:
    """`grammar` plus, for each JSON-object template, the same action carrying a message from `values`."""
    values = tuple(dict.fromkeys(v for v in values if '"' not in v and "\\" not in v))
    if not values:
        return grammar
    say = Slot(SAY_KEY, values)
    extra = []
    for template in grammar.templates:
        last = template[-1] if template else None
        if isinstance(last, str) and last.endswith("}"):
            extra.append((*template[:-1], last[:-1] + _SAY_OPEN, say, '"}'))
    return ActionGrammar(templates=(*grammar.templates, *extra))


class SeenEntities:
    """The scenario entities each agent has seen, most recent last, at most `limit` per agent."""

    def __init__(self, entities: Iterable[str], limit: int) -> None:
        self.entities = frozenset(entities)
        self.limit = limit
        self.seen: dict[str, dict[str, None]] = {}

    def reset(self) -> None:
        self.seen = {}

    def note(self, agent: str, text: str) -> None:
        known = self.seen.setdefault(agent, {})
        for word in _WORD.findall(text):
            if word in self.entities:
                known.pop(word, None)
                known[word] = None  # move to the end: most recent
        while len(known) > self.limit:
            known.pop(next(iter(known)))

    def of(self, agent: str) -> list[str]:
        return list(self.seen.get(agent, {}))
