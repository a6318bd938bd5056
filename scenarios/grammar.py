"""The valid actions of one agent in one state, as plain data.

A grammar is a tuple of templates; a template is a sequence of literal strings and typed
``Slot`` holes. The policy compiles it to token masks for constrained decoding; the scenario
uses it to say which texts are valid right now. It holds no torch and knows nothing about
tokenizers. It leaves out regular-expression or recursive grammars on purpose: every action
the scenarios need is a short template with a few entity-valued holes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass


@dataclass(frozen=True)
class Slot:
    """A typed hole in an action template, filled by exactly one of ``values``."""

    name: str
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if not self.values:
            raise ValueError(f"Slot {self.name!r} needs at least one value; drop the template instead")
        # Tuples keep the dataclass hashable; a list passed by mistake would break that.
        object.__setattr__(self, "values", tuple(self.values))


Part = str | Slot


@dataclass(frozen=True)
class ActionGrammar:
    """Every valid action of one agent now: the union of its templates' expansions."""

    templates: tuple[tuple[Part, ...], ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "templates", tuple(tuple(t) for t in self.templates))

    def expand(self, limit: int = 4096) -> list[str]:
        """Every valid action string, in template order then slot-value order (stable).

        Raises ValueError when there are more than ``limit``: the caller asked for a list it
        could not use, and silently cutting it would hide valid actions.
        """
        out: list[str] = []
        seen: set[str] = set()
        for template in self.templates:
            choices = [(p,) if isinstance(p, str) else p.values for p in template]
            for combo in itertools.product(*choices):
                text = "".join(combo)
                if text in seen:
                    continue
                seen.add(text)
                out.append(text)
                if len(out) > limit:
                    raise ValueError(f"grammar expands to more than {limit} actions; raise limit=")
        return out

    def __contains__(self, text: object) -> bool:
        if not isinstance(text, str):
            return False
        return any(_match(template, 0, text, 0) for template in self.templates)

    def __len__(self) -> int:
        """Number of templates (not of actions: use ``len(expand())`` for that)."""
        return len(self.templates)


def _match(template: tuple[Part, ...], i: int, text: str, pos: int) -> bool:
    # Backtracking match without expanding: slot values may share prefixes, so try each.
    if i == len(template):
        return pos == len(text)
    part = template[i]
    if isinstance(part, str):
        return text.startswith(part, pos) and _match(template, i + 1, text, pos + len(part))
    return any(
        text.startswith(v, pos) and _match(template, i + 1, text, pos + len(v)) for v in part.values
    )
