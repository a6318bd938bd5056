"""Alerts during RL: thresholds on figures the run already logs, checked after every iteration.

`Alerts.check(metrics, iteration)` keeps a window of the last `guards.window` iterations of four
figures and returns the alerts that start at this iteration:

- `kl`: the window's mean `train/kl` (per decision token, against the frozen reference) above
  `guards.kl_factor` times `rl.target_kl`: the controller has lost the policy;
- `reward`: the window's mean `rollout/return_mean` more than `guards.reward_drop` below the best
  window mean so far: the policy has collapsed from where it was;
- `entropy`: the window's mean `train/entropy` below `guards.entropy_floor`: the policy has become
  deterministic and stops exploring;
- `invalid`: the window's `rollout/invalid_action_rate` more than `guards.invalid_jump` above the
  lowest window rate so far: the policy unlearns the action format.

An alert starts when its condition turns true and can start again after it has cleared, so a
condition that persists raises one alert, not one per iteration. Figures that were not measured in an
iteration (NaN, or absent: a skipped update) leave the window as it was. The run turns each alert
into an MLflow tag `alert/<name>`, a warning line and the metric `alerts/count`; `guards.stop_on`
says which end RL. It leaves out the tracker (the caller tags) and non-finite updates (the learner).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from marl.config.guards import GuardsConfig


@dataclass(frozen=True)
class Alert:
    """An alert that started at an iteration."""

    name: str
    iteration: int
    message: str


_SOURCES = {"kl": "train/kl", "reward": "rollout/return_mean", "entropy": "train/entropy",
            "invalid": "rollout/invalid_action_rate"}


class Alerts:
    """The alert thresholds of a run and the windows of the figures they watch."""

    def __init__(self, guards: GuardsConfig, target_kl: float) -> None:
        self.guards = guards
        self.target_kl = target_kl
        self.windows = {name: deque(maxlen=guards.window) for name in _SOURCES}
        self.best_return = -math.inf
        self.lowest_invalid = math.inf
        self.active: set[str] = set()
        self.fired = 0

    def _mean(self, name: str) -> float | None:
        window = self.windows[name]
        return sum(window) / len(window) if len(window) == window.maxlen else None

    def _conditions(self) -> dict[str, str | None]:
        """Each alert's message where its condition holds now (None where it does not or is off)."""
        g, out = self.guards, {}
        kl = self._mean("kl")
        limit = g.kl_factor * self.target_kl
        out["kl"] = (f"mean KL {kl:.3g} over the last {g.window} iterations is above {g.kl_factor:g} x target "
                     f"{self.target_kl:g}" if limit > 0 and kl is not None and kl > limit else None)
        ret = self._mean("reward")
        dropped = g.reward_drop > 0 and ret is not None and ret < self.best_return - g.reward_drop
        out["reward"] = (f"mean return {ret:.3g} over the last {g.window} iterations is more than {g.reward_drop:g} "
                         f"below its best {self.best_return:.3g}" if dropped else None)
        ent = self._mean("entropy")
        out["entropy"] = (f"mean entropy {ent:.3g} nats per decision token over the last {g.window} iterations is "
                          f"below {g.entropy_floor:g}" if g.entropy_floor > 0 and ent is not None
                          and ent < g.entropy_floor else None)
        inv = self._mean("invalid")
        jumped = g.invalid_jump > 0 and inv is not None and inv > self.lowest_invalid + g.invalid_jump
        out["invalid"] = (f"invalid-action rate {inv:.3g} over the last {g.window} iterations is more than "
                          f"{g.invalid_jump:g} above its lowest {self.lowest_invalid:.3g}" if jumped else None)
        return out

    def check(self, metrics: dict[str, float], iteration: int) -> list[Alert]:
        """Take an iteration's figures; the alerts that start now."""
        for name, key in _SOURCES.items():
            value = metrics.get(key)
            if value is not None and math.isfinite(value):
                self.windows[name].append(float(value))
        started = []
        for name, message in self._conditions().items():
            if message is None:
                self.active.discard(name)
            elif name not in self.active:
                self.active.add(name)
                started.append(Alert(name, iteration, message))
        self.fired += len(started)
        # The records move after the check, so a window is compared with the best of the ones before it.
        ret, inv = self._mean("reward"), self._mean("invalid")
        if ret is not None:
            self.best_return = max(self.best_return, ret)
        if inv is not None:
            self.lowest_invalid = min(self.lowest_invalid, inv)
        return started

    def state_dict(self) -> dict[str, object]:
        """What a resume point keeps of the alerts (windows, records, which are active)."""
        return {"windows": {k: list(v) for k, v in self.windows.items()}, "best_return": self.best_return,
                "lowest_invalid": self.lowest_invalid, "active": sorted(self.active), "fired": self.fired}

    def load_state_dict(self, state: dict[str, object]) -> None:
        for name, values in state["windows"].items():
            self.windows[name].clear()
            self.windows[name].extend(float(v) for v in values)
        self.best_return = float(state["best_return"])
        self.lowest_invalid = float(state["lowest_invalid"])
        self.active = set(state["active"])
        self.fired = int(state["fired"])


def announce(started: list[Alert], tracker: Any, guards: GuardsConfig) -> Alert | None:
    """Each alert as an MLflow tag `alert/<name>` and a warning line; the first one that stops RL, if any."""
    stopping = None
    for alert in started:
        stops = guards.stops(alert.name)
        tracker.set_tags({f"alert/{alert.name}": f"iteration {alert.iteration}: {alert.message}"})
        print(f"WARNING alert {alert.name} at RL iteration {alert.iteration}: {alert.message}"
              + ("; stopping RL (guards.stop_on)" if stops else ""), flush=True)
        if stops and stopping is None:
            stopping = alert
    return stopping
