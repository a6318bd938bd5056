"""Drawing one token per row from a batch of categorical distributions.

`torch.multinomial` draws one exponential variate per vocabulary entry per row (the exponential race),
which on a CPU costs more than a small model's whole decoding step at a batch of tens of rows. Inverse
transform sampling draws one uniform per row and searches the row's cumulative sum: the same
distribution, a few vectorised passes over the probabilities.

`explore_first_decisions` draws an action's first real decision uniformly among the tokens its grammar allows
instead (exploration that reaches actions the policy gives almost no probability).

Left out: sampling several tokens per row, top-k/top-p truncation (the caller masks the logits first).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def sample_categorical(probs: torch.Tensor, generator: torch.Generator | None = None,
                       uniform: torch.Tensor | None = None) -> torch.Tensor:
    """One index per row of `probs` [rows, vocab] (non-negative; rows need not sum to one), drawn with
    probability proportional to its entry; an entry of zero is never drawn. `uniform` [rows] in [0, 1): the
    draws to use (else drawn from `generator`). Raises ValueError on a row whose total is not finite and
    positive (NaN logits, or a row with every token masked)."""
    cdf = probs.cumsum(-1)
    total = cdf[:, -1:].contiguous()
    usable = (total > 0) & torch.isfinite(total)
    if not bool(usable.all()):
        bad = int((~usable).nonzero()[0, 0])
        raise ValueError(f"cannot sample row {bad}: its probabilities sum to {float(total[bad, 0])} (NaN logits, "
                         "or every token masked); check the model's weights and the row's grammar")
    if uniform is None:
        uniform = torch.rand(total.shape[0], generator=generator, dtype=cdf.dtype, device=cdf.device)
    u = uniform.to(cdf.dtype).reshape(total.shape) * total
    drawn = torch.searchsorted(cdf, u, right=True)
    # rounding can put u at the total itself: the last index with positive probability is then the draw
    last = torch.searchsorted(cdf, total, right=False)
    return torch.minimum(drawn, last).squeeze(-1)


def exploring_rows(share: float, eligible: Sequence[bool], generator: torch.Generator | None = None) -> list[bool]:
    """Which rows explore (`explore_first_decisions`): each `eligible` row with probability `share`. Only rows with a
    grammar are eligible (a uniform draw over a whole vocabulary writes noise). A share of 0 draws nothing, so a call
    without exploration samples what it sampled before exploration existed."""
    if share <= 0:
        return [False] * len(eligible)
    drawn = torch.rand(len(eligible), generator=generator, device=generator.device if generator is not None else None)
    return [bool(d < share) and e for d, e in zip(drawn.tolist(), eligible, strict=True)]


def explore_first_decisions(chosen: torch.Tensor, rows: Sequence[int], pending: list[bool],
                            options: Callable[[int], list[int]], uniform: torch.Tensor) -> torch.Tensor:
    """`chosen` [len(rows)] with a uniform pick among `options(i)` for each row `i = rows[j]` still `pending` whose
    options hold more than one token (its first real decision; a forced token waits for the next one), and
    those rows no longer pending. `uniform` [rows of the call] in [0, 1): the draw of each row, by call index."""
    picked = None
    for j, i in enumerate(rows):
        if not pending[i]:
            continue
        allowed = options(i)
        if len(allowed) > 1:
            picked = chosen.clone() if picked is None else picked
            picked[j] = allowed[min(int(float(uniform[i]) * len(allowed)), len(allowed) - 1)]
            pending[i] = False
    return chosen if picked is None else picked
