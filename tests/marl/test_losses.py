"""Loss terms: PPO clipping, the exact KL over allowed sets, adaptive KL coefficient."""

import math

import pytest
import torch

from marl.engine.losses import AdaptiveKL, exact_kl, ppo_clip_loss, sequence_clip_loss, value_loss


def test_ppo_loss_is_clipped_for_positive_advantage():
    old = torch.zeros(1, 2)
    new = torch.tensor([[math.log(2.0), 0.0]], requires_grad=True)  # ratio 2 on token 0, 1 on token 1
    mask = torch.tensor([[True, True]])
    loss, clip_frac = ppo_clip_loss(new, old, torch.tensor([1.0]), mask, clip_eps=0.2)
    assert torch.isclose(loss, torch.tensor(-(1.2 + 1.0) / 2))
    assert clip_frac.item() == 0.5
    loss.backward()
    assert new.grad[0, 0] == 0  # clipped token gets no gradient
    assert new.grad[0, 1] != 0


def test_clip_fraction_counts_only_the_tokens_in_the_loss():
    old = torch.zeros(2, 2)
    new = torch.tensor([[0.0, 0.0], [2.0, 2.0]])  # the second row is far outside the clip range ...
    mask = torch.tensor([[True, True], [False, False]])  # ... and out of the loss
    for loss_fn in (ppo_clip_loss, sequence_clip_loss):
        _, clip_frac = loss_fn(new, old, torch.tensor([1.0, 1.0]), mask, 0.2)
        assert clip_frac.item() == 0.0


def test_masked_tokens_do_not_count():
    old = torch.zeros(1, 3)
    new = torch.tensor([[0.1, 5.0, -5.0]])
    mask = torch.tensor([[True, False, False]])
    loss, _ = ppo_clip_loss(new, old, torch.tensor([-1.0]), mask, clip_eps=0.2)
    assert torch.isclose(loss, torch.exp(torch.tensor(0.1)))


def _masked_log_softmax(logits: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.log_softmax(logits.masked_fill(~allowed, float("-inf")), dim=-1)


def _allowed_sets(rows: int, vocab: int, per_row: int, gen: torch.Generator) -> torch.Tensor:
    allowed = torch.zeros(rows, vocab, dtype=torch.bool)
    for r in range(rows):
        allowed[r, torch.randperm(vocab, generator=gen)[:per_row]] = True
    return allowed


def test_exact_kl_equals_the_sum_over_each_allowed_set():
    gen = torch.Generator().manual_seed(0)
    logits_p, logits_q = torch.randn(6, 40, generator=gen), torch.randn(6, 40, generator=gen)
    allowed = _allowed_sets(6, 40, 5, gen)
    got = exact_kl(_masked_log_softmax(logits_p, allowed), _masked_log_softmax(logits_q, allowed))
    for r in range(6):
        ids = allowed[r].nonzero().squeeze(-1)
        p = torch.softmax(logits_p[r, ids].double(), -1)
        q = torch.softmax(logits_q[r, ids].double(), -1)
        assert got[r].item() == pytest.approx(float((p * (p / q).log()).sum()), rel=1e-5)
    same = _masked_log_softmax(logits_p, allowed)
    assert torch.allclose(exact_kl(same, same), torch.zeros(6))


def test_exact_kl_gradient_is_the_analytic_kls():
    # Autograd of the analytic KL(p || q) between categoricals on the allowed ids alone, against the
    # gradient through exact_kl over the full vocabulary with the rest masked: the same, and finite.
    gen = torch.Generator().manual_seed(1)
    logits_p = torch.randn(4, 30, generator=gen, requires_grad=True)
    logits_q = torch.randn(4, 30, generator=gen)
    allowed = _allowed_sets(4, 30, 6, gen)
    exact_kl(_masked_log_softmax(logits_p, allowed), _masked_log_softmax(logits_q, allowed)).sum().backward()
    ours = logits_p.grad.clone()
    logits_p.grad = None
    ids = torch.stack([allowed[r].nonzero().squeeze(-1) for r in range(4)])
    p = torch.distributions.Categorical(logits=logits_p.gather(1, ids))
    q = torch.distributions.Categorical(logits=logits_q.gather(1, ids))
    torch.distributions.kl_divergence(p, q).sum().backward()
    assert torch.isfinite(ours).all() and torch.allclose(ours, logits_p.grad, atol=1e-6)
    assert (ours[~allowed] == 0).all()


def test_adaptive_kl_moves_towards_target():
    ctl = AdaptiveKL(init=0.1, target=0.02)
    assert ctl.update(0.2) > 0.1  # too much KL: stronger penalty
    ctl2 = AdaptiveKL(init=0.1, target=0.02)
    assert ctl2.update(0.0) < 0.1
    fixed = AdaptiveKL(init=0.1, target=0.0)
    assert fixed.update(5.0) == 0.1
    assert AdaptiveKL(0.1, 0.02).update(float("nan")) == 0.1



def test_sequence_ratio_is_one_ratio_per_action_and_clipped():
    old = torch.zeros(2, 3)
    # Row 0: token log-ratios 0.3 and -0.1 on its two decision tokens: one ratio exp(0.1) for the action.
    new = torch.tensor([[0.3, -0.1, 9.0], [0.0, 0.0, 0.0]], requires_grad=True)
    mask = torch.tensor([[True, True, False], [False, False, False]])  # row 1 has no decision: left out
    adv = torch.tensor([1.0, 5.0])
    loss, clip_frac = sequence_clip_loss(new, old, adv, mask, clip_eps=0.5)
    assert torch.isclose(loss, -torch.exp(torch.tensor(0.1)))
    assert clip_frac.item() == 0.0
    tight, frac = sequence_clip_loss(new, old, adv, mask, clip_eps=0.01)
    assert torch.isclose(tight, torch.tensor(-1.01)) and frac.item() == 1.0
    tight.backward()
    assert new.grad.abs().sum() == 0  # a clipped action with a positive advantage gets no gradient


def test_kl_coefficient_never_collapses_below_its_floor():
    ctl = AdaptiveKL(init=0.02, target=0.05)
    for _ in range(200):  # KL far below target for a long time (early RL)
        ctl.update(0.0)
    assert ctl.value == pytest.approx(0.002)
    ctl.update(0.5)  # then a drift: the controller reacts from the floor, not from ~0
    assert ctl.value > 0.002


def test_kl_coefficient_stops_at_its_ceiling_and_comes_down_from_it():
    ctl = AdaptiveKL(init=0.01, target=0.1, ceiling_factor=10.0)
    for _ in range(100):  # a learned skill that needs 3x the target KL, held for a long time
        ctl.update(0.3)
    assert ctl.value == pytest.approx(0.1)  # bounded: the penalty cannot grow until it undoes the skill
    ctl.update(0.0)
    assert ctl.value == pytest.approx(0.08)  # and it reacts at once when the KL falls
    assert AdaptiveKL(init=0.01, target=0.1, ceiling_factor=1.0).update(5.0) == pytest.approx(0.01)
    unbounded = AdaptiveKL(init=0.01, target=0.1, ceiling_factor=float("inf"))
    for _ in range(100):
        unbounded.update(0.3)
    assert unbounded.value > 1.0  # the controller as it was, for comparison runs


def test_value_loss_is_half_mse():
    assert value_loss(torch.tensor([1.0, 3.0]), torch.tensor([0.0, 1.0])).item() == pytest.approx(1.25)
    assert value_loss(torch.zeros(0), torch.zeros(0)).item() == 0.0
