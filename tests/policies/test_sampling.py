"""sample_categorical: one draw per row, from the row's distribution, never a zero-probability token."""

import pytest
import torch

from policies.sampling import sample_categorical


def test_draws_follow_each_rows_distribution():
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2], [0.0, 0.0, 0.0, 1.0], [2.0, 0.0, 6.0, 0.0]])  # rows need not sum to 1
    g = torch.Generator().manual_seed(0)
    draws = torch.stack([sample_categorical(probs, g) for _ in range(4000)])  # [draws, rows]
    counts = torch.stack([torch.bincount(draws[:, r], minlength=4) for r in range(3)]).float() / 4000
    want = probs / probs.sum(-1, keepdim=True)
    assert counts[probs == 0].sum() == 0  # a masked token is never drawn
    torch.testing.assert_close(counts, want, atol=0.03, rtol=0)  # 4000 draws: standard error <= 0.008


def test_the_same_generator_seed_gives_the_same_draws():
    probs = torch.softmax(torch.randn(64, 500, generator=torch.Generator().manual_seed(1)), -1)
    first = sample_categorical(probs, torch.Generator().manual_seed(7))
    again = sample_categorical(probs, torch.Generator().manual_seed(7))
    other = sample_categorical(probs, torch.Generator().manual_seed(8))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_given_draws_decide_each_rows_sample():
    # what lets a row's sample stay the same whichever other rows are still in the decoding batch
    probs = torch.tensor([[0.25, 0.75, 0.0], [0.5, 0.0, 0.5]])
    assert sample_categorical(probs, uniform=torch.tensor([0.2, 0.9])).tolist() == [0, 2]
    assert sample_categorical(probs, uniform=torch.tensor([0.3, 0.1])).tolist() == [1, 0]


def test_a_uniform_at_the_very_top_draws_the_last_token_with_probability(monkeypatch):
    # rounding can give u == total; the draw must still be a token with positive probability, not past the end
    probs = torch.tensor([[0.25, 0.75, 0.0, 0.0]])
    monkeypatch.setattr(torch, "rand", lambda shape, **kw: torch.ones(shape, dtype=kw.get("dtype")))
    assert sample_categorical(probs).tolist() == [1]


@pytest.mark.parametrize("bad", [float("nan"), 0.0])
def test_a_row_with_no_probability_mass_is_a_clear_error(bad):
    probs = torch.tensor([[0.5, 0.5], [bad, bad]])
    with pytest.raises(ValueError, match="row 1"):
        sample_categorical(probs)
