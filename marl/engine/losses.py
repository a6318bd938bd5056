"""Loss terms of the RL update, each a pure function of tensors.

The learner sums named terms with weights from config and logs each one. Token means run over
*decision tokens* only: tokens where constrained decoding allowed more than one choice. Forced
tokens have logprob 0 under the mask, carry no gradient, and would only dilute the means.
"""

from __future__ import annotations

import math

import torch


def masked_mean(values: torch.Tensor, mask: torch.Tensor, denominator: float | None = None) -> torch.Tensor:
    """Mean of `values` where `mask` is true (0 when nothing is selected).

    With `denominator` the sum is divided by it instead of by the mask's count: a micro-batch's share
    of the mean over a whole minibatch, so that the shares' gradients add up to the minibatch's.
    """
    mask = mask.to(values.dtype)
    count = mask.sum().clamp_min(1.0) if denominator is None else max(float(denominator), 1.0)
    return (values * mask).sum() / count


def ppo_clip_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
    denominator: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Token-level PPO-clip surrogate (to minimize) and the fraction of tokens clipped.

    `advantages` is per row (B,) and broadcast over the row's tokens; `denominator`: see `masked_mean`
    (the tokens of the whole minibatch).
    """
    ratio = torch.exp(logprobs - old_logprobs)
    adv = advantages[:, None]
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * adv
    loss = -masked_mean(torch.minimum(unclipped, clipped), mask, denominator)
    clip_frac = masked_mean(((ratio - 1.0).abs() > clip_eps).float(), mask, denominator)
    return loss, clip_frac.detach()


def sequence_clip_loss(
    logprobs: torch.Tensor, old_logprobs: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, clip_eps: float,
    denominator: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequence-level PPO-clip (GSPO): one importance ratio per action, the geometric mean of its tokens'.

    For MoE policies the token ratios are noisy (routing differs between the rollout and the
    training forward); a length-normalized ratio per action is far steadier (Zheng et al. 2025).
    Rows without any decision token carry no choice and are left out; `denominator`: see `masked_mean`
    (the rows of the whole minibatch that have a decision token).
    """
    m = mask.to(logprobs.dtype)
    counts = m.sum(-1)
    rows = counts > 0
    log_ratio = ((logprobs - old_logprobs) * m).sum(-1) / counts.clamp_min(1.0)
    ratio = torch.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    per_row = torch.minimum(unclipped, clipped)
    loss = -masked_mean(per_row, rows, denominator)
    clip_frac = masked_mean(((ratio - 1.0).abs() > clip_eps).float(), rows, denominator)
    return loss, clip_frac.detach()


def value_loss(values: torch.Tensor, returns: torch.Tensor) -> torch.Tensor:
    """Half the mean squared error between the critic's values and the GAE value targets."""
    if values.numel() == 0:
        return torch.zeros((), device=values.device)
    return 0.5 * ((values - returns) ** 2).mean()


def exact_kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p || q) per row of two [tokens, vocab] log-prob tables over the same allowed sets.

    Exact, not sampled: the sum runs over every token the mask allowed (entries at -inf in `log_p`
    are outside it and contribute 0), so its gradient is that of the reverse KL the penalty means,
    where the sampled k3 estimate inside a loss gives the forward KL's gradient. The vocabulary is
    small and constrained decoding leaves few tokens allowed, so the sum costs little.
    """
    allowed = torch.isfinite(log_p)
    p = log_p.exp()
    diff = log_p.masked_fill(~allowed, 0.0) - log_q.masked_fill(~allowed, 0.0)
    return (p * diff).sum(-1)


class AdaptiveKL:
    """KL coefficient steered towards a target KL (proportional control, Ziegler et al. 2019), within bounds.

    The coefficient stays between `floor_frac` and `ceiling_factor` times its initial value. The floor:
    early in RL the KL sits far below target for many updates, and an unbounded controller shrinks the
    coefficient to nothing, so that when the policy later drifts it takes dozens of updates to rein it
    back in (measured: a learned skill lost with the KL far above its target; see
    docs/results/2026-11-30-tool-use-rl-vs-sft.md). The ceiling: when a skill needs more KL than the
    target, an unbounded controller grows the penalty until it pulls the policy back to its reference,
    then shrinks it, and the cycle repeats (measured: a large gain given back twice in one run; see
    docs/results/2026-12-06-adaptive-vs-fixed-kl.md).
    """

    def __init__(self, init: float, target: float, horizon_gain: float = 0.2, floor_frac: float = 0.1,
                 ceiling_factor: float = 10.0) -> None:
        self.value = init
        self.target = target
        self.gain = horizon_gain
        self.floor = max(init * floor_frac, 1e-6)
        # An infinite factor means no ceiling (also when init is 0, where the product is NaN).
        self.ceiling = math.inf if math.isinf(ceiling_factor) else max(init * ceiling_factor, self.floor)

    def update(self, observed_kl: float) -> float:
        """Move the coefficient by at most +-gain (relative) per update, within its bounds; target 0 keeps it fixed."""
        if self.target > 0 and observed_kl == observed_kl:  # NaN never moves it
            error = max(-self.gain, min(self.gain, observed_kl / self.target - 1.0))
            self.value = min(max(self.value * (1.0 + error), self.floor), self.ceiling)
        return self.value
