"""Agent-written messages on any action text: their two forms, their grammar, and what an agent may say.

With channel mode ``"message"`` (or ``"both"``) an action may carry a message. A JSON-object
action carries it as a last ``"say"`` field::

    {"tool": "read_board", "args": {}, "say": "Sydney"}

Any other action text carries it as a trailing ``SAY_MARK`` (`` say: ``) and the value::

    rock say: Sydney

The wrapper strips the message before the scenario sees the action (the scenario's rules, rewards
and validity checks never change) and sends it to the agent's out-neighbours through the channel;
it shows up in their next observation. What an agent may say is what it can know: the scenario's
entities (whole tokens of its vocabulary) that appeared in the agent's own observations, the most
recent ``limit`` of them. Under constrained decoding the grammar (``with_messages``) offers each
action with and without a message, so saying nothing is always allowed and a message never costs a
turn; ``with_message`` writes one action in the same form, and ``split_message`` reads both forms
back.

Which form: a text that opens a JSON object (its first non-blank character is ``{``) uses the
field, and only when it closes with ``}``; every other text uses the mark. ``split_message`` reads
a text holding ``"say"`` as JSON (as it always has), any other text opening with ``{`` as carrying
no message, and everything else by its last `` say:``. A plain action that itself contains
`` say:`` cannot be told apart from one carrying a message: scenarios with message-carrying comms
should not have such actions.

Free decoding may produce a malformed message (a ``say`` field that is not a non-empty string,
text holding ``"say"`` that is not JSON, an empty value after the mark): the message is dropped
and counted, and the action goes to the scenario as written without it (the scenario turns
malformed text into an error observation, as always). Left out: free-text messages (a tiny model
cannot spell them, and no grammar could bound them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from scenarios.grammar import ActionGrammar, Part, Slot

SAY_KEY = "say"
SAY_MARK = " say: "  # how a message follows a plain (non-JSON) action
_TAIL = re.compile(r', "say": "([^"\\]*)"\}\s*$')
_WORD = re.compile(r"[A-Za-z0-9_]+")
_SAY_OPEN = f', "{SAY_KEY}": "'  # how a message field starts, after an action's own fields
_PLAIN_CUT = SAY_MARK.rstrip()  # " say:": free decoding may leave out the space after it


def _opens_object(text: str) -> bool:
    return text.lstrip().startswith("{")


def split_message(action: str) -> tuple[str, str | None, bool]:
    """(action for the scenario, message or None, whether a message was malformed).

    JSON form: only a top-level ``say`` key is a message (a tool argument may be called ``say``);
    when the action is in the grammar's own form, the field is cut out textually, so the scenario
    gets the action byte for byte as it would have been without a message. Plain form: the text
    before the last `` say:`` goes to the scenario, the stripped text after it is the message.
    """
    if f'"{SAY_KEY}"' in action:
        return _split_json(action)
    if _opens_object(action):
        return action, None, False
    cut = action.rfind(_PLAIN_CUT)
    if cut < 0:
        return action, None, False
    rest, message = action[:cut], action[cut + len(_PLAIN_CUT):].strip()
    if not message:
        return rest, None, True
    return rest, message, False


def _split_json(action: str) -> tuple[str, str | None, bool]:
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


def can_carry(action: str) -> bool:
    """Whether ``action`` has a message form: a JSON-object text closing with ``}``, or any other text."""
    return action.endswith("}") if _opens_object(action) else True


def with_message(action: str, message: str) -> str:
    """``action`` carrying ``message``, written exactly as the ``with_messages`` grammar writes it.

    The caller checks ``can_carry(action)`` first (a JSON object that does not close with ``}`` has no form).
    """
    if _opens_object(action):
        return f'{action[:-1]}{_SAY_OPEN}{message}"}}'
    return f"{action}{SAY_MARK}{message}"


def _template_opens_object(template: tuple[Part, ...]) -> bool:
    """Whether some expansion of ``template`` opens a JSON object (first non-blank character ``{``)."""
    for part in template:
        heads = {text.lstrip()[:1] for text in ((part,) if isinstance(part, str) else part.values)}
        if heads != {""}:
            return "{" in heads
    return False


def with_messages(grammar: ActionGrammar, values: Iterable[str]) -> ActionGrammar:
    """``grammar`` plus every template again carrying a message from ``values``, in its form (see the module).

    A template that opens a JSON object gets a ``say`` field, and only when it ends with a literal
    ``}``; every other template gets the mark. Values holding a quote, a backslash or a line break
    are never offered.
    """
    values = tuple(dict.fromkeys(v for v in values if not set(v) & {'"', "\\", "\n", "\r"}))
    if not values:
        return grammar
    say = Slot(SAY_KEY, values)
    extra: list[tuple[Part, ...]] = []
    for template in grammar.templates:
        last = template[-1] if template else None
        if not _template_opens_object(template):
            extra.append((*template, SAY_MARK, say))
        elif isinstance(last, str) and last.endswith("}"):
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
