"""Pools, private valuations and offers of the bargaining scenario, and the parser of action text.

An *allocation* gives every unit of the pool to one agent: ``alloc[t][i]`` is agent ``i``'s count
of item type ``t``. Its text is one group of digits per item type, in the pool's item order,
each group listing the counts of agent_0, agent_1, ... in id order: with pool ``book 3 hat 1
ball 2`` and two agents, ``"21 01 11"`` gives agent_0 two books and a ball and agent_1 a book,
the hat and a ball. Counts are single digits (at most 5 units per type), so every token of an
offer is a digit entity. ``compositions`` lists the valid groups of one item type, so the
action grammar can hold exactly the valid offers as a product of slots.

It leaves out turns, rewards (``env.py``) and the scripted negotiator (``expert.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from scenarios.json_action import json_type, read_json_object

ITEMS = ("book", "hat", "ball", "lamp")
ACTS = ("offer", "accept", "reject", "wait", "leave")
Alloc = tuple[tuple[int, ...], ...]


@dataclass(frozen=True)
class Pool:
    """One episode's goods and private information."""

    items: tuple[str, ...]
    counts: tuple[int, ...]
    values: tuple[tuple[int, ...], ...]  # values[i][t]: agent i's value of one unit of item t
    outside: tuple[int, ...]  # outside[i]: what agent i gets by leaving, in its value units (0: no leaving)

    def worth(self, agent: int, alloc: Alloc) -> int:
        """Agent ``agent``'s value of its share under ``alloc``."""
        return sum(self.values[agent][t] * alloc[t][agent] for t in range(len(self.items)))

    def max_worth(self, agent: int) -> int:
        """Agent ``agent``'s value of the whole pool (always positive)."""
        return sum(v * c for v, c in zip(self.values[agent], self.counts, strict=True))

    def share_text(self, agent: int, alloc: Alloc) -> str:
        return " ".join(f"{item} {alloc[t][agent]}" for t, item in enumerate(self.items))


def make_pool(rng: np.random.Generator, n_agents: int, hard: bool) -> Pool:
    """Basic: 3 item types of 1-4 units; hard: 4 types of 1-5 units and private outside options."""
    n_types, max_count = (4, 5) if hard else (3, 4)
    counts = tuple(int(c) for c in rng.integers(1, max_count + 1, size=n_types))
    values, outside = [], []
    for _ in range(n_agents):
        while True:  # every agent must value the pool, or it has nothing to bargain for
            vals = tuple(int(v) for v in rng.integers(0, 6, size=n_types))
            if sum(v * c for v, c in zip(vals, counts, strict=True)) > 0:
                break
        values.append(vals)
        total = sum(v * c for v, c in zip(vals, counts, strict=True))
        # An outside option worth 20-80% of a fair share (1/n of the pool): a deal can beat it, a bad one not.
        outside.append(int(np.ceil(total * rng.uniform(0.2, 0.8) / n_agents)) if hard else 0)
    return Pool(ITEMS[:n_types], counts, tuple(values), tuple(outside))


@lru_cache(maxsize=4096)
def compositions(count: int, live: tuple[bool, ...]) -> tuple[str, ...]:
    """Every digit group splitting ``count`` units among the agents with ``live[i]`` (others get 0).

    Ordered from the most units for the lowest id down (stable, so grammars are too).
    """
    if not live:
        return ("",) if count == 0 else ()
    if not live[0]:
        return tuple("0" + rest for rest in compositions(count, live[1:]))
    if not any(live[1:]):
        return (str(count) + "0" * (len(live) - 1),)
    return tuple(str(c) + rest for c in range(count, -1, -1) for rest in compositions(count - c, live[1:]))


def offer_text(alloc: Alloc) -> str:
    return " ".join("".join(str(c) for c in group) for group in alloc)


def parse_offer(text: str, pool: Pool, live: tuple[bool, ...]) -> tuple[Alloc | None, str | None]:
    """Return ``(alloc, None)`` for a valid offer text, else ``(None, reason)``."""
    n, groups = len(live), text.split(" ")
    example = offer_text(tuple(tuple(c if i == live.index(True) else 0 for i in range(n)) for c in pool.counts))
    if len(groups) != len(pool.items) or any(len(g) != n or not g.isdigit() for g in groups):
        return None, (f"an offer is {len(pool.items)} groups of {n} digits (each item's counts by agent id), "
                      f"e.g. {example}")
    alloc = tuple(tuple(int(d) for d in g) for g in groups)
    for t, item in enumerate(pool.items):
        if sum(alloc[t]) != pool.counts[t]:
            return None, f"the {item} counts must add up to {pool.counts[t]}"
    if any(alloc[t][i] for t in range(len(pool.items)) for i in range(n) if not live[i]):
        return None, "an agent that left must get 0 of every item"
    return alloc, None


def parse_act(action: object, max_chars: int) -> tuple[str | None, str, str | None]:
    """Return ``(act, argument, None)`` for a well-formed action, else ``(None, "", reason)``; never raises."""
    fmt = '{"offer": "<groups>"}, {"accept": ""}, {"reject": ""}, {"wait": ""}'
    obj, reason = read_json_object(action, max_chars, fmt)
    if obj is None:
        return None, "", reason
    if len(obj) != 1 or next(iter(obj)) not in ACTS:
        return None, "", f"use exactly one key out of {', '.join(ACTS)}; got {[str(k)[:20] for k in obj][:4]}"
    act, arg = next(iter(obj.items()))
    if not isinstance(arg, str):
        return None, "", f"the value of {act} must be a string, not a JSON {json_type(arg)}"
    if act != "offer" and arg != "":
        return None, "", f'write {{"{act}": ""}} with an empty string'
    return act, arg, None
