"""Navigation (``navigation``): the team covers every landmark on a small grid, one agent on each.

A text version of the cover-the-landmarks task (MPE ``simple_spread``): n agents and n
landmarks on a square grid; the team succeeds when every landmark has an agent on it.

**Agents.** ``agent_0`` .. ``agent_{n-1}``, n in [1, 16], all on one team. By default the episode
is a team event: every agent ends on the same turn (all ``success`` when the last landmark is
covered, all ``max_turns`` otherwise), so ``agents`` empties at once. With option ``settle``
agents that reach a free landmark leave one by one (see Options). With one agent this is plain
single-agent navigation.

**Observations.** ``{"text": str}``, printable ASCII. Cells are entity tokens ``c<row><col>``
(``c00`` top-left; ``up`` lowers the row, ``left`` lowers the column). Turn 1: ``you are agent_0
at c12. task: the team covers every landmark, one agent on each. grid 5x5, c00 top-left.
landmarks: c03 c41 c44. others: agent_1 c30 agent_2 c22.`` (plus ``walls: ...`` on hard grids).
Later turns: ``you c13; landmarks c03 c41 c44; others agent_1 c31 agent_2 c22; covered 1/3``,
preceded by ``bumped: ...`` after a collision or ``error: <reason>`` after a malformed action.
With option ``view`` the first turn still lists every landmark (the task), but ``others`` lists only
the agents within view, and later turns list only the landmarks and agents within view (the part is
left out when none is); ``covered k/n`` stays the team's count.

**Actions.** One JSON object as text: ``{"move": "up"}`` with a move in up, down, left, right,
stay; any JSON with the same content is accepted. Moves are simultaneous. Malformed actions
(not JSON, not an object, keys other than ``move``, a non-string or unknown move, a move off
the grid or into a wall, non-ASCII, over 512 characters) leave the agent in place and return
``error:``. ``action_grammar(agent)`` lists the legal moves from the agent's cell;
``expert_action(agent)`` is the scripted expert's move: landmarks are assigned by a minimum-cost
matching on squared shortest-path distance (recomputed every turn), and agents step along
shortest paths in an order that never collides. It covers every landmark within the default
``max_turns`` on at least 98% of seeds of every split (tested).

**Collisions.** A move is cancelled (the agent stays, "bumped") when two agents enter the same
cell, when two agents swap cells, or when the cell's occupant stays; cells never hold two agents.

**Rewards.** Layers in ``infos[agent]["reward_components"]``: ``format`` (-1 malformed, else 0),
``collision`` (-1 when the agent's move was cancelled by another agent), ``progress`` (team: the
decrease of the summed distance from each landmark to its nearest agent, divided by n),
``coverage`` (team: the change in the fraction of landmarks covered; it telescopes, so lingering
half-done earns nothing), ``task`` (team: 1 on success). Team layers go to every agent. The
reward is their weighted sum; weights: option ``reward_weights`` (defaults format 0.2,
collision 0.2, progress 0.1, coverage 0.2, task 1.0).

**Ending.** Every landmark covered: ``success`` for all agents (termination). Running out of
``max_turns``: truncation with reason ``max_turns`` for all agents.

**Options.** ``split``, ``max_turns`` (20), ``reward_weights``, ``train_hard_frac`` (0.5),
``view`` (None: the whole board), ``settle`` (False): when on, an agent that ends a turn alone
on a landmark settles there: its episode ends with ``success`` (it leaves ``agents``, so agents
finish at different times), its cell stays taken (moving into it is a bump) and it keeps the
landmark covered; the team's ``task`` reward goes to the agents still playing when the last
landmark is covered.

**Splits.** ``basic``: a 5x5 grid (6x6 for more than 4 agents, 8x8 for more than 8), no walls.
``hard``: 7x7 (8x8 for more than 4 agents) with size-2 wall cells that never cut the grid.
``train``: a seeded mixture of the two. Evaluation seeds: ``NavigationEnv.eval_seeds(split, n)``.
``state()`` adds the level, walls, landmarks and coverage to the per-agent lines.

**Capabilities.** Move classes and the visible turn budget (``common.py``);
``episode_stats(agent)``: ``coverage``, the share of landmarks covered now.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scenarios.base import StepOutcome
from scenarios.grid.board import MOVES, assign, distances, random_board
from scenarios.grid.common import GridOptions, GridScenario
from scenarios.grid.moves import plan_moves, resolve_moves


@dataclass(frozen=True)
class NavigationOptions(GridOptions):
    """Options of ``navigation`` (on top of split, max_turns, reward_weights, train_hard_frac)."""

    settle: bool = False
    """An agent that ends a turn alone on a landmark settles: its episode ends there (success) and its cell stays taken."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.settle, bool):
            raise ValueError(f"settle must be true or false, got {self.settle!r}")


class NavigationEnv(GridScenario):
    """See the module docstring."""

    options_cls = NavigationOptions

    metadata = {"render_modes": ["ansi"], "name": "navigation", "is_parallelizable": True}
    description = "Cooperative: cover every landmark on a grid, one agent on each, without collisions."
    kind = "cooperative"
    agent_range = (1, 16)
    default_reward_weights = {"format": 0.2, "collision": 0.2, "progress": 0.1, "coverage": 0.2, "task": 1.0}

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        self.landmarks: list[int] = []

    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        rng = np.random.default_rng(episode_seed)
        n = len(self.possible_agents)
        self.level = self._draw_level(rng, split)
        if self.level == "basic":
            self.board = random_board(5 + (n > 4) + 2 * (n > 8), 0, rng)
        else:
            size = 7 + (n > 4)
            self.board = random_board(size, size - 2, rng)
        free = self.board.free_cells()
        cells = [free[int(i)] for i in rng.choice(len(free), size=2 * n, replace=False)]
        self.landmarks = cells[:n]
        self.pos = dict(zip(self.possible_agents, cells[n:], strict=True))
        self._plan_key = None
        b = self.board
        head = (f"task: the team covers every landmark, one agent on each. grid {b.size}x{b.size}, c00 top-left. "
                f"landmarks: {b.tokens(self.landmarks)}.")
        if b.walls:
            head += f" walls: {b.tokens(sorted(b.walls))}."
        texts = {}
        for agent in self.possible_agents:
            others = self._occupied_tokens([a for a in self.possible_agents if a != agent], agent)
            texts[agent] = f"you are {agent} at {b.token(self.pos[agent])}. {head}" + (
                f" others: {others}." if others else "")
        return texts

    def _step_agents(self, actions: dict[str, object]) -> dict[str, StepOutcome]:
        live = list(actions)
        want, errors = self._wanted_cells(actions)
        spread_before, covered_before = self._spread(), self._covered()
        # Settled agents stay where they are: moving into their cell is a bump like any other.
        settled = {a: self.pos[a] for a in self.possible_agents if a not in live and a in self.pos}
        final, bumped = resolve_moves({a: self.pos[a] for a in live} | settled, want | settled)
        self.pos.update({a: final[a] for a in live})
        n = len(self.landmarks)
        covered = self._covered()
        team = {"progress": (spread_before - self._spread()) / n, "coverage": (covered - covered_before) / n}
        done = covered == n
        if done:
            team["task"] = 1.0
        outcomes = {}
        for agent in live:
            components = dict(team)
            lines = []
            if agent in errors:
                components["format"] = -1.0
                lines.append(f"error: {errors[agent]}")
            elif agent in bumped:
                components["collision"] = -1.0
                lines.append("bumped: another agent blocked your move")
            lines.append(self._status(agent, covered))
            end = "success" if done else None
            if done:
                lines.append("all landmarks covered: success")
            elif self.opts.settle and self._alone_on_landmark(agent):
                # Its part is done: it keeps the landmark covered from here on and leaves the game;
                # the team's own success reward is paid to whoever is still playing at the end.
                end = "success"
                lines.append("settled on a landmark: your part is done")
            outcomes[agent] = StepOutcome("\n".join(lines), components, invalid=agent in errors, end=end)
        return outcomes

    def episode_stats(self, agent: str) -> dict[str, float]:
        if self.board is None or agent not in self.possible_agents:
            return {}
        return {"coverage": self._covered() / len(self.landmarks)}

    def _alone_on_landmark(self, agent: str) -> bool:
        cell = self.pos[agent]
        return cell in self.landmarks and sum(c == cell for c in self.pos.values()) == 1

    def _status(self, agent: str, covered: int) -> str:
        b = self.board
        others = self._occupied_tokens([a for a in self.possible_agents if a != agent], agent)
        text = f"you {b.token(self.pos[agent])}"
        landmarks = [lm for lm in self.landmarks if self._sees(agent, lm)]
        if landmarks or self.opts.view is None:
            text += f"; landmarks {b.tokens(landmarks)}"
        if others:
            text += f"; others {others}"
        return f"{text}; covered {covered}/{len(self.landmarks)}"

    def _covered(self) -> int:
        occupied = set(self.pos.values())
        return sum(lm in occupied for lm in self.landmarks)

    def _spread(self) -> int:
        """Summed distance from each landmark to its nearest agent (0 when all are covered)."""
        cells = list(self.pos.values())
        return int(self.board.dist[np.ix_(self.landmarks, cells)].min(axis=1).sum())

    def _expert_plan(self) -> dict[str, str]:
        live = [a for a in self.possible_agents if a in self.agents]
        if not live:
            return {}
        dist, landmarks = self.board.dist, self.landmarks
        settled = frozenset(self.pos[a] for a in self.possible_agents if a not in live)
        if settled:  # settled agents are walls now, and their landmarks are taken
            dist = distances(self.board.size, self.board.walls | settled)
            landmarks = [lm for lm in landmarks if lm not in settled]
        cells = [self.pos[a] for a in live]
        # Squared distances make the matching prefer two short trips to one long one; that
        # dissolves head-on standoffs and lets a parked agent step aside for one behind it.
        targets = assign(dist[np.ix_(cells, landmarks)] ** 2)
        prefs = {}
        for agent, cell, t in zip(live, cells, targets, strict=True):
            goal = landmarks[t]
            options = []
            for move in MOVES[:-1]:
                nxt = self.board.step(cell, move)
                if nxt is not None and dist[nxt, goal] < dist[cell, goal]:
                    options.append((int(dist[nxt, goal]), MOVES.index(move), move, nxt))
            prefs[agent] = [(m, c) for _, _, m, c in sorted(options)] + [("stay", cell)]
        return plan_moves(live, {a: self.pos[a] for a in live}, prefs)

    def _agent_state(self, agent: str) -> str:
        if agent not in self.pos or self.board is None:
            return ""
        cell = self.pos[agent]
        return f"pos={self.board.token(cell)} on_landmark={'yes' if cell in self.landmarks else 'no'}"

    def _global_state(self) -> str:
        return (f"{super()._global_state()} landmarks={self.board.tokens(self.landmarks)} "
                f"covered={self._covered()}/{len(self.landmarks)}")
