"""Moves, rules and scripted opponent styles of the repeated game, usable as policies anywhere.

A move set is a tuple of move names in rule order: ``MOVES3`` (rock, paper, scissors) or
``MOVES5`` (adds spock and lizard). Move ``i`` beats move ``j`` when ``(i - j) mod n`` is odd, so
each move beats the one before it (and, with five moves, also the one two after it).

A style is an object with ``name``, ``moves`` and ``act(history) -> move``. ``history`` is the
list of ``(own move, opponent move)`` pairs of the rounds played so far, seen from the style's
side; rounds in which a side made no valid move are not in it. Build one with
``make_style(name, rng, moves)``; all randomness comes from ``rng`` (drawn at construction and,
for noisy styles, once per ``act``), so a style is deterministic given its generator and
picklable. ``TRAIN_STYLES`` and ``HELDOUT_STYLES`` are disjoint: held-out styles are for
evaluation only.

It leaves out the environment loop (``env.py``) and the scripted expert (``expert.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import ClassVar

import numpy as np

MOVES3 = ("rock", "paper", "scissors")
MOVES5 = ("rock", "paper", "scissors", "spock", "lizard")
History = Sequence[tuple[str, str]]


def outcome(mine: str | None, theirs: str | None, moves: Sequence[str]) -> int:
    """+1 if ``mine`` beats ``theirs``, -1 if it loses, 0 for a draw; ``None`` (no valid move) loses to any move."""
    if mine is None or theirs is None:
        return (mine is not None) - (theirs is not None)
    diff = (moves.index(mine) - moves.index(theirs)) % len(moves)
    return 0 if diff == 0 else (1 if diff % 2 else -1)


def shift(move: str, k: int, moves: Sequence[str]) -> str:
    """The move ``k`` places after ``move`` in rule order (cyclically)."""
    return moves[(moves.index(move) + k) % len(moves)]


def counter(move: str, moves: Sequence[str]) -> str:
    """The move that beats ``move`` (the next one in rule order)."""
    return shift(move, 1, moves)


def most_frequent(seq: Sequence[str]) -> str | None:
    """The most frequent move of ``seq``; ties go to the one played most recently (``None`` if empty)."""
    best, best_key = None, (-1, -1)
    for move in set(seq):
        key = (seq.count(move), max(i for i, m in enumerate(seq) if m == move))
        if key > best_key:
            best, best_key = move, key
    return best


class Style:
    """A scripted opponent: ``act(history)`` returns its next move (see the module docstring)."""

    name: ClassVar[str] = "style"

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        self.moves = tuple(moves)
        self.rng = rng
        self.opening = self._random()  # drawn at construction so act() uses the generator only for noise

    def _random(self) -> str:
        return self.moves[int(self.rng.integers(len(self.moves)))]

    def act(self, history: History) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class Fixed(Style):
    """Always the same move."""

    name = "fixed"

    def act(self, history: History) -> str:
        return self.opening


class Cycle(Style):
    """Walks the move list with a fixed step (e.g. rock, paper, scissors, rock, ...)."""

    name = "cycle"

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        self.step = int(rng.integers(1, len(self.moves)))

    def act(self, history: History) -> str:
        return shift(self.opening, self.step * len(history), self.moves)


class Copy(Style):
    """Copies the opponent's last move."""

    name = "copy"

    def act(self, history: History) -> str:
        return history[-1][1] if history else self.opening


class BeatLast(Style):
    """Plays the move that beats the opponent's last move."""

    name = "beat_last"

    def act(self, history: History) -> str:
        return counter(history[-1][1], self.moves) if history else self.opening


class Frequency(Style):
    """Plays the move that beats the opponent's most frequent move so far."""

    name = "frequency"

    def act(self, history: History) -> str:
        top = most_frequent([theirs for _, theirs in history])
        return counter(top, self.moves) if top is not None else self.opening


class WinStay(Style):
    """Win-stay, lose-shift: repeats a winning move, otherwise plays what beats the opponent's last."""

    name = "win_stay"

    def act(self, history: History) -> str:
        if not history:
            return self.opening
        mine, theirs = history[-1]
        return mine if outcome(mine, theirs, self.moves) > 0 else counter(theirs, self.moves)


class Pattern(Style):
    """Repeats a random sequence of three moves that is neither constant nor a fixed-step cycle."""

    name = "pattern"

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        n = len(self.moves)
        while True:
            idx = [int(i) for i in rng.integers(n, size=3)]
            if (idx[1] - idx[0]) % n != (idx[2] - idx[1]) % n:  # else it would be fixed or a cycle
                break
        self.sequence = tuple(self.moves[i] for i in idx)

    def act(self, history: History) -> str:
        return self.sequence[len(history) % 3]


class Noisy(Style):
    """Another style whose move is replaced by a uniformly random one with probability ``eps``."""

    base_cls: ClassVar[type[Style]] = BeatLast
    eps: ClassVar[float] = 0.3

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        self.base = self.base_cls(moves, rng)

    def act(self, history: History) -> str:
        move = self.base.act(history)
        return self._random() if self.rng.random() < self.eps else move


class NoisyBeatLast(Noisy):
    """``beat_last`` with 30% uniform noise."""

    name = "noisy_beat_last"


_CLASSES: tuple[type[Style], ...] = (Fixed, Cycle, Copy, BeatLast, Frequency, NoisyBeatLast, WinStay, Pattern)
STYLES: dict[str, Callable[[Sequence[str], np.random.Generator], Style]] = {c.name: c for c in _CLASSES}
TRAIN_STYLES = ("fixed", "cycle", "copy", "beat_last", "frequency", "noisy_beat_last")
HELDOUT_STYLES = ("win_stay", "pattern")
assert set(TRAIN_STYLES) | set(HELDOUT_STYLES) == set(STYLES) and not set(TRAIN_STYLES) & set(HELDOUT_STYLES)


def make_style(name: str, rng: np.random.Generator, moves: Sequence[str] = MOVES3) -> Style:
    """A fresh style ``name`` over ``moves``, drawing its randomness from ``rng``."""
    if name not in STYLES:
        raise ValueError(f"unknown style {name!r}; styles: {sorted(STYLES)}")
    if tuple(moves) not in (MOVES3, MOVES5):
        raise ValueError(f"moves must be MOVES3 or MOVES5, got {moves!r}")
    return STYLES[name](moves, rng)
