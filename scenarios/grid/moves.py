"""Move actions on a grid: parsing the action text, resolving simultaneous moves, planning them.

An action is one JSON object ``{"move": "up"}`` (any JSON with that content; whitespace and
key order are free). ``parse_move`` never raises on agent text: anything else yields a reason
for an ``error:`` observation. ``resolve_moves`` applies one team's simultaneous moves with the
collision rule of the grid scenarios; ``plan_moves`` picks collision-free moves for the
scripted experts.

It leaves out rewards and observations (the scenario modules).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from scenarios.json_action import read_json_object

FORMAT = '{"move": "up|down|left|right|stay"}'


def move_text(move: str) -> str:
    """The canonical action text of ``move`` (what grammars and experts produce)."""
    return json.dumps({"move": move})


def parse_move(action: object, legal: tuple[str, ...], where: str, max_chars: int) -> tuple[str | None, str | None]:
    """Return ``(move, None)`` for a valid action, else ``(None, reason)``; ``legal``: the moves allowed from ``where``."""
    obj, reason = read_json_object(action, max_chars, FORMAT)
    if obj is None:
        return None, reason
    if set(obj) != {"move"}:
        return None, f"wrong keys {sorted(k[:20] for k in obj)}; use exactly {FORMAT}"
    move = obj["move"]
    if not isinstance(move, str):
        return None, f"move must be a string, not a JSON {type(move).__name__}: {FORMAT}"
    if move not in ("up", "down", "left", "right", "stay"):
        return None, f"unknown move {move[:20]!r}: {FORMAT}"
    if move not in legal:
        return None, f"{move} from {where} leaves the grid or hits a wall; legal: {' '.join(legal)}"
    return move, None


def resolve_moves(pos: dict[str, int], want: dict[str, int]) -> tuple[dict[str, int], set[str]]:
    """Apply one team's simultaneous moves; returns final cells and the agents bumped back.

    A move is cancelled (the agent stays and is "bumped") when two or more agents enter the same
    cell, when two agents swap cells, or when the agent enters a cell whose occupant stays
    (including one bumped back there). Cancelling can block others in turn; this repeats until
    no two agents share a cell. Longer rotations (3+ agents in a cycle) are allowed.
    """
    final = dict(want)
    bumped: set[str] = set()
    changed = True
    while changed:
        changed = False
        by_cell: dict[int, list[str]] = {}
        for agent, cell in final.items():
            by_cell.setdefault(cell, []).append(agent)
        for agents in by_cell.values():
            if len(agents) > 1:
                for agent in agents:
                    if final[agent] != pos[agent]:
                        final[agent] = pos[agent]
                        bumped.add(agent)
                        changed = True
        for agent in final:
            other = next((b for b in final if b != agent and pos[b] == final[agent]), None)
            if other is not None and final[agent] != pos[agent] and final[other] == pos[agent]:
                final[agent], final[other] = pos[agent], pos[other]
                bumped |= {agent, other}
                changed = True
    return final, bumped


def plan_moves(order: Iterable[str], pos: dict[str, int],
               prefs: dict[str, list[tuple[str, int]]]) -> dict[str, str]:
    """Moves for a team that ``resolve_moves`` accepts without a bump.

    ``prefs[agent]`` lists ``(move, cell)`` options, best first; staying is the last resort. An
    agent takes its best option into a free cell, or into a cell whose occupant has already
    chosen to leave (and not into the agent's own cell); it waits while the occupant has not
    chosen. Agents still waiting when nobody can choose any more stay.
    """
    order = list(order)
    occupant = {cell: agent for agent, cell in pos.items()}
    chosen: dict[str, tuple[str, int]] = {}
    taken: set[int] = set()
    progress = True
    while progress and len(chosen) < len(order):
        progress = False
        for agent in order:
            if agent in chosen:
                continue
            for move, cell in prefs[agent]:
                if cell == pos[agent]:
                    chosen[agent] = (move, cell)
                    break
                if cell in taken:
                    continue
                occ = occupant.get(cell)
                if occ is None or occ == agent:
                    chosen[agent] = (move, cell)
                    break
                if occ not in chosen:
                    break  # wait for the occupant to choose
                if chosen[occ][1] not in (cell, pos[agent]):
                    chosen[agent] = (move, cell)
                    break
            if agent in chosen:
                taken.add(chosen[agent][1])
                progress = True
    for agent in order:
        chosen.setdefault(agent, ("stay", pos[agent]))
    return {agent: chosen[agent][0] for agent in order}
