"""The curriculum's state machine: which stage a run trains on, when it moves, and what it replays.

A curriculum is an ordered list of `Stage`s (an agent count, a task split, scenario options). The
learner trains on the current stage; a share of tasks replays earlier stages so that nothing is
forgotten. After every batch the stage's success over a window of recent episodes decides:
promote at or above `promote_at`, step back at or below `demote_at`, else stay. Three things keep it
from flapping: the window only holds episodes of the current stage played since the last move, a
move needs at least `min_episodes` of them, and after a step back from stage k the bar to return to k
is raised by `hysteresis` (until it is reached).

Success is per-agent normalized: an episode counts the share of its agents that succeeded, so a
team of eight is judged by the same yardstick as a team of two (in a cooperative scenario every
agent shares the team's outcome, so this is the team's success).

Plain data in, decisions out; it knows nothing of models or environments, and its whole state is a
JSON-able dict (`state_dict` / `load_state_dict`) that a checkpoint carries. Left out: building the
stages' environments and policies (`marl.run.curriculum`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from marl.config.curriculum import CurriculumConfig, Stage


@dataclass
class Move:
    """A stage change: after which iteration, from where to where, on what windowed success."""

    iteration: int
    source: int
    target: int
    success: float


@dataclass
class Curriculum:
    """Stages, rules and the running state (current stage, window, history)."""

    stages: list[Stage]
    rules: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Thresholds, window, minimum episodes, replay share and hysteresis (the `curriculum` config section)."""
    stage: int = 0
    promotions: int = 0
    demotions: int = 0
    episodes_at_stage: int = 0
    """Episodes of the current stage seen since the last move (the minimum before the next)."""
    raised: dict[int, float] = field(default_factory=dict)
    """Stage -> extra success a return to it needs after a step back from it (the hysteresis)."""
    history: list[Move] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.stages:
            raise ValueError("a curriculum needs at least one stage")
        self._window: deque[float] = deque(maxlen=self.rules.window)
        self._per_stage: list[deque[float]] = [deque(maxlen=self.rules.window) for _ in self.stages]

    @classmethod
    def from_config(cls, config: CurriculumConfig) -> Curriculum:
        """The curriculum of a (validated) `curriculum` config section, at its first stage."""
        return cls(config.parsed(), config)

    @property
    def current(self) -> Stage:
        return self.stages[self.stage]

    def draw_stages(self, n: int, rng: np.random.Generator) -> list[int]:
        """The stage of each of `n` tasks: the current one, or with probability `replay_share` an earlier
        one drawn uniformly (nothing to replay at the first stage)."""
        out = []
        for _ in range(n):
            replay = self.stage > 0 and rng.random() < self.rules.replay_share
            out.append(int(rng.integers(0, self.stage)) if replay else self.stage)
        return out

    def record(self, stage: int, successes: Sequence[float]) -> None:
        """Per-agent-normalized success of finished episodes played at `stage` (each in [0, 1]). Only the
        current stage's fill the deciding window; every stage's feed its own success figure."""
        for s in successes:
            self._per_stage[stage].append(float(s))
            if stage == self.stage:
                self._window.append(float(s))
                self.episodes_at_stage += 1

    def window_success(self) -> float | None:
        """Mean success over the deciding window (None while it is empty)."""
        return float(np.mean(self._window)) if self._window else None

    def stage_success(self, stage: int) -> float | None:
        """Mean of `stage`'s recent episodes, replays included (None if none was played)."""
        recent = self._per_stage[stage]
        return float(np.mean(recent)) if recent else None

    def step(self, iteration: int) -> Move | None:
        """Decide after a batch: promote, step back, or stay (None)."""
        success = self.window_success()
        if success is None or self.episodes_at_stage < self.rules.min_episodes:
            return None
        bar = self.rules.promote_at + self.raised.get(self.stage + 1, 0.0)
        if success >= bar and self.stage + 1 < len(self.stages):
            self.raised.pop(self.stage + 1, None)
            self.promotions += 1
            return self._move(iteration, self.stage + 1, success)
        if success <= self.rules.demote_at and self.stage > 0:
            self.raised[self.stage] = self.rules.hysteresis
            self.demotions += 1
            return self._move(iteration, self.stage - 1, success)
        return None

    def _move(self, iteration: int, target: int, success: float) -> Move:
        move = Move(iteration, self.stage, target, success)
        self.history.append(move)
        self.stage = target
        self._window.clear()
        self.episodes_at_stage = 0
        return move

    def metrics(self) -> dict[str, float]:
        """`curriculum/*` figures of the state now: stage, team size, moves, success per stage played."""
        out = {"curriculum/stage": float(self.stage), "curriculum/n_agents": float(self.current.agents),
               "curriculum/promotions": float(self.promotions), "curriculum/demotions": float(self.demotions)}
        window = self.window_success()
        if window is not None:
            out["curriculum/window_success"] = window
        for k, stage in enumerate(self.stages):
            success = self.stage_success(k)
            if success is not None:
                out[f"curriculum/success/{stage.name}"] = success
        return out

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to carry on where it stands (JSON-able)."""
        return {"stages": [s.spec() for s in self.stages], "stage": self.stage, "promotions": self.promotions,
                "demotions": self.demotions, "episodes_at_stage": self.episodes_at_stage,
                "raised": {str(k): v for k, v in self.raised.items()}, "window": list(self._window),
                "per_stage": [list(d) for d in self._per_stage],
                "history": [vars(m) for m in self.history]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Carry on from `state_dict()`; refuses a state of other stages."""
        specs = [s.spec() for s in self.stages]
        if list(state["stages"]) != specs:
            raise ValueError(f"curriculum state is for stages {state['stages']}, this run has {specs}")
        self.stage, self.promotions, self.demotions = state["stage"], state["promotions"], state["demotions"]
        self.episodes_at_stage = state["episodes_at_stage"]
        self.raised = {int(k): float(v) for k, v in state["raised"].items()}
        self._window = deque(state["window"], maxlen=self.rules.window)
        self._per_stage = [deque(d, maxlen=self.rules.window) for d in state["per_stage"]]
        self.history = [Move(**m) for m in state["history"]]
