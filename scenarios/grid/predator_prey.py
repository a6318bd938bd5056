"""Predator-prey (``predator_prey``): a team of predators hunts a team of prey on a small grid.

**Agents.** n even in [2, 16]: ``agent_0`` .. ``agent_{k-1}`` are predators, ``agent_k`` ..
``agent_{n-1}`` prey (k = n/2); ``team_of(agent)`` says which. A caught prey leaves ``agents``
at once (``failure``) while the others play on, so agents finish at different times.

**Observations.** ``{"text": str}``, printable ASCII. Cells are entity tokens ``c<row><col>``
(``c00`` top-left; ``up`` lowers the row). Turn 1: ``you are agent_0, predator; team agent_0
agent_1. task: catch every prey: end a move on or next to it. grid 5x5, c00 top-left. you c00.
predator: agent_1 c04. prey: agent_2 c22 agent_3 c44.`` (prey read ``task: avoid capture until
the last turn: never end a move on or next to a predator.``; hard grids add ``walls: ...``).
Later turns: ``you c01; predator: agent_1 c03; prey: agent_3 c43`` (other agents only), with
``caught: agent_2`` when a prey was caught this turn, ``bumped: ...`` after a collision with a
teammate, or a leading ``error: <reason>`` after a malformed action.

**Actions.** One JSON object as text: ``{"move": "up"}`` with a move in up, down, left, right,
stay; moves are simultaneous. Malformed actions (not JSON, not an object, keys other than
``move``, a non-string or unknown move, a move off the grid or into a wall, non-ASCII, over 512
characters) leave the agent in place and return ``error:``. Teammates bump as in ``navigation``
(same cell, swap, or into a staying teammate: the move is cancelled); predators and prey never
block each other. ``action_grammar(agent)`` lists the legal moves; ``expert_action(agent)`` is
the scripted expert: prey step to the cell farthest from the nearest predator (ties: the most
cells they reach before any predator); predators are matched to prey (minimum-cost matching)
and step toward the cell their prey's expert is about to step to (ties: the fewest cells left
to the prey). Predator experts catch every prey expert within the default ``max_turns`` on at
least 95% of ``basic`` seeds and 80% of ``hard`` seeds (tested for n = 2 and 4 over 200 seeds;
the measured rates are in docs/results/2026-11-30-scripted-expert-success.md).

**Catching.** After the joint move, a prey at distance 0 or 1 from a predator (on its cell or
a neighbouring cell; walls block) is caught; every predator within reach shares the credit.

**Rewards.** Every member of a team gets its team's reward. Layers in
``infos[agent]["reward_components"]``: ``format`` (-1 malformed), ``collision`` (-1 when a
teammate cancelled the agent's move), ``chase`` (predator: decrease of its distance to the
nearest prey; prey: increase of its distance to the nearest predator; clipped to [-1, 1]),
``team`` (predators: prey caught this turn / k; prey: live prey / k / max_turns, each turn),
``individual`` (predator: its share of this turn's catches; prey: 1 / max_turns for surviving
the turn), ``outcome`` (predators: 1 when the last prey is caught; prey: -1 when caught, +1
for surviving to the last turn: the prey team's success metric). ``team`` and ``individual``
are mixed as ``(1 - individual_weight) * team`` and ``individual_weight * individual`` before
the layer weights, so both point the same way. Weights: option ``reward_weights`` (defaults
format 0.2, collision 0.1, chase 0.05, team 1.0, individual 1.0, outcome 1.0).

**Ending.** A caught prey: ``failure`` (termination). The last prey caught: ``success`` for
every predator (termination). Running out of ``max_turns``: truncation with reason
``max_turns`` for everyone left (surviving prey get ``outcome`` +1).

**Options.** ``split``, ``max_turns`` (20), ``reward_weights``, ``train_hard_frac`` (0.5),
``individual_weight`` (0.25), ``view`` (None: the whole board; else every turn lists only the
agents within view, the first turn too).

**Splits.** ``basic``: a 5x5 grid (6x6 for more than 4 agents, 7x7 for more than 8), no walls.
``hard``: 7x7 (8x8 for more than 4 agents) with size-2 wall cells that never cut the grid.
``train``: a seeded mixture of the two. Evaluation seeds: ``PredatorPreyEnv.eval_seeds(split, n)``. Predators start at distance 3 or
more from every prey (2 on the rare crowded board). ``state()`` adds the level, walls and caught prey.

**Capabilities.** ``team_of``; ``opponent_slots(agent)``: the other team's agents; move classes
and the visible turn budget (``common.py``);
``episode_stats(agent)``: a predator's ``catches`` (its credited share of catches so far), a
prey's ``caught`` (1 once caught, else 0).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from scenarios.base import StepOutcome
from scenarios.grid.board import assign, random_board
from scenarios.grid.common import GridOptions, GridScenario
from scenarios.grid.moves import plan_moves, resolve_moves

PREDATOR, PREY = "predator", "prey"
_TASK = {PREDATOR: "catch every prey: end a move on or next to it.",
         PREY: "avoid capture until the last turn: never end a move on or next to a predator."}


@dataclass(frozen=True)
class PredatorPreyOptions(GridOptions):
    """Options of ``predator_prey`` (on top of split, max_turns, reward_weights, train_hard_frac)."""

    individual_weight: float = 0.25
    """Mix of the individual layer against the team layer: team * (1 - w) + individual * w, w in [0, 1]."""

    def __post_init__(self) -> None:
        super().__post_init__()
        w = self.individual_weight
        if isinstance(w, bool) or not isinstance(w, int | float) or not 0.0 <= w <= 1.0:
            raise ValueError(f"individual_weight must be a number in [0, 1] (0: team reward only), got {w!r}")


class PredatorPreyEnv(GridScenario):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "name": "predator_prey", "is_parallelizable": True}
    description = "Mixed: predators catch prey on a grid; team rewards with an individual share."
    kind = "mixed"
    agent_range = (2, 16)
    options_cls = PredatorPreyOptions
    extra_entities = (PREDATOR, PREY)
    default_reward_weights = {"format": 0.2, "collision": 0.1, "chase": 0.05, "team": 1.0,
                              "individual": 1.0, "outcome": 1.0}

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        if isinstance(n_agents, int) and not isinstance(n_agents, bool) and n_agents % 2:
            raise ValueError(f"PredatorPreyEnv takes an even n_agents (k predators and k prey) in [2, 16], got {n_agents}")
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        k = len(self.possible_agents) // 2
        self.predators, self.prey = self.possible_agents[:k], self.possible_agents[k:]
        self.caught: dict[str, int] = {}  # prey -> turn it was caught
        self.catches: dict[str, float] = {}  # predator -> credited catches so far

    def team_of(self, agent: str) -> str:
        """``"predator"`` or ``"prey"``."""
        if agent not in self.possible_agents:
            raise ValueError(f"unknown agent {agent!r}; agents: {self.possible_agents}")
        return PREDATOR if agent in self.predators else PREY

    def opponent_slots(self, agent: str) -> tuple[str, ...]:
        """The other team's agents: a predator predicts the prey's moves, a prey the predators'."""
        return tuple(self.prey if self.team_of(agent) == PREDATOR else self.predators)

    def episode_stats(self, agent: str) -> dict[str, float]:
        if self.board is None or agent not in self.possible_agents:
            return {}
        if self.team_of(agent) == PREDATOR:
            return {"catches": self.catches[agent]}
        return {"caught": float(agent in self.caught)}

    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        rng = np.random.default_rng(episode_seed)
        k = len(self.predators)
        self.level = self._draw_level(rng, split)
        size = 5 + (k > 2) + (k > 4) if self.level == "basic" else 7 + (k > 2)
        self.board = b = random_board(size, 0 if self.level == "basic" else size - 2, rng)
        free = b.free_cells()
        prey_cells = [free[int(i)] for i in rng.choice(len(free), size=k, replace=False)]
        for gap in (3, 2, 1):  # a crowded board (about 1 seed in 500) settles for a smaller gap
            far = [c for c in free if b.dist[c, prey_cells].min() >= gap]
            if len(far) >= k:
                break
        pred_cells = [far[int(i)] for i in rng.choice(len(far), size=k, replace=False)]
        self.pos = dict(zip(self.predators + self.prey, pred_cells + prey_cells, strict=True))
        self.caught = {}
        self.catches = dict.fromkeys(self.predators, 0.0)
        self._plan_key = None
        texts = {}
        for agent in self.possible_agents:
            team = self.team_of(agent)
            mates = self.predators if team == PREDATOR else self.prey
            text = (f"you are {agent}, {team}; team {' '.join(mates)}. task: {_TASK[team]} "
                    f"grid {size}x{size}, c00 top-left. {self._status(agent, '. ')}.")
            if b.walls:
                text += f" walls: {b.tokens(sorted(b.walls))}."
            texts[agent] = text
        return texts

    def _status(self, agent: str, sep: str = "; ") -> str:
        parts = [f"you {self.board.token(self.pos[agent])}"]
        for label, group in ((PREDATOR, self.predators), (PREY, self.prey)):
            listed = self._occupied_tokens([a for a in group if a != agent], agent)
            if listed:
                parts.append(f"{label}: {listed}")
        return sep.join(parts)

    def _step_agents(self, actions: dict[str, object]) -> dict[str, StepOutcome]:
        live = list(actions)
        want, errors = self._wanted_cells(actions)
        before = dict(self.pos)
        bumped: set[str] = set()
        for group in (self.predators, self.prey):
            members = [a for a in live if a in group]
            final, hit = resolve_moves({a: before[a] for a in members}, {a: want[a] for a in members})
            self.pos.update(final)
            bumped |= hit
        dist = self.board.dist
        preds = [a for a in self.predators if a in self.pos]
        prey_live = [a for a in self.prey if a in self.pos]
        credit = dict.fromkeys(preds, 0.0)
        newly = []
        for q in prey_live:
            catchers = [p for p in preds if dist[self.pos[p], self.pos[q]] <= 1]
            if catchers:
                newly.append(q)
                for p in catchers:
                    credit[p] += 1.0 / len(catchers)
        for p, c in credit.items():
            self.catches[p] += c
        chase = self._chase(before, preds, prey_live)
        caught_at = {q: self.pos.pop(q) for q in newly}
        self.caught.update({q: self._turns[q] for q in newly})
        k, w, max_turns = len(self.predators), self.opts.individual_weight, self.opts.max_turns
        survivors = [q for q in prey_live if q not in newly]
        all_caught = not survivors
        outcomes = {}
        for agent in live:
            last_turn = self._turns[agent] >= max_turns
            if self.team_of(agent) == PREDATOR:
                team, own = len(newly) / k, credit[agent]
                outcome = 1.0 if all_caught else 0.0
                end = "success" if all_caught else None
            else:
                team, own = len(survivors) / k / max_turns, 0.0 if agent in newly else 1.0 / max_turns
                outcome = -1.0 if agent in newly else float(last_turn)
                end = "failure" if agent in newly else None
            components = {"chase": chase[agent], "team": (1 - w) * team, "individual": w * own, "outcome": outcome}
            lines = []
            if agent in errors:
                components["format"] = -1.0
                lines.append(f"error: {errors[agent]}")
            elif agent in bumped:
                components["collision"] = -1.0
                lines.append("bumped: a teammate blocked your move")
            if agent in newly:
                lines.append(f"caught at {self.board.token(caught_at[agent])}: episode over")
            else:
                lines.append(self._status(agent))
                if newly:
                    lines.append(f"caught: {' '.join(newly)}")
            if all_caught and self.team_of(agent) == PREDATOR:
                lines.append("every prey caught: success")
            outcomes[agent] = StepOutcome("\n".join(lines), components, invalid=agent in errors, end=end)
        return outcomes

    def _chase(self, before: dict[str, int], preds: list[str], prey: list[str]) -> dict[str, float]:
        """Shaping: how much each agent closed (predator) or opened (prey) the gap to the other team."""
        dist = self.board.dist
        out = {}
        if not preds or not prey:
            return dict.fromkeys([*preds, *prey], 0.0)
        for agent, others in [(p, prey) for p in preds] + [(q, preds) for q in prey]:
            old = dist[before[agent], [before[o] for o in others]].min()
            new = dist[self.pos[agent], [self.pos[o] for o in others]].min()
            gain = int(old - new if agent in preds else new - old)
            out[agent] = float(max(-1, min(1, gain)))
        return out

    # ----- scripted experts -----
    def _prey_plan(self) -> dict[str, str]:
        b, dist = self.board, self.board.dist
        preds = [self.pos[p] for p in self.predators if p in self.pos]
        prey = [q for q in self.prey if q in self.pos]
        nearest = dist[preds].min(axis=0)  # each cell's distance to the nearest predator
        prefs = {}
        for q in prey:
            moves = b.legal_moves(self.pos[q])
            cells = [b.step(self.pos[q], m) for m in moves]
            rooms = (b.dist_free[cells] < nearest[b.free]).sum(axis=1).tolist()
            near = nearest[cells].tolist()
            options = sorted(zip((-d for d in near), (-r for r in rooms), range(len(moves)), moves, cells,
                                 strict=True))
            prefs[q] = [(m, c) for *_, m, c in options]
        return plan_moves(prey, {q: self.pos[q] for q in prey}, prefs)

    def _expert_plan(self) -> dict[str, str]:
        b, dist = self.board, self.board.dist
        plan = self._prey_plan()
        preds = [p for p in self.predators if p in self.pos]
        prey = [q for q in self.prey if q in self.pos]
        if not prey or not preds:
            return {**plan, **dict.fromkeys(preds, "stay")}
        # Predators aim where their prey's expert is about to step: against it, that corners it.
        aim = [b.step(self.pos[q], plan[q]) for q in prey]
        pred_cells = [self.pos[p] for p in preds]
        cols = assign(dist[np.ix_(aim, pred_cells)] ** 2)  # every prey gets one predator (prey <= predators)
        target = {preds[c]: aim[r] for r, c in enumerate(cols)}
        for p, cell in zip(preds, pred_cells, strict=True):
            target.setdefault(p, min(aim, key=lambda a, cell=cell: dist[cell, a]))
        # Ties go to the move that leaves the prey the fewest cells it reaches first: that corners it.
        prefs = {}
        for p in preds:
            moves = b.legal_moves(self.pos[p])
            cells = [b.step(self.pos[p], m) for m in moves]
            rooms = (b.dist_free[target[p]] < b.dist_free[cells]).sum(axis=1).tolist()
            gaps = dist[cells, target[p]].tolist()
            options = sorted(zip(gaps, rooms, range(len(moves)), moves, cells, strict=True))
            prefs[p] = [(m, c) for *_, m, c in options]
        return {**plan, **plan_moves(preds, {p: self.pos[p] for p in preds}, prefs)}

    def _agent_state(self, agent: str) -> str:
        if self.board is None:
            return ""
        where = self.board.token(self.pos[agent]) if agent in self.pos else "-"
        return f"team={self.team_of(agent)} pos={where}"

    def _global_state(self) -> str:
        caught = " ".join(f"{q}@{t}" for q, t in self.caught.items()) or "none"
        return f"{super()._global_state()} caught={caught}"
