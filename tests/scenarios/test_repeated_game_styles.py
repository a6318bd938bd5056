"""Scripted styles of the repeated game: each rule's behaviour, the split's disjoint rules, the expert against each style."""

import pickle

import numpy as np
import pytest

from scenarios.repeated_game import HELDOUT_STYLES, STYLES, TRAIN_STYLES, make_style
from scenarios.repeated_game import styles as styles_module
from scenarios.repeated_game.expert import expert_move
from scenarios.repeated_game.styles import (
    MOVES3,
    MOVES5,
    counter,
    least_frequent,
    most_frequent,
    outcome,
    rules_of,
)

# Measured over these 60 matches: every style not listed here is beaten in every match, with three or five moves.
STYLE_FLOORS = {"noisy_beat_last": 0.7, "pattern": 0.85, "pattern4": 0.5, "pattern5": 0.15}  # measured 0.9/0.88, 0.95/0.92, 0.63/0.77, 0.22/0.53


@pytest.mark.parametrize("moves", [MOVES3, MOVES5])
def test_expert_against_each_style(moves):
    for name in (*TRAIN_STYLES, *HELDOUT_STYLES):
        wins = []
        for seed in range(60):
            style = make_style(name, np.random.default_rng(seed), moves)
            history, score = [], 0
            for _ in range(10):
                mine = expert_move(history, moves, "rock")
                theirs = style.act([(b, a) for a, b in history])
                score += outcome(mine, theirs, moves)
                history.append((mine, theirs))
            wins.append(score > 0)
        assert np.mean(wins) >= STYLE_FLOORS.get(name, 1.0), name


def test_rules_and_style_behaviour():
    assert outcome("paper", "rock", MOVES3) == 1 and outcome("rock", "paper", MOVES3) == -1
    assert outcome("rock", "scissors", MOVES3) == 1 and outcome("rock", "rock", MOVES3) == 0
    assert outcome("spock", "rock", MOVES5) == 1 and outcome("lizard", "spock", MOVES5) == 1
    assert outcome(None, "rock", MOVES3) == -1 and outcome(None, None, MOVES3) == 0
    for moves in (MOVES3, MOVES5):  # every move beats exactly half of the others
        for m in moves:
            assert sum(outcome(m, o, moves) == 1 for o in moves) == len(moves) // 2
            assert outcome(counter(m, moves), m, moves) == 1
    assert most_frequent(["rock", "paper", "paper", "rock"]) == "rock"  # tie: most recent
    rng = np.random.default_rng(0)
    hist = [("rock", "paper"), ("scissors", "paper"), ("rock", "rock")]  # (style's move, opponent's move)
    assert make_style("copy", rng).act(hist) == "rock"
    assert make_style("beat_last", rng).act(hist) == "paper"
    assert make_style("frequency", rng).act(hist) == "scissors"  # beats paper
    assert make_style("win_stay", rng).act([("paper", "rock")]) == "paper"
    assert make_style("win_stay", rng).act([("rock", "paper")]) == "scissors"
    fixed = make_style("fixed", rng)
    assert len({fixed.act(hist[:k]) for k in range(4)}) == 1
    cycle = make_style("cycle", rng, MOVES5)
    seq = [cycle.act([("rock", "rock")] * k) for k in range(5)]
    assert sorted(seq) == sorted(MOVES5)
    pattern = make_style("pattern", rng)
    assert [pattern.act([("rock", "rock")] * k) for k in range(6)] == list(pattern.sequence) * 2
    with pytest.raises(ValueError, match="unknown style"):
        make_style("nope", rng)


def test_training_and_heldout_styles_share_no_rule():
    train, held = rules_of(TRAIN_STYLES), rules_of(HELDOUT_STYLES)
    assert not train & held, train & held
    assert all(STYLES[n].rules for n in STYLES)
    assert all(f"``{rule}``" in styles_module.__doc__ for rule in train | held)  # every rule is documented
    assert len(TRAIN_STYLES) >= 6 and len(HELDOUT_STYLES) >= 3
    assert sum("uniform_noise" not in STYLES[n].rules for n in HELDOUT_STYLES) >= 3  # deterministic held-out styles


# (style, moves, history seen from the style's side as (its move, opponent's move), expected move)
RULE_CASES = [
    ("copy_lag2", MOVES3, [("rock", "paper"), ("scissors", "scissors"), ("rock", "rock")], "scissors"),
    ("copy_lag2", MOVES5, [("rock", "spock"), ("rock", "lizard")], "spock"),
    ("copy_lag3", MOVES3, [("rock", "paper"), ("rock", "scissors"), ("rock", "rock")], "paper"),
    ("copy_lag3", MOVES5, [("rock", "lizard"), ("rock", "spock"), ("rock", "rock"), ("rock", "paper")], "spock"),
    ("lose_to_last", MOVES3, [("rock", "paper"), ("paper", "rock")], "scissors"),
    ("lose_to_last", MOVES3, [("rock", "scissors")], "paper"),
    ("lose_to_last", MOVES5, [("rock", "rock")], "lizard"),
    ("lose_to_last", MOVES5, [("rock", "spock")], "scissors"),
    ("beat_least_frequent", MOVES3, [("rock", "paper"), ("rock", "paper"), ("rock", "rock")], "rock"),  # scissors
    ("beat_least_frequent", MOVES3, [("rock", "rock"), ("rock", "paper"), ("rock", "scissors")], "paper"),  # rock
    ("beat_least_frequent", MOVES3, [("rock", "rock")], "scissors"),  # paper: never played, first in rule order
    ("beat_least_frequent", MOVES5, [("rock", m) for m in (*MOVES5, "rock")], "scissors"),  # paper: least recent
    ("win_stay_lose_next", MOVES3, [("paper", "rock")], "paper"),  # won: stay
    ("win_stay_lose_next", MOVES3, [("rock", "paper")], "paper"),  # lost: next after rock
    ("win_stay_lose_next", MOVES3, [("rock", "rock")], "paper"),  # drew: next
    ("win_stay_lose_next", MOVES5, [("lizard", "spock")], "lizard"),
    ("win_stay_lose_next", MOVES5, [("lizard", "rock")], "rock"),  # wraps around
    ("win_stay_lose_copy", MOVES3, [("paper", "rock")], "paper"),
    ("win_stay_lose_copy", MOVES3, [("rock", "rock")], "rock"),  # drew: copy
    ("win_stay_lose_copy", MOVES3, [("scissors", "rock")], "rock"),
    ("win_stay_lose_copy", MOVES5, [("rock", "spock")], "spock"),  # lost: copy, not the next move (paper)
    ("win_stay_lose_copy", MOVES5, [("spock", "rock"), ("scissors", "lizard")], "scissors"),  # won: stay
]


@pytest.mark.parametrize("name,moves,history,expected", RULE_CASES)
def test_new_styles_follow_their_rules(name, moves, history, expected):
    style = make_style(name, np.random.default_rng(0), moves)
    assert style.act(history) == expected
    assert style.act([]) == style.opening


def test_styles_opening_and_helpers():
    rng = np.random.default_rng(1)
    copy2 = make_style("copy_lag2", rng)
    assert copy2.act([("paper", "scissors")]) == copy2.opening  # too little history: the opening
    assert least_frequent(["rock", "paper"], MOVES3) == "scissors"
    assert least_frequent(["scissors", "rock", "paper"], MOVES3) == "scissors"  # tie: least recently played
    assert least_frequent([], MOVES5) == "rock"


@pytest.mark.parametrize("moves", [MOVES3, MOVES5])
def test_pattern_styles_repeat_a_sequence_that_is_not_a_cycle(moves):
    n = len(moves)
    for seed in range(50):
        for name, period in (("pattern2", 2), ("pattern", 3), ("pattern4", 4), ("pattern5", 5)):
            style = make_style(name, np.random.default_rng(seed), moves)
            seq = style.sequence
            assert len(seq) == period
            assert [style.act([("rock", "rock")] * k) for k in range(2 * period)] == list(seq) * 2
            idx = [moves.index(m) for m in seq]
            steps = [(idx[(i + 1) % period] - idx[i]) % n for i in range(period)]
            assert steps[0] != steps[1]  # the first three rounds are neither constant nor a cycle
            if period == 4:
                assert seq[:2] != seq[2:]
            if period >= 4:  # nor any three in a row, so no stretch looks like a shorter rule
                assert all(steps[i] != steps[(i + 1) % period] for i in range(period))


@pytest.mark.parametrize("moves", [MOVES3, MOVES5])
def test_every_style_is_deterministic_picklable_and_plays_valid_moves(moves):
    opp = np.random.default_rng(9)
    history = [(moves[int(i)], moves[int(j)]) for i, j in opp.integers(len(moves), size=(12, 2))]
    for name in STYLES:
        a = make_style(name, np.random.default_rng(4), moves)
        b = make_style(name, np.random.default_rng(4), moves)
        plays = [a.act(history[:k]) for k in range(6)]
        assert plays == [b.act(history[:k]) for k in range(6)], name
        clone = pickle.loads(pickle.dumps(a))
        rest = [a.act(history[:k]) for k in range(6, 13)]
        assert rest == [clone.act(history[:k]) for k in range(6, 13)], name
        assert set(plays + rest) <= set(moves), name
