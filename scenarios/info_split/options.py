"""Options of the ``info_split`` scenario, validated at construction with messages naming the option.

It leaves out what the options do (``env.py``)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from scenarios.base import ScenarioOptions


def _is_number(x: object) -> bool:
    return not isinstance(x, bool) and isinstance(x, int | float) and bool(np.isfinite(x))


@dataclass(frozen=True)
class InfoSplitOptions(ScenarioOptions):
    """Options of ``info_split`` (on top of split and reward_weights)."""

    max_turns: int = 16
    """Cap on an agent's actions; the episode's own budget is usually lower (see ``turn_slack``)."""
    turn_slack: int = 2
    """Turns granted beyond the expert board protocol's length for this task and team (capped by ``max_turns``)."""
    individual_weight: float = 0.25
    """Share w of own contribution in the reward: (1 - w) * team task + w * own contribution."""
    train_mix: tuple[float, float] = (0.5, 0.5)
    """Weights of the basic and hard groups in the ``train`` split."""
    tool_timeout_s: float = 5.0
    """A tool call slower than this ends the caller's episode with reason ``timeout``."""
    expert_skips_conversion: float = 0.0
    """Share of episodes (drawn from the episode seed) whose expert answers an amount it has seen, unconverted,
    where the team's next solution call is ``convert``; the turn budget still comes from the right protocol."""

    def __post_init__(self) -> None:
        s = self.turn_slack
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise ValueError(f"turn_slack must be an int >= 0 (extra turns beyond the expert's), got {s!r}")
        w = self.individual_weight
        if not _is_number(w) or not 0 <= w <= 1:
            raise ValueError(f"individual_weight must be a number in [0, 1] (0: team reward only), got {w!r}")
        t = self.tool_timeout_s
        if not _is_number(t) or not t > 0:
            raise ValueError(f"tool_timeout_s must be a positive number of seconds, got {t!r}")
        mix = tuple(self.train_mix) if isinstance(self.train_mix, list | tuple) else ()
        if len(mix) != 2 or not all(_is_number(m) and m >= 0 for m in mix) or sum(mix) <= 0:
            raise ValueError(f"train_mix must be 2 non-negative weights (basic, hard) with a positive sum, "
                             f"got {self.train_mix!r}")
        object.__setattr__(self, "train_mix", tuple(float(m) for m in mix))
        if not _is_number(self.expert_skips_conversion) or not 0 <= self.expert_skips_conversion <= 1:
            raise ValueError(f"expert_skips_conversion must be a share in [0, 1], got {self.expert_skips_conversion!r}")
