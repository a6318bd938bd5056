"""Loss terms: PPO clipping, KL estimator, adaptive KL coefficient."""

import math

import torch

from marl.losses import AdaptiveKL, kl_to_reference, ppo_clip_loss


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


def test_masked_tokens_do_not_count():
    old = torch.zeros(1, 3)
    new = torch.tensor([[0.1, 5.0, -5.0]])
    mask = torch.tensor([[True, False, False]])
    loss, _ = ppo_clip_loss(new, old, torch.tensor([-1.0]), mask, clip_eps=0.2)
    assert torch.isclose(loss, torch.exp(torch.tensor(0.1)))


def test_kl_is_zero_at_reference_and_positive_elsewhere():
    lp = torch.tensor([[-1.0, -2.0]])
    mask = torch.ones(1, 2, dtype=torch.bool)
    assert kl_to_reference(lp, lp, mask).item() == 0.0
    assert kl_to_reference(lp, lp - 0.5, mask).item() > 0.0


def test_adaptive_kl_moves_towards_target():
    ctl = AdaptiveKL(init=0.1, target=0.02)
    assert ctl.update(0.2) > 0.1  # too much KL: stronger penalty
    ctl2 = AdaptiveKL(init=0.1, target=0.02)
    assert ctl2.update(0.0) < 0.1
    fixed = AdaptiveKL(init=0.1, target=0.0)
    assert fixed.update(5.0) == 0.1
    assert AdaptiveKL(0.1, 0.02).update(float("nan")) == 0.1

