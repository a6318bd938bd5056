"""Scripted partner styles of the bargaining scenario: deterministic negotiators an agent can learn to read.

Each style is one accepting rule plus one proposing rule; it sees what its seat sees (its own
values, the offer on the table, the turn count) and never another agent's values. Training
styles decide by value thresholds:

- ``pushover``: accepts every offer; proposes to keep half of its pool value.
- ``fair``: accepts an offer worth at least a fair share (1/n of its pool value); proposes to keep a fair share.
- ``tough``: accepts 80% of its pool value or more; proposes to keep 90%.
- ``conceder``: its threshold and its kept share fall linearly with the turn count, from all of
  its pool value at the first turn to 20% at the deadline.
- ``boulware``: holds 90% until three quarters of the turns are gone, then drops to 30%.

Held-out styles share none of those rules (``rules`` holds each style's; a test keeps the sets
disjoint); they decide by counting and by what was offered before, never by a value threshold:

- ``alternating``: accepts every second offer it is asked about, whatever it holds; proposes to keep
  every unit of the item type it values most.
- ``reciprocal``: accepts an offer that gives it at least as many units as its own last offer gave
  the maker; proposes the mirror of the last offer it received (the maker's units for itself).
- ``anchored``: rejects the first offer it is asked about and accepts any later offer worth at least
  as much to it as that first one; proposes to keep every unit of the item type it values most.

A style never leaves (in ``hard``, leaving is the agent's own choice). Before any offer exists,
``reciprocal`` proposes an even split of units (the odd unit to itself). With more than two agents, the units a proposal
gives away go round the others in turn.

**Against the scripted expert** (two agents, 200 evaluation seeds, the expert's seat alternating):
in ``basic`` every style deals in every episode, and the expert keeps 0.26 (``tough``), 0.47-0.48
(``conceder``, ``boulware``), 0.66 (``fair``) and 0.80-0.82 (``pushover`` and the held-out styles) of its
pool value; in ``hard`` ``tough`` deals in 0.48 of episodes (outside options), every other style in 0.99 or more.
An agent that reads a style can do better than the expert, which does not model its partner: the
held-out styles all end up with nothing when played the right way (``alternating`` accepts any
second offer, ``anchored`` any offer after a first one as bad, and ``reciprocal`` answers an offer
of everything with its mirror, everything for the agent, which the agent then accepts).

It leaves out the turn protocol and validation (``env.py``) and the scripted expert (``expert.py``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

from scenarios.bargaining.deals import Alloc, Pool


@dataclass(frozen=True)
class SeatView:
    """What a style sees in its seat at one step."""

    pool: Pool
    me: int
    role: str
    """propose, respond or wait (``env._role``)."""
    table: Alloc | None
    """The offer on the table, if any."""
    maker: int
    """Who made the offer on the table (-1: none)."""
    progress: float
    """Turns used / max_turns: 0 at the start, 1 at the deadline."""
    live: tuple[bool, ...]


class PartnerStyle:
    """One seat's scripted negotiator for one episode; it may remember what it saw."""

    name: ClassVar[str] = ""
    rules: ClassVar[frozenset[str]] = frozenset()
    last_offer: Alloc | None = None
    """The style's own latest offer in this episode (None before its first)."""

    def accepts(self, view: SeatView) -> bool:
        raise NotImplementedError

    def proposal(self, view: SeatView) -> Alloc:
        raise NotImplementedError

    def act(self, view: SeatView) -> str:
        """The style's action text in its role now."""
        if view.role == "wait":
            return json.dumps({"wait": ""})
        if view.table is not None and view.maker != view.me and self.accepts(view):
            return json.dumps({"accept": ""})
        if view.role == "respond":
            return json.dumps({"reject": ""})
        self.proposed(view)
        return json.dumps({"offer": " ".join("".join(map(str, g)) for g in self.last_offer)})

    def proposed(self, view: SeatView) -> None:
        self.last_offer = self.proposal(view)


def share(view: SeatView, alloc: Alloc) -> float:
    """The seat's value of `alloc` as a share of its whole-pool value."""
    return view.pool.worth(view.me, alloc) / view.pool.max_worth(view.me)


def units(alloc: Alloc, agent: int) -> int:
    return sum(group[agent] for group in alloc)


def give_rest(view: SeatView, mine: list[int]) -> Alloc:
    """An allocation keeping `mine[t]` units of each type for the seat and dealing the rest round the others."""
    n = len(view.live)
    others = [(view.me + k) % n for k in range(1, n) if view.live[(view.me + k) % n]]
    alloc = [[0] * n for _ in view.pool.counts]
    turn = 0
    for t, count in enumerate(view.pool.counts):
        alloc[t][view.me] = mine[t]
        for _ in range(count - mine[t]):
            alloc[t][others[turn % len(others)]] += 1
            turn += 1
    return tuple(tuple(g) for g in alloc)


def keep_share(view: SeatView, target: float) -> Alloc:
    """Keep the units the seat values most until they are worth `target` of its pool value."""
    pool, me = view.pool, view.me
    order = sorted((t for t in range(len(pool.counts)) for _ in range(pool.counts[t])),
                   key=lambda t: (-pool.values[me][t], t))
    mine, kept = [0] * len(pool.counts), 0.0
    for t in order:
        if kept >= target * pool.max_worth(me) or pool.values[me][t] == 0:
            break
        mine[t] += 1
        kept += pool.values[me][t]
    return give_rest(view, mine)


def keep_top_item(view: SeatView) -> Alloc:
    """Keep every unit of the item type the seat values most (lowest index on ties), give the rest away."""
    values = view.pool.values[view.me]
    top = max(range(len(values)), key=lambda t: (values[t], -t))
    return give_rest(view, [c if t == top else 0 for t, c in enumerate(view.pool.counts)])


class Threshold(PartnerStyle):
    """Accept at or above a share of the pool value; propose to keep a share (both may move with time)."""

    rules = frozenset({"accept_value_threshold", "keep_value_share"})
    accept_at: ClassVar[float] = 0.0
    """The share accepted when `threshold` is not overridden."""
    keep_at: ClassVar[float | None] = None
    """The share kept when proposing (None: the acceptance threshold)."""

    def threshold(self, view: SeatView) -> float:
        return self.accept_at

    def keep(self, view: SeatView) -> float:
        return self.threshold(view) if self.keep_at is None else self.keep_at

    def accepts(self, view: SeatView) -> bool:
        return share(view, view.table) >= self.threshold(view) - 1e-9

    def proposal(self, view: SeatView) -> Alloc:
        return keep_share(view, self.keep(view))


class Pushover(Threshold):
    name = "pushover"
    rules = frozenset({"accept_always", "keep_value_share"})
    accept_at, keep_at = 0.0, 0.5


class Fair(Threshold):
    name = "fair"

    def threshold(self, view: SeatView) -> float:
        return 1.0 / sum(view.live)


class Tough(Threshold):
    name = "tough"
    accept_at, keep_at = 0.8, 0.9


class Conceder(Threshold):
    name = "conceder"
    rules = frozenset({"accept_value_threshold", "keep_value_share", "concede_over_time"})

    def threshold(self, view: SeatView) -> float:
        return 1.0 - 0.8 * view.progress


class Boulware(Threshold):
    name = "boulware"
    rules = frozenset({"accept_value_threshold", "keep_value_share", "concede_over_time"})

    def threshold(self, view: SeatView) -> float:
        return 0.9 if view.progress < 0.75 else 0.3


class Alternating(PartnerStyle):
    name = "alternating"
    rules = frozenset({"accept_every_second", "keep_top_item"})

    def __init__(self) -> None:
        self.asked = 0

    def accepts(self, view: SeatView) -> bool:
        self.asked += 1
        return self.asked % 2 == 0

    def proposal(self, view: SeatView) -> Alloc:
        return keep_top_item(view)


class Reciprocal(PartnerStyle):
    name = "reciprocal"
    rules = frozenset({"accept_reciprocal_units", "propose_mirror"})

    def __init__(self) -> None:
        self.received: Alloc | None = None
        self.received_from = -1

    def accepts(self, view: SeatView) -> bool:
        self.received, self.received_from = view.table, view.maker
        if self.last_offer is None:
            return False  # nothing of its own to reciprocate yet
        return units(view.table, view.me) >= units(self.last_offer, view.maker)

    def proposal(self, view: SeatView) -> Alloc:
        if self.received is not None and view.live[self.received_from]:
            maker, me = self.received_from, view.me
            swapped = [list(g) for g in self.received]
            for g in swapped:
                g[me], g[maker] = g[maker], g[me]
            if not any(g[i] for g in swapped for i, alive in enumerate(view.live) if not alive):
                return tuple(tuple(g) for g in swapped)
        n = sum(view.live)  # no usable offer seen: an even split of units, the odd ones to itself
        return give_rest(view, [-(-c // n) for c in view.pool.counts])


class Anchored(PartnerStyle):
    name = "anchored"
    rules = frozenset({"accept_above_first_offer", "keep_top_item"})

    def __init__(self) -> None:
        self.anchor: int | None = None

    def accepts(self, view: SeatView) -> bool:
        worth = view.pool.worth(view.me, view.table)
        if self.anchor is None:
            self.anchor = worth
            return False
        return worth >= self.anchor

    def proposal(self, view: SeatView) -> Alloc:
        return keep_top_item(view)


_CLASSES: tuple[type[PartnerStyle], ...] = (Pushover, Fair, Tough, Conceder, Boulware, Alternating, Reciprocal,
                                            Anchored)
STYLES: dict[str, type[PartnerStyle]] = {c.name: c for c in _CLASSES}
TRAIN_STYLES = ("pushover", "fair", "tough", "conceder", "boulware")
HELDOUT_STYLES = ("alternating", "reciprocal", "anchored")


def rules_of(names: tuple[str, ...]) -> frozenset[str]:
    return frozenset().union(*(STYLES[n].rules for n in names))


assert set(TRAIN_STYLES) | set(HELDOUT_STYLES) == set(STYLES)
assert not rules_of(TRAIN_STYLES) & rules_of(HELDOUT_STYLES)
