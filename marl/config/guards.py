"""The `guards` section of a training config: alerts on a run going wrong, and the faults it tolerates.

Each alert compares a figure the run already logs with a threshold: the KL to the reference far above
its target, the mean return or the policy's entropy collapsing, the invalid-action rate jumping. An
alert becomes an MLflow tag and a warning line; the ones named in `stop_on` also end RL (with a resume
point, then the usual checkpoint and final evaluation). It leaves out the checks themselves
(`marl.run.alerts`) and non-finite updates (`rl.max_nonfinite_streak`).
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.config.checks import SelfChecking, finite_non_negative, positive, require

ALERTS = ("kl", "reward", "entropy", "invalid")
"""The alerts a run can raise (`alert/<name>` tags)."""


@dataclass
class GuardsConfig(SelfChecking):
    """Alerts (MLflow tags `alert/<name>` and a warning line; optionally a stop) and the faults a run tolerates."""

    kl_factor: float = 10.0
    """Alert `kl` when the mean KL per decision token over the window exceeds this many times rl.target_kl (0, or rl.target_kl 0: off)."""
    reward_drop: float = 0.5
    """Alert `reward` when the window's mean return falls this far below the best window mean so far (0: off)."""
    entropy_floor: float = 0.01
    """Alert `entropy` when the policy's mean entropy per decision token over the window falls below this (nats; 0: off)."""
    invalid_jump: float = 0.25
    """Alert `invalid` when the window's invalid-action rate exceeds the lowest window rate so far by this much (0: off)."""
    window: int = 5
    """RL iterations each alert averages over, so one noisy batch raises nothing."""
    stop_on: tuple[str, ...] = ()
    """Alerts that also stop RL (any of kl, reward, entropy, invalid; `all` for every one); the run keeps a resume point, its checkpoint and final evaluation."""
    max_env_crashes: int = 10
    """Environments that raise in reset or step are recreated (their agents' episodes end as `error`, out of the loss); past this many in a run, the run stops."""

    def validate(self) -> GuardsConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        for name in ("kl_factor", "reward_drop", "entropy_floor", "invalid_jump"):
            finite_non_negative(f"guards.{name}", getattr(self, name))
        positive("guards.window", self.window)
        positive("guards.max_env_crashes", self.max_env_crashes, allow_zero=True)
        unknown = sorted(set(self.stop_on) - {*ALERTS, "all"})
        require(not unknown, f"guards.stop_on names unknown alerts {unknown}: choose from {', '.join(ALERTS)} or all")
        return self

    def stops(self, alert: str) -> bool:
        """Whether alert `alert` ends RL."""
        return alert in self.stop_on or "all" in self.stop_on
