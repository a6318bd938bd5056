"""The `curriculum` section: stages (team size, split, scenario options) and when a run moves between them.

A stage is written as one spec line, `agents=4 split=hard size=7` (YAML may give a mapping instead,
stored as its spec line), so stages travel through flags, YAML and MLflow params alike. The state
machine that applies these rules is `marl.engine.curriculum`; building each stage's environments is
`marl.run`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from marl.config.checks import ConfigError, SelfChecking, positive, require, within

STAGE_KEYS = ("agents", "split")
"""A stage spec's own keys; every other key is a scenario option of that stage."""


@dataclass(frozen=True)
class Stage:
    """One curriculum stage: the team size, the task split it trains on, and scenario options."""

    agents: int
    split: str | None = None
    """Training split of the stage (None: the run's `train_split`)."""
    options: tuple[tuple[str, Any], ...] = ()
    """Scenario options on top of the run's, as sorted (key, value) pairs (hashable)."""

    @property
    def name(self) -> str:
        """A short metric-safe name: `n4`, `n4-hard`, `n2-size=7`."""
        parts = [f"n{self.agents}"] + ([self.split] if self.split else [])
        return "-".join(parts + [f"{k}={v}" for k, v in self.options])

    @property
    def team(self) -> str:
        """The name of the stage's team, split left out (`n4`, `n2-size=7`): what evaluation is labelled by."""
        return "-".join([f"n{self.agents}"] + [f"{k}={v}" for k, v in self.options])

    def spec(self) -> str:
        """The stage as the one-line spec `parse_stage` reads back."""
        items = [f"agents={self.agents}"] + ([f"split={self.split}"] if self.split else [])
        return " ".join(items + [f"{k}={v}" for k, v in self.options])


def parse_stage(item: str | Mapping[str, Any]) -> Stage:
    """A stage from a spec line (`agents=4 split=hard size=7`) or a mapping (YAML); values are read as YAML
    scalars, so `size=7` is an int. Raises ValueError naming what is wrong."""
    if isinstance(item, Mapping):
        pairs = dict(item)
    elif isinstance(item, str):
        pairs = {}
        for token in item.split():
            key, eq, value = token.partition("=")
            if not eq or not key or not value:
                raise ValueError(f"stage {item!r}: {token!r} is not key=value (e.g. 'agents=4 split=hard')")
            pairs[key] = yaml.safe_load(value)
    else:
        raise ValueError(f"a stage is a spec line or a mapping, got {type(item).__name__}")
    agents = pairs.pop("agents", None)
    if not isinstance(agents, int) or isinstance(agents, bool) or agents < 1:
        raise ValueError(f"stage {item!r} needs agents=<a whole number >= 1>")
    split = pairs.pop("split", None)
    if split is not None and not isinstance(split, str):
        raise ValueError(f"stage {item!r}: split must be a name, got {split!r}")
    return Stage(agents, split, tuple(sorted(pairs.items())))


@dataclass
class CurriculumConfig(SelfChecking):
    """A curriculum over team sizes or difficulty: stages in order, promoted on success, stepped back on failure."""

    stages: tuple[str, ...] = ()
    """Stage specs in order, e.g. `agents=2` `agents=4` `agents=8`, or `agents=1 split=hard`; other keys are scenario options (empty: no curriculum)."""
    promote_at: float = 0.8
    """Move to the next stage when the window's per-agent success is at least this."""
    demote_at: float = 0.2
    """Step back a stage when the window's per-agent success is at most this."""
    window: int = 64
    """Recent episodes of the current stage that its success is measured over (also each stage's success figure)."""
    min_episodes: int = 64
    """Episodes a stage must play after a move before the next move."""
    replay_share: float = 0.25
    """Share of training tasks drawn from earlier stages, so that nothing is forgotten."""
    hysteresis: float = 0.05
    """After stepping back from a stage, a return to it needs `promote_at` plus this."""

    def __post_init__(self) -> None:
        # YAML may give a stage as a mapping; it is kept as its spec line (one form for flags, files, params).
        try:
            self.stages = tuple(s if isinstance(s, str) else parse_stage(s).spec() for s in self.stages)
        except ValueError as err:
            raise ConfigError(f"curriculum.stages: {err}") from None
        super().__post_init__()

    @property
    def enabled(self) -> bool:
        return bool(self.stages)

    def parsed(self) -> list[Stage]:
        """The stages as `Stage`s (raises ConfigError on a bad spec)."""
        try:
            return [parse_stage(s) for s in self.stages]
        except ValueError as err:
            raise ConfigError(f"curriculum.stages: {err}") from None

    def validate(self) -> CurriculumConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        stages = self.parsed()
        require(len({s.spec() for s in stages}) == len(stages),
                f"curriculum.stages has a stage twice ({list(self.stages)}): each stage must differ")
        within("curriculum.promote_at", self.promote_at, 0.0, 1.0)
        within("curriculum.demote_at", self.demote_at, 0.0, 1.0)
        require(self.demote_at < self.promote_at,
                f"curriculum.demote_at={self.demote_at} must be below promote_at={self.promote_at}")
        positive("curriculum.window", self.window)
        positive("curriculum.min_episodes", self.min_episodes)
        require(0.0 <= self.replay_share < 1.0, f"curriculum.replay_share={self.replay_share} must lie in [0, 1)")
        within("curriculum.hysteresis", self.hysteresis, 0.0, 1.0 - self.promote_at,
               " (a stage stepped back from must stay reachable: promote_at + hysteresis <= 1)")
        return self
