"""What the grid scenarios share: options, difficulty levels, move parsing, grammar, expert caching, state.

``GridScenario`` is a ``TextScenario`` whose agents stand on a ``Board`` (``self.pos``: live
agent -> cell) and act with ``{"move": ...}``. Subclasses draw the layout, resolve the joint
move and plan the scripted expert's joint move (``_expert_plan``), which is computed once per
board position and shared by every agent's ``expert_action``.

Both grid scenarios classify actions by move (``action_classes()``: up, down, left, right, stay;
``action_class`` reads the move of a well-formed action, legal from the agent's cell or not) and
show the turn budget (``turn_budget_visible`` is True: every observation ends with ``turn k of K``, so
running out of moves is an outcome of the task, terminal).

Option ``view`` makes the scenarios partially observable: an agent sees other agents (and, where a
scenario says so, other things on the board) only within that many cells in both directions (a
square of side ``2 * view + 1`` around it). Its observation then stays the same length however large
the team, which is what lets a team of 16 read as little per turn as a team of 2. The scripted
experts still see the whole board (the centralized critic's ``state()`` does too).

It leaves out rewards, observations and the rules of each task (``navigation.py``,
``predator_prey.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from scenarios.base import ScenarioOptions, TextScenario
from scenarios.grammar import ActionGrammar, Slot
from scenarios.grid.board import CELL_TOKENS, MOVES, Board
from scenarios.grid.moves import move_text, parse_move

SPLITS = ("train", "basic", "hard")
MAX_AGENTS = 16


@dataclass(frozen=True)
class GridOptions(ScenarioOptions):
    """Options of the grid scenarios (on top of split and reward_weights)."""

    max_turns: int = 20
    """Moves an agent may make before its episode is truncated with reason ``max_turns``."""
    train_hard_frac: float = 0.5
    """Share of ``hard`` episodes in the ``train`` split (the rest are ``basic``)."""
    view: int | None = None
    """Cells an agent sees in each direction (a square around it); None: the whole board."""

    def __post_init__(self) -> None:
        f = self.train_hard_frac
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0.0 <= f <= 1.0:
            raise ValueError(f"train_hard_frac must be a number in [0, 1], got {f!r}")
        v = self.view
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"view must be a whole number of cells >= 1, or null for the whole board, got {v!r}")


class GridScenario(TextScenario):
    """Shared machinery of the grid scenarios (see the module docstring)."""

    splits = SPLITS
    options_cls = GridOptions
    extra_entities: ClassVar[tuple[str, ...]] = ()
    turn_budget_visible = True  # "turn k of K" ends each observation

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        self.board: Board | None = None
        self.level = ""
        self.pos: dict[str, int] = {}
        self._plan_key: tuple | None = None
        self._plan: dict[str, str] = {}

    def _draw_level(self, rng: np.random.Generator, split: str) -> str:
        """``basic`` or ``hard``; the ``train`` split mixes them by ``train_hard_frac``."""
        if split != "train":
            return split
        return "hard" if rng.random() < self.opts.train_hard_frac else "basic"

    def _parse(self, agent: str, action: Any) -> tuple[str | None, str | None]:
        cell = self.pos[agent]
        return parse_move(action, self.board.legal_moves(cell), self.board.token(cell), self.max_action_length)

    def _wanted_cells(self, actions: dict[str, Any]) -> tuple[dict[str, int], dict[str, str]]:
        """Each agent's target cell for its move (a malformed move stays put) and the error reasons."""
        errors: dict[str, str] = {}
        want: dict[str, int] = {}
        for agent, action in actions.items():
            move, reason = self._parse(agent, action)
            if move is None:
                errors[agent], move = reason, "stay"
            want[agent] = self.board.step(self.pos[agent], move)
        return want, errors

    def _occupied_tokens(self, agents: list[str], viewer: str | None = None) -> str:
        """``agent cell`` pairs of the agents on the board, only those ``viewer`` sees when given."""
        return " ".join(f"{a} {self.board.token(self.pos[a])}" for a in agents
                        if a in self.pos and (viewer is None or self._sees(viewer, self.pos[a])))

    def _sees(self, agent: str, cell: int) -> bool:
        """Whether ``cell`` is within ``agent``'s view (always, without option ``view``)."""
        if self.opts.view is None:
            return True
        (r, c), (r0, c0) = divmod(cell, self.board.size), divmod(self.pos[agent], self.board.size)
        return max(abs(r - r0), abs(c - c0)) <= self.opts.view

    # ----- scenario extras -----
    def action_grammar(self, agent: str) -> ActionGrammar:
        if agent not in self.agents or agent not in self.pos:
            return ActionGrammar(())
        legal = self.board.legal_moves(self.pos[agent])
        return ActionGrammar((('{"move": "', Slot("move", legal), '"}'),))

    def action_classes(self) -> tuple[str, ...]:
        return MOVES

    def action_class(self, agent: str, action: object) -> str | None:
        return parse_move(action, MOVES, "", self.max_action_length)[0]

    def entity_vocabulary(self) -> list[str]:
        agents = tuple(f"agent_{i}" for i in range(MAX_AGENTS))
        return sorted({*CELL_TOKENS, *MOVES, *agents, *self.extra_entities})

    def expert_action(self, agent: str) -> str:
        if agent not in self.agents or agent not in self.pos:
            return move_text("stay")
        key = tuple(sorted(self.pos.items()))
        if key != self._plan_key:
            self._plan_key, self._plan = key, self._expert_plan()
        return move_text(self._plan.get(agent, "stay"))

    def _expert_plan(self) -> dict[str, str]:
        """The scripted expert's move for every live agent in the current position."""
        raise NotImplementedError

    def state(self) -> str:
        text = super().state()
        if self.board is None:
            return text
        return self._clean(f"{text}\n{self._global_state()}", self.state_space.max_length)

    def _global_state(self) -> str:
        b = self.board
        walls = b.tokens(sorted(b.walls)) or "none"
        return f"level={self.level} grid={b.size}x{b.size} walls={walls}"
