"""Opponent pool: who the learner plays in competitive and mixed scenarios (fictitious self-play).

The pool holds the scenario's scripted opponents (its expert and training styles, as
`style:<name>` seats; held-out styles never enter) and frozen snapshots of the learning policy
(`snapshot:<iteration>`, added every K iterations, the oldest leaving past a cap). Each task of an
iteration (one rollout group, so a group baseline compares like with like) draws one entry,
uniformly or by prioritized fictitious self-play (PFSP: weight `(1 - w)^p`, `w` the learner's win
rate over its recent results against that entry, so the entries it loses to come more often).

Seating: the agents fall into sides, the scenario's teams where it has several, else agents of
even and of odd index (repeated_game's pairs agent_0/agent_1, ...). The learner plays one side,
the task's index picking which, so it plays every side over an iteration; the entry plays all
others. A result is the share of the learner's agent-episodes that ended in `success`.

It leaves out building snapshot policies (the caller passes a `freeze` function) and the
checkpoint folder layout beyond its own `pool.json` and one `save_pretrained` folder per snapshot.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from marl.engine.policy_map import SNAPSHOT_PREFIX
from marl.engine.rollout import STYLE_PREFIX, RolloutBatch

POOL_FILE = "pool.json"


def sides(env: Any) -> list[tuple[str, ...]]:
    """The sides of a reset `env`'s agents: its teams where it has several, else even and odd indices."""
    agents = list(env.possible_agents)
    teams = sorted({env.team_of(a) for a in agents} - {""})
    if len(teams) > 1:
        return [tuple(a for a in agents if env.team_of(a) == t) for t in teams]
    out = [tuple(agents[0::2]), tuple(agents[1::2])]
    if not out[1]:
        raise ValueError(f"an opponent pool needs at least 2 agents to seat; the scenario has {agents}")
    return out


def seating(env: Any, task: int, entry: str, route: Callable[[Any, str], str]) -> dict[str, str]:
    """Who plays each seat `entry` takes in task number `task`: every side but the learner's (side `task`
    mod sides). A style plays as itself; a snapshot seats its copy of the policy `route(env, agent)`
    names (`snapshot:<iteration>/<policy id>`), so under a team mapping each team's snapshot plays its team."""
    all_sides = sides(env)
    mine = all_sides[task % len(all_sides)]
    return {a: entry if entry.startswith(STYLE_PREFIX) else f"{entry}/{route(env, a)}"
            for a in env.possible_agents if a not in mine}


@dataclass
class PoolEntry:
    """One opponent in the pool and the learner's recent results against it."""

    name: str
    """`style:<name>` (a scripted style or the expert) or `snapshot:<iteration>`."""
    added_at: int = 0
    """RL iteration at which it entered (0: from the start)."""
    results: deque[float] = field(default_factory=deque)
    """The learner's recent results against it: per task, its share of agent-episodes won."""
    games: int = 0
    """Tasks played against it, all told."""

    def win_rate(self) -> float | None:
        """The learner's mean recent result against it (None before the first)."""
        return float(np.mean(self.results)) if self.results else None


class OpponentPool:
    """Scripted entries and frozen snapshots, drawn per task uniformly or by PFSP (see the module docstring)."""

    def __init__(self, sampling: str, styles: Sequence[str], max_snapshots: int = 8, pfsp_power: float = 2.0,
                 window: int = 64) -> None:
        if sampling not in ("uniform", "pfsp"):
            raise ValueError(f"pool sampling {sampling!r} is unknown; use uniform or pfsp")
        self.sampling = sampling
        self.max_snapshots = max_snapshots
        self.pfsp_power = pfsp_power
        self.window = window
        self.entries: list[PoolEntry] = [PoolEntry(STYLE_PREFIX + s, results=deque(maxlen=window)) for s in styles]
        self.snapshots: dict[str, dict[str, Any]] = {}
        """The frozen policies of each `snapshot:` entry, by policy id (they join the policy map for a rollout)."""

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def entry(self, name: str) -> PoolEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise KeyError(f"no pool entry {name!r}; entries: {self.names}")

    def add_snapshot(self, policies: dict[str, Any], iteration: int) -> str:
        """Add frozen policies (by policy id) as entry `snapshot:<iteration>`; the oldest snapshot leaves past the cap."""
        name = f"{SNAPSHOT_PREFIX}{iteration}"
        if name in self.snapshots:
            raise ValueError(f"the pool already has {name}")
        self.entries.append(PoolEntry(name, added_at=iteration, results=deque(maxlen=self.window)))
        self.snapshots[name] = dict(policies)
        while len(self.snapshots) > self.max_snapshots:
            oldest = next(iter(self.snapshots))
            del self.snapshots[oldest]
            self.entries = [e for e in self.entries if e.name != oldest]
        return name

    def seated_policies(self) -> dict[str, Any]:
        """Every snapshot policy under the seat owner name `seating` gives it (`snapshot:<iteration>/<policy id>`)."""
        return {f"{name}/{pid}": policy for name, by_id in self.snapshots.items() for pid, policy in by_id.items()}

    def weights(self) -> np.ndarray:
        """Each entry's probability of being drawn for a task."""
        if not self.entries:
            raise ValueError("the opponent pool is empty: give it scripted styles or add a snapshot first")
        if self.sampling == "uniform":
            w = np.ones(len(self.entries))
        else:  # an entry never played counts as an even match until it has results
            rates = [e.win_rate() for e in self.entries]
            w = np.array([(1.0 - (0.5 if r is None else r)) ** self.pfsp_power for r in rates])
            if w.sum() <= 0:  # the learner beats every entry: fall back to uniform
                w = np.ones(len(self.entries))
        return w / w.sum()

    def draw(self, n: int, rng: np.random.Generator) -> list[str]:
        """The entries of `n` tasks."""
        picks = rng.choice(len(self.entries), size=n, p=self.weights())
        return [self.entries[int(k)].name for k in picks]

    def record(self, batch: RolloutBatch, entries: Sequence[str], learner: Callable[[str], bool]) -> None:
        """Add each task's result: the share of its learner-played agent-episodes (`learner(ep.policy)`)
        that ended in `success`; `entries[g]` is the entry task (group) `g` drew."""
        won: dict[int, list[float]] = {}
        for ep in batch.episodes:
            if learner(ep.policy) and not ep.harness_fault:
                won.setdefault(ep.group, []).append(float(ep.reason == "success"))
        for group, results in won.items():
            e = self.entry(entries[group])
            e.results.append(float(np.mean(results)))
            e.games += 1

    def metrics(self) -> dict[str, float]:
        """`opponent/pool_size`, and each entry's recent win rate and draw probability."""
        out = {"opponent/pool_size": float(len(self.entries))}
        for e, p in zip(self.entries, self.weights(), strict=True):
            out[f"pool/{e.name}/draw_probability"] = float(p)
            rate = e.win_rate()
            if rate is not None:
                out[f"pool/{e.name}/win_rate"] = rate
        return out

    # ----- persistence -----
    def state(self) -> dict[str, Any]:
        """The pool as plain data (its snapshots' weights are saved beside it)."""
        return {"sampling": self.sampling, "max_snapshots": self.max_snapshots, "pfsp_power": self.pfsp_power,
                "window": self.window,
                "entries": [{"name": e.name, "added_at": e.added_at, "results": list(e.results), "games": e.games}
                            for e in self.entries]}

    def save(self, folder: str | Path) -> None:
        """`pool.json` and each snapshot's models under `snapshot_<iteration>/<policy id>/` in `folder`."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / POOL_FILE).write_text(json.dumps(self.state(), indent=1))
        for name, by_id in self.snapshots.items():
            for pid, policy in by_id.items():
                policy.model.save_pretrained(folder / snapshot_folder(name) / pid, safe_serialization=True)

    @classmethod
    def from_state(cls, data: dict[str, Any], snapshots: Callable[[str], dict[str, Any]]) -> OpponentPool:
        """A pool from its `state()`; `snapshots(name)` gives the policies (by id) of each `snapshot:` entry."""
        pool = cls(data["sampling"], (), data["max_snapshots"], data["pfsp_power"], data["window"])
        for rec in data["entries"]:
            pool.entries.append(PoolEntry(rec["name"], rec["added_at"], deque(rec["results"], maxlen=pool.window),
                                          rec["games"]))
            if rec["name"].startswith(SNAPSHOT_PREFIX):
                pool.snapshots[rec["name"]] = snapshots(rec["name"])
        return pool

    @classmethod
    def load(cls, folder: str | Path, load_snapshot: Callable[[Path], Any]) -> OpponentPool:
        """A pool saved by `save`; `load_snapshot(model folder)` rebuilds each snapshot policy."""
        folder = Path(folder)
        try:
            data = json.loads((folder / POOL_FILE).read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{folder / POOL_FILE} does not read as an opponent pool ({err})") from None

        def snapshots(name: str) -> dict[str, Any]:
            where = folder / snapshot_folder(name)
            return {d.name: load_snapshot(d) for d in sorted(where.iterdir()) if d.is_dir()}
        return cls.from_state(data, snapshots)


def snapshot_folder(name: str) -> str:
    """The folder name of snapshot entry `name` (`snapshot:12` -> `snapshot_12`)."""
    return name.replace(":", "_")
