"""Moves, rules and scripted opponent styles of the repeated game, usable as policies anywhere.

A move set is a tuple of move names in rule order: ``MOVES3`` (rock, paper, scissors) or
``MOVES5`` (adds spock and lizard). Move ``i`` beats move ``j`` when ``(i - j) mod n`` is odd, so
each move beats the one before it (and, with five moves, also the one two after it).

A style is an object with ``name``, ``moves`` and ``act(history) -> move``. ``history`` is the
list of ``(own move, opponent move)`` pairs of the rounds played so far, seen from the style's
side; rounds in which a side made no valid move are not in it. Build one with
``make_style(name, rng, moves)``; all randomness comes from ``rng`` (drawn at construction and,
for noisy styles, once per ``act``), so a style is deterministic given its generator and
picklable.

**Rules.** Each style declares in ``rules`` the rules it plays by, from this list (the
opponent is the other side; "shifted by k" is ``shift``):

- ``constant``: one move all match.
- ``step_cycle``: its own last move shifted by a fixed nonzero step (a step-1 shift is the
  move that beats its own last).
- ``copy_opp_lag1``: the opponent's last move.
- ``copy_opp_lag2``: the opponent's move of two rounds ago.
- ``copy_opp_lag3``: the opponent's move of three rounds ago.
- ``beat_opp_last``: the move that beats the opponent's last move.
- ``lose_to_opp_last``: the move that loses to the opponent's last move (the one before it in
  rule order).
- ``beat_opp_most_frequent``: the move that beats the opponent's most frequent move so far.
- ``beat_opp_least_frequent``: the move that beats the opponent's least frequent move so far.
- ``repeat_own_on_win``: after a won round, its own last move again.
- ``sequence_period2`` / ``sequence_period3`` / ``sequence_period4`` / ``sequence_period5``: a
  fixed sequence of two / three / four / five moves, repeated, that is neither constant nor a
  fixed-step cycle.
- ``uniform_noise``: sometimes a uniformly random move instead.
- ``uniform_random``: a uniformly random move every round.

Every style but the sequences opens with a random move drawn at construction and plays it
while its rule lacks the history it needs; that opening is not counted as a rule.

``TRAIN_STYLES`` and ``HELDOUT_STYLES`` are disjoint, and so are the rules they use
(``rules_of``): no held-out style plays by a rule a training style plays by. A response learned
against training styles can still happen to beat a held-out one (with three moves, playing the
move two after one's own last beats beat_last and copy_lag2 alike), so compare held-out results
with such fixed responses. Held-out styles are for evaluation only. ``PROBE_STYLES`` (``uniform``)
are in neither set: a policy is measured against them (option ``styles`` of the scenario) to see
whether exploiting others left it exploitable.

It leaves out the environment loop (``env.py``) and the scripted expert (``expert.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
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


def least_frequent(seq: Sequence[str], moves: Sequence[str]) -> str:
    """The least frequent move of ``moves`` in ``seq`` (never played counts as 0); ties go to the one
    played least recently, and among moves never played to the first in rule order."""
    last = {m: i for i, m in enumerate(seq)}
    return min(moves, key=lambda m: (seq.count(m), last.get(m, -1), moves.index(m)))


class Style:
    """A scripted opponent: ``act(history)`` returns its next move (see the module docstring)."""

    name: ClassVar[str] = "style"
    rules: ClassVar[frozenset[str]] = frozenset()  # the rules it plays by (see the module docstring)

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
    rules = frozenset({"constant"})

    def act(self, history: History) -> str:
        return self.opening


class Cycle(Style):
    """Walks the move list with a fixed step (e.g. rock, paper, scissors, rock, ...)."""

    name = "cycle"
    rules = frozenset({"step_cycle"})

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        self.step = int(rng.integers(1, len(self.moves)))

    def act(self, history: History) -> str:
        return shift(self.opening, self.step * len(history), self.moves)


class Copy(Style):
    """Copies the opponent's last move."""

    name = "copy"
    rules = frozenset({"copy_opp_lag1"})

    def act(self, history: History) -> str:
        return history[-1][1] if history else self.opening


class BeatLast(Style):
    """Plays the move that beats the opponent's last move."""

    name = "beat_last"
    rules = frozenset({"beat_opp_last"})

    def act(self, history: History) -> str:
        return counter(history[-1][1], self.moves) if history else self.opening


class Frequency(Style):
    """Plays the move that beats the opponent's most frequent move so far."""

    name = "frequency"
    rules = frozenset({"beat_opp_most_frequent"})

    def act(self, history: History) -> str:
        top = most_frequent([theirs for _, theirs in history])
        return counter(top, self.moves) if top is not None else self.opening


class WinStay(Style):
    """Win-stay, lose-shift: repeats a winning move, otherwise plays what beats the opponent's last."""

    name = "win_stay"
    rules = frozenset({"repeat_own_on_win", "beat_opp_last"})

    def act(self, history: History) -> str:
        if not history:
            return self.opening
        mine, theirs = history[-1]
        return mine if outcome(mine, theirs, self.moves) > 0 else self.after_loss(mine, theirs)

    def after_loss(self, mine: str, theirs: str) -> str:
        """The move after a lost or drawn round (the variants differ only here)."""
        return counter(theirs, self.moves)


class Pattern(Style):
    """Repeats a random sequence of three moves that is neither constant nor a fixed-step cycle."""

    name = "pattern"
    rules = frozenset({"sequence_period3"})

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


class CopyLag2(Style):
    """Copies the opponent's move of two rounds ago."""

    name = "copy_lag2"
    rules = frozenset({"copy_opp_lag2"})
    lag: ClassVar[int] = 2

    def act(self, history: History) -> str:
        return history[-self.lag][1] if len(history) >= self.lag else self.opening


class LoseToLast(Style):
    """Plays the move that loses to the opponent's last move (the one before it in rule order)."""

    name = "lose_to_last"
    rules = frozenset({"lose_to_opp_last"})

    def act(self, history: History) -> str:
        return shift(history[-1][1], -1, self.moves) if history else self.opening


class BeatLeastFrequent(Style):
    """Plays the move that beats the opponent's least frequent move so far (see ``least_frequent``)."""

    name = "beat_least_frequent"
    rules = frozenset({"beat_opp_least_frequent"})

    def act(self, history: History) -> str:
        if not history:
            return self.opening
        return counter(least_frequent([theirs for _, theirs in history], self.moves), self.moves)


class WinStayLoseNext(WinStay):
    """Win-stay, lose-shift: repeats a winning move, otherwise its own last shifted by one (the next in rule order)."""

    name = "win_stay_lose_next"
    rules = frozenset({"repeat_own_on_win", "step_cycle"})

    def after_loss(self, mine: str, theirs: str) -> str:
        return shift(mine, 1, self.moves)


class WinStayLoseCopy(WinStay):
    """Win-stay, lose-shift: repeats a winning move, otherwise copies the opponent's last move."""

    name = "win_stay_lose_copy"
    rules = frozenset({"repeat_own_on_win", "copy_opp_lag1"})

    def after_loss(self, mine: str, theirs: str) -> str:
        return theirs


class Pattern4(Style):
    """Repeats a random sequence of four moves with period four in which no three rounds in a row are
    constant or a fixed-step cycle."""

    name = "pattern4"
    rules = frozenset({"sequence_period4"})

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        n = len(self.moves)
        while True:
            idx = [int(i) for i in rng.integers(n, size=4)]
            steps = [(idx[(i + 1) % 4] - idx[i]) % n for i in range(4)]
            if idx[:2] != idx[2:] and all(steps[i] != steps[(i + 1) % 4] for i in range(4)):
                break
        self.sequence = tuple(self.moves[i] for i in idx)

    def act(self, history: History) -> str:
        return self.sequence[len(history) % 4]


class Pattern2(Style):
    """Alternates between two different moves."""

    name = "pattern2"
    rules = frozenset({"sequence_period2"})

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        other = shift(self.opening, int(rng.integers(1, len(self.moves))), self.moves)
        self.sequence = (self.opening, other)

    def act(self, history: History) -> str:
        return self.sequence[len(history) % 2]


class Pattern5(Style):
    """Repeats a random sequence of five moves in which no three rounds in a row are constant or a fixed-step
    cycle (so no stretch of it looks like a shorter rule)."""

    name = "pattern5"
    rules = frozenset({"sequence_period5"})

    def __init__(self, moves: Sequence[str], rng: np.random.Generator):
        super().__init__(moves, rng)
        n = len(self.moves)
        while True:
            idx = [int(i) for i in rng.integers(n, size=5)]
            steps = [(idx[(i + 1) % 5] - idx[i]) % n for i in range(5)]
            if all(steps[i] != steps[(i + 1) % 5] for i in range(5)):
                break
        self.sequence = tuple(self.moves[i] for i in idx)

    def act(self, history: History) -> str:
        return self.sequence[len(history) % 5]


class CopyLag3(CopyLag2):
    """Copies the opponent's move of three rounds ago."""

    name = "copy_lag3"
    rules = frozenset({"copy_opp_lag3"})
    lag = 3


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
    rules = BeatLast.rules | {"uniform_noise"}


class Uniform(Style):
    """A uniformly random move every round: nothing to predict, so playing it tells whether a policy that
    exploits others has become exploitable itself (against it every policy's expected return is 0)."""

    name = "uniform"
    rules = frozenset({"uniform_random"})

    def act(self, history: History) -> str:
        return self._random()


_CLASSES: tuple[type[Style], ...] = (
    Fixed, Cycle, Copy, BeatLast, Frequency, NoisyBeatLast, WinStay, WinStayLoseNext, WinStayLoseCopy, LoseToLast,
    Pattern, Pattern4, CopyLag2, BeatLeastFrequent, Uniform, Pattern2, Pattern5, CopyLag3,
)
STYLES: dict[str, type[Style]] = {c.name: c for c in _CLASSES}
TRAIN_STYLES = ("fixed", "cycle", "copy", "beat_last", "frequency", "noisy_beat_last", "win_stay",
                "win_stay_lose_next", "win_stay_lose_copy", "lose_to_last", "pattern2", "pattern5", "copy_lag3")
HELDOUT_STYLES = ("pattern", "pattern4", "copy_lag2", "beat_least_frequent")
PROBE_STYLES = ("uniform",)
"""Styles to measure a policy against, never trained against and not a rule to model (option ``styles``)."""


def rules_of(names: Sequence[str]) -> frozenset[str]:
    """The union of the rules of styles ``names``."""
    return frozenset().union(*(STYLES[n].rules for n in names))


assert set(TRAIN_STYLES) | set(HELDOUT_STYLES) | set(PROBE_STYLES) == set(STYLES)
assert len(TRAIN_STYLES) + len(HELDOUT_STYLES) + len(PROBE_STYLES) == len(STYLES)
assert all(c.rules for c in _CLASSES) and not rules_of(TRAIN_STYLES) & rules_of(HELDOUT_STYLES)


def make_style(name: str, rng: np.random.Generator, moves: Sequence[str] = MOVES3) -> Style:
    """A fresh style ``name`` over ``moves``, drawing its randomness from ``rng``."""
    if name not in STYLES:
        raise ValueError(f"unknown style {name!r}; styles: {sorted(STYLES)}")
    if tuple(moves) not in (MOVES3, MOVES5):
        raise ValueError(f"moves must be MOVES3 or MOVES5, got {moves!r}")
    return STYLES[name](moves, rng)
