"""The scripted expert of the repeated game: predict the opponent with simple rules, play the counter.

It does not know the opponent's style. It keeps a family of generic predictors of the
opponent's next move (its last move shifted by k, my last move shifted by k, either side's most
frequent move shifted by k, my least frequent move shifted by k, its move two, three, four or
five rounds ago, my move two or three rounds ago), scores each on the rounds played
so far with exponentially decaying weights (recent rounds count more, so noise and switches
are forgiven), and plays the move that beats the best predictor's guess. With no history it
plays ``opening``.

It leaves out the game loop (``env.py``) and the opponent styles (``styles.py``).
"""

from __future__ import annotations

from collections.abc import Sequence

from scenarios.repeated_game.styles import History, counter

DECAY = 0.8


def _predictions(mine: Sequence[int], theirs: Sequence[int], n: int,
                 freq_mine: Sequence[int], freq_theirs: Sequence[int]) -> list[int | None]:
    """Every predictor's guess of the opponent's next move index, in a fixed order."""
    guesses: list[int | None] = []
    for ref in (theirs[-1], mine[-1], _top(freq_theirs), _top(freq_mine)):
        guesses.extend((ref + k) % n for k in range(n))
    for lag in (2, 3):
        guesses.append(theirs[-lag] if len(theirs) >= lag else None)
    # Added later and kept last, so ties still go to the predictors above.
    guesses.append(mine[-2] if len(mine) >= 2 else None)
    ref = _bottom(freq_mine)
    guesses.extend((ref + k) % n for k in range(n))
    guesses.append(theirs[-4] if len(theirs) >= 4 else None)
    guesses.append(mine[-3] if len(mine) >= 3 else None)
    guesses.append(theirs[-5] if len(theirs) >= 5 else None)
    return guesses


def _top(freq: Sequence[int]) -> int:
    # freq holds (count, last index) keys encoded as count * 1000 + last index: max is the tie-broken top
    return max(range(len(freq)), key=freq.__getitem__)


def _bottom(freq: Sequence[int]) -> int:
    # The least frequent move (0 if never played); ties go to the first in rule order.
    return min(range(len(freq)), key=freq.__getitem__)


def expert_move(history: History, moves: Sequence[str], opening: str) -> str:
    """The expert's next move given ``history`` of (own, opponent) moves from its side."""
    if not history:
        return opening
    n = len(moves)
    index = {m: i for i, m in enumerate(moves)}
    mine = [index[a] for a, _ in history]
    theirs = [index[b] for _, b in history]
    freq_mine, freq_theirs = [0] * n, [0] * n
    scores: list[float] | None = None
    for t in range(len(history)):
        if t > 0:
            guesses = _predictions(mine[:t], theirs[:t], n, freq_mine, freq_theirs)
            if scores is None:
                scores = [0.0] * len(guesses)
            scores = [s * DECAY + (g == theirs[t]) for s, g in zip(scores, guesses, strict=True)]
        # Key = count * 1000 + last index, so the most frequent move wins and ties go to the most recent.
        freq_mine[mine[t]] = (freq_mine[mine[t]] // 1000 + 1) * 1000 + t
        freq_theirs[theirs[t]] = (freq_theirs[theirs[t]] // 1000 + 1) * 1000 + t
    guesses = _predictions(mine, theirs, n, freq_mine, freq_theirs)
    scores = scores or [0.0] * len(guesses)
    best = max((i for i, g in enumerate(guesses) if g is not None), key=lambda i: (scores[i], -i))
    return counter(moves[guesses[best]], moves)
