"""Who holds what in ``info_split``: deal a team task's facts and tools among N agents.

The *pieces* of a task are its facts (one entity each) and the distinct tools of its solution
path; every piece is needed. They are shuffled and dealt round-robin over the agents in a
shuffled seat order, so with N >= 2 every agent lacks at least one piece and no agent can
finish alone. With fewer agents than pieces some agents hold several; with more, the extra
agents hold no useful piece and get one distractor tool (``get_news``, ``get_hotels`` or
``get_time``), which is why N can grow to 8 without changing the task. In the ``hard`` group
every agent also lists one distractor tool.

A role's label names what the agent holds (``informant`` for facts, a desk name per useful
tool, ``helper`` when it holds nothing useful), so the first observation says who it is.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scenarios.info_split.tasks import Facts, TeamTask

DISTRACTORS = ("get_news", "get_hotels", "get_time")
DESKS = {"get_event": "calendar", "get_weather": "weather", "find_flights": "flights",
         "book_flight": "booking", "convert": "exchange"}
_TOOL_ORDER = (*DESKS, *DISTRACTORS)


@dataclass(frozen=True)
class Role:
    label: str
    facts: Facts  # (label, entity) pairs this agent knows from the start
    tools: tuple[str, ...]  # world tools listed to the agent: useful ones first, then a distractor

    def useful_tools(self) -> tuple[str, ...]:
        return tuple(t for t in self.tools if t in DESKS)


def deal_roles(task: TeamTask, n_agents: int, rng: np.random.Generator) -> tuple[Role, ...]:
    """One role per agent; deterministic given ``rng``."""
    pieces: list[tuple[str, object]] = [("fact", f) for f in task.facts]
    pieces += [("tool", t) for t in dict.fromkeys(c.tool for c in task.solution)]
    facts: list[list[tuple[str, str]]] = [[] for _ in range(n_agents)]
    tools: list[list[str]] = [[] for _ in range(n_agents)]
    seats = rng.permutation(n_agents)
    for i, k in enumerate(rng.permutation(len(pieces))):
        kind, piece = pieces[int(k)]
        seat = int(seats[i % n_agents])
        if kind == "fact":
            facts[seat].append(piece)  # type: ignore[arg-type]
        else:
            tools[seat].append(piece)  # type: ignore[arg-type]
    roles = []
    for seat in range(n_agents):
        own_facts = tuple(f for f in task.facts if f in facts[seat])
        useful = tuple(t for t in _TOOL_ORDER if t in tools[seat])
        label = "/".join([*(["informant"] if own_facts else []), *(DESKS[t] for t in useful)]) or "helper"
        extra: tuple[str, ...] = ()
        if task.group == "hard" or not (own_facts or useful):
            extra = (DISTRACTORS[int(rng.integers(len(DISTRACTORS)))],)
        roles.append(Role(label, own_facts, useful + extra))
    return tuple(roles)
