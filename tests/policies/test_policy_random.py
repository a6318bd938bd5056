"""RandomPolicy: uniform over grammar expansions, seeded."""

from policy_helpers import grammars

from policies.random_policy import RandomPolicy


def test_random_policy_valid_and_seeded():
    gs = grammars() + [None]
    a = RandomPolicy(seed=0).generate(None, gs * 20)
    b = RandomPolicy(seed=0).generate(None, gs * 20)
    assert a.texts == b.texts
    for g, t in zip(gs * 20, a.texts, strict=True):
        assert g is None or t in g
    seen = {t for g, t in zip(gs * 20, a.texts, strict=True) if g is gs[2]}
    assert seen == set(gs[2].expand())
