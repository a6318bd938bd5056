"""The scripted negotiator of the bargaining scenario: concede over time, keep what it values most.

With ``fair = 1 / (number of agents still bargaining)`` and ``progress`` = turns used /
``max_turns`` (0 at the start, 1 at the deadline):

- **Accepting.** It accepts an offer worth at least ``accept_threshold`` of its whole-pool value:
  ``fair * (1.2 - 0.9 * progress)`` (20% above a fair share at first, 30% of it at the
  deadline), and never less than its outside option.
- **Proposing.** It keeps the units it values most until it holds ``keep_target`` of its pool
  value: ``fair + (1 - fair) * 0.5 * (1 - progress)`` (halfway between fair and everything at
  first, a fair share at the deadline). Every other unit goes to the other agents, so each of
  them gets at least an even share of the units the proposer gives away: a unit goes to the
  agent with the fewest units so far, preferring one that kept that item in its own last
  offer (a revealed preference); all values of others are private, so units are the only
  share it can promise.
- **Leaving** (hard split). When fewer turns remain than agents bargaining (no full round of
  offers is left) and no acceptable offer is on the table, it leaves for its outside option.

It leaves out the turn protocol and validation (``env.py``).
"""

from __future__ import annotations

from collections.abc import Mapping

from scenarios.bargaining.deals import Alloc, Pool


def accept_threshold(progress: float, n_live: int) -> float:
    """Share of its whole-pool value the expert accepts (before its outside option)."""
    return (1.0 / n_live) * max(0.0, 1.2 - 1.5 * progress)


def keep_target(progress: float, n_live: int) -> float:
    """Share of its whole-pool value the expert keeps for itself when it proposes."""
    fair = 1.0 / n_live
    return fair + (1.0 - fair) * 0.5 * (1.0 - progress)


def acceptable(pool: Pool, me: int, alloc: Alloc, progress: float, n_live: int) -> bool:
    """Whether the expert agent ``me`` accepts ``alloc``."""
    worth, total = pool.worth(me, alloc), pool.max_worth(me)
    return worth >= accept_threshold(progress, n_live) * total and worth >= pool.outside[me]


def propose(pool: Pool, me: int, live: tuple[bool, ...], progress: float,
            revealed: Mapping[int, Alloc]) -> Alloc:
    """The expert's offer: keep its most valued units up to ``keep_target``, spread the rest."""
    n_types, n = len(pool.items), len(live)
    alloc = [[0] * n for _ in range(n_types)]
    units = sorted((t for t in range(n_types) for _ in range(pool.counts[t])),
                   key=lambda t: (-pool.values[me][t], t))
    target = keep_target(progress, sum(live)) * pool.max_worth(me)
    kept, rest = 0, []
    for t in units:
        if kept < target and pool.values[me][t] > 0:
            alloc[t][me] += 1
            kept += pool.values[me][t]
        else:
            rest.append(t)
    others = [(me + k) % n for k in range(1, n) if live[(me + k) % n]]  # rotation breaks ties fairly
    received = dict.fromkeys(others, 0)
    for t in sorted(rest):
        def key(b: int, t: int = t) -> tuple[int, int, int]:
            wants = revealed[b][t][b] if b in revealed else 0
            return received[b], -wants, others.index(b)
        b = min(others, key=key)
        alloc[t][b] += 1
        received[b] += 1
    return tuple(tuple(group) for group in alloc)
