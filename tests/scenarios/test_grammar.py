"""ActionGrammar and Slot: hashable plain data, stable expansion, membership without expanding."""

import pytest

from scenarios.grammar import ActionGrammar, Slot


def _grammar() -> ActionGrammar:
    return ActionGrammar((
        ('{"a": "', Slot("x", ("Paris", "Par")), '"}'),
        ("stop",),
    ))


def test_expand_is_stable_and_complete():
    g = _grammar()
    assert g.expand() == ['{"a": "Paris"}', '{"a": "Par"}', "stop"]
    assert g.expand() == _grammar().expand()


def test_contains_matches_exact_text_only():
    g = _grammar()
    for text in g.expand():
        assert text in g
    for text in ['{"a": "Pa"}', "stop ", "", '{"a": "Paris"}x']:
        assert text not in g
    assert 3 not in g


def test_hashable_and_equal():
    assert hash(_grammar()) == hash(_grammar())
    assert _grammar() == _grammar()


def test_empty_slot_rejected_and_limit_enforced():
    with pytest.raises(ValueError, match="at least one value"):
        Slot("x", ())
    big = ActionGrammar(((Slot("a", tuple("abcdefghij")), Slot("b", tuple("abcdefghij"))),))
    assert len(big.expand()) == 100
    with pytest.raises(ValueError, match="limit"):
        big.expand(limit=50)
