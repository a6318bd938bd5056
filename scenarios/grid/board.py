"""The shared square grid of the grid scenarios: cell tokens, walls, moves and shortest-path distances.

A cell is an index ``row * size + col``; agents read and write it as one entity token
``c<row><col>`` (``c00`` is the top-left corner, ``up`` decreases the row). Rows and columns
are single digits, so a board is at most ``MAX_SIZE`` x ``MAX_SIZE`` and every cell token of
every board is in ``CELL_TOKENS``.

It leaves out agents, rewards and text parsing (``moves.py``, the scenario modules).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MAX_SIZE = 8
MOVES: tuple[str, ...] = ("up", "down", "left", "right", "stay")
DELTAS: dict[str, tuple[int, int]] = {"up": (-1, 0), "down": (1, 0), "left": (0, -1), "right": (0, 1), "stay": (0, 0)}
CELL_TOKENS: tuple[str, ...] = tuple(f"c{r}{c}" for r in range(MAX_SIZE) for c in range(MAX_SIZE))
_FAR = 10_000  # distance to an unreachable cell: larger than any path on a board


@dataclass(eq=False)  # numpy fields: comparing boards field by field would be ambiguous
class Board:
    """A ``size`` x ``size`` grid with wall cells and all-pairs shortest-path distances.

    ``dist[a, b]`` is the shortest-path length (walls block; unreachable: a large number);
    ``free`` holds the free cells and ``dist_free`` the columns of ``dist`` for them.
    """

    size: int
    walls: frozenset[int] = frozenset()
    dist: np.ndarray = field(init=False, repr=False)
    _next: list[dict[str, int]] = field(init=False, repr=False)  # cell -> legal move -> cell
    free: np.ndarray = field(init=False, repr=False)
    dist_free: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 2 <= self.size <= MAX_SIZE:
            raise ValueError(f"board size must be in [2, {MAX_SIZE}] (cell tokens hold one digit each), got {self.size}")
        self.dist = distances(self.size, self.walls)
        self.free = np.array(self.free_cells(), dtype=np.int64)
        self.dist_free = self.dist[:, self.free]  # distances to free cells only
        # Experts ask for moves hundreds of times a turn: a table beats recomputing them.
        self._next = [{m: c for m in MOVES if (c := self._target(cell, m)) is not None}
                      for cell in range(self.n_cells)]

    @property
    def n_cells(self) -> int:
        return self.size * self.size

    def token(self, cell: int) -> str:
        r, c = divmod(cell, self.size)
        return f"c{r}{c}"

    def tokens(self, cells: list[int] | tuple[int, ...]) -> str:
        return " ".join(self.token(c) for c in cells)

    def free_cells(self) -> list[int]:
        return [c for c in range(self.n_cells) if c not in self.walls]

    def step(self, cell: int, move: str) -> int | None:
        """The cell ``move`` leads to from ``cell``, or None when it leaves the board or hits a wall."""
        return self._next[cell].get(move)

    def legal_moves(self, cell: int) -> tuple[str, ...]:
        """Moves that stay on the board and off walls, in ``MOVES`` order (``stay`` always last)."""
        return tuple(self._next[cell])

    def _target(self, cell: int, move: str) -> int | None:
        dr, dc = DELTAS[move]
        r, c = divmod(cell, self.size)
        r, c = r + dr, c + dc
        if not (0 <= r < self.size and 0 <= c < self.size):
            return None
        nxt = r * self.size + c
        return None if nxt in self.walls else nxt

    def connected(self) -> bool:
        free = self.free_cells()
        return bool(free) and bool((self.dist[free[0], free] < _FAR).all())


def distances(size: int, walls: frozenset[int]) -> np.ndarray:
    # Floyd-Warshall on at most 64 cells, vectorized over whole rows.
    n = size * size
    dist = np.full((n, n), _FAR, dtype=np.int64)
    np.fill_diagonal(dist, 0)
    for cell in range(n):
        if cell in walls:
            continue
        r, c = divmod(cell, size)
        for dr, dc in ((1, 0), (0, 1)):
            rr, cc = r + dr, c + dc
            if rr < size and cc < size and rr * size + cc not in walls:
                dist[cell, rr * size + cc] = dist[rr * size + cc, cell] = 1
    for k in range(n):
        dist = np.minimum(dist, dist[:, k, None] + dist[None, k, :])
    return dist


def random_board(size: int, n_walls: int, rng: np.random.Generator) -> Board:
    """A board with ``n_walls`` walls placed so that every free cell stays reachable."""
    for _ in range(100):
        walls = frozenset(int(c) for c in rng.choice(size * size, size=n_walls, replace=False))
        board = Board(size, walls)
        if board.connected():
            return board
    return Board(size)  # practically unreachable for the wall counts the scenarios use


def assign(cost: np.ndarray) -> list[int]:
    """Minimum-cost perfect matching of rows to columns (Hungarian method; rows <= columns).

    Returns the column of each row. Deterministic: equal-cost optima resolve the same way every time.
    """
    n, m = cost.shape
    if n > m:
        raise ValueError(f"assign needs rows <= columns, got a {n}x{m} cost matrix")
    inf = float("inf")
    u, v = [0.0] * (n + 1), [0.0] * (m + 1)
    match = [0] * (m + 1)  # match[j]: the row (1-based) holding column j
    way = [0] * (m + 1)
    c = cost.tolist()
    for i in range(1, n + 1):
        match[0], j0 = i, 0
        minv, used = [inf] * (m + 1), [False] * (m + 1)
        while match[j0]:
            used[j0] = True
            i0, delta, j1 = match[j0], inf, 0
            for j in range(1, m + 1):
                if not used[j]:
                    cur = c[i0 - 1][j - 1] - u[i0] - v[j]
                    if cur < minv[j]:
                        minv[j], way[j] = cur, j0
                    if minv[j] < delta:
                        delta, j1 = minv[j], j
            for j in range(m + 1):
                if used[j]:
                    u[match[j]] += delta
                    v[j] -= delta
                else:
                    minv[j] -= delta
            j0 = j1
        while j0:
            j1 = way[j0]
            match[j0] = match[j1]
            j0 = j1
    out = [0] * n
    for j in range(1, m + 1):
        if match[j]:
            out[match[j] - 1] = j - 1
    return out
