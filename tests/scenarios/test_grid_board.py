"""The shared grid module: board distances, matching, move parsing, collision resolution and planning."""

import itertools

import numpy as np
import pytest

from scenarios.grid.board import CELL_TOKENS, Board, assign, random_board
from scenarios.grid.moves import move_text, parse_move, plan_moves, resolve_moves


def test_board_tokens_steps_and_distances():
    b = Board(4, frozenset({5}))  # wall at c11
    assert b.token(0) == "c00" and b.token(15) == "c33" and set(map(b.token, range(16))) <= set(CELL_TOKENS)
    assert b.step(0, "up") is None and b.step(1, "down") is None and b.step(0, "right") == 1
    assert b.legal_moves(0) == ("down", "right", "stay")
    assert b.dist[4, 6] == 4 and b.dist[0, 15] == 6 and b.connected()
    assert not Board(3, frozenset({1, 3})).connected()  # c00 cut off
    with pytest.raises(ValueError, match="board size"):
        Board(9)


def test_random_board_is_connected_and_seeded():
    for seed in range(30):
        a = random_board(7, 5, np.random.default_rng(seed))
        assert a.connected() and len(a.walls) == 5
        assert a.walls == random_board(7, 5, np.random.default_rng(seed)).walls


def test_assign_is_optimal():
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, m = int(rng.integers(1, 6)), int(rng.integers(0, 3))
        cost = rng.integers(0, 20, size=(n, n + m))
        cols = assign(cost)
        assert len(set(cols)) == n
        best = min(sum(cost[i, p[i]] for i in range(n)) for p in itertools.permutations(range(n + m), n))
        assert sum(cost[i, c] for i, c in enumerate(cols)) == best
    with pytest.raises(ValueError, match="rows <= columns"):
        assign(np.zeros((3, 2)))


def test_parse_move():
    legal = ("down", "right", "stay")
    assert parse_move('{"move": "down"}', legal, "c00", 512) == ("down", None)
    assert parse_move(move_text("stay"), legal, "c00", 512) == ("stay", None)
    for bad in (None, 7, "", "x", "[]", '{"move": "up"}', '{"move": 1}', '{"move": "down", "msg": "x"}',
                "{" * 1000, '{"move": "\u00e9"}', "[" * 5000 + "]" * 5000):
        move, reason = parse_move(bad, legal, "c00", 512)
        assert move is None and reason
    assert "c00" in parse_move('{"move": "up"}', legal, "c00", 512)[1]


def test_resolve_moves_never_shares_a_cell():
    rng = np.random.default_rng(1)
    b = Board(4)
    for _ in range(500):
        cells = rng.choice(16, size=int(rng.integers(2, 8)), replace=False)
        pos = {f"a{i}": int(c) for i, c in enumerate(cells)}
        want = {}
        for a, c in pos.items():
            legal = b.legal_moves(c)
            want[a] = b.step(c, legal[int(rng.integers(len(legal)))])
        final, bumped = resolve_moves(pos, want)
        assert len(set(final.values())) == len(final)
        for a in pos:
            assert final[a] == (pos[a] if a in bumped else want[a])
            if a in bumped:
                assert want[a] != pos[a]
        swaps = [(a, c) for a in pos for c in pos if a < c and final[a] == pos[c] and final[c] == pos[a]]
        assert not swaps


def test_resolve_allows_rotation_and_chains():
    pos = {"a": 0, "b": 1, "c": 5, "d": 4}  # a 2x2 block on a 4x4 board, rotating clockwise
    final, bumped = resolve_moves(pos, {"a": 1, "b": 5, "c": 4, "d": 0})
    assert not bumped and final == {"a": 1, "b": 5, "c": 4, "d": 0}
    final, bumped = resolve_moves({"a": 0, "b": 1, "c": 2}, {"a": 1, "b": 2, "c": 2})
    assert bumped == {"a", "b"}  # c stays, so b is blocked, so a is blocked


def test_plan_moves_is_collision_free():
    rng = np.random.default_rng(2)
    b = Board(5)
    for _ in range(300):
        cells = rng.choice(25, size=int(rng.integers(2, 9)), replace=False)
        pos = {f"a{i}": int(c) for i, c in enumerate(cells)}
        prefs = {}
        for a, c in pos.items():
            moves = list(b.legal_moves(c))
            rng.shuffle(moves)
            prefs[a] = [(m, b.step(c, m)) for m in moves]
        plan = plan_moves(sorted(pos), pos, prefs)
        want = {a: b.step(pos[a], plan[a]) for a in pos}
        _, bumped = resolve_moves(pos, want)
        assert not bumped
