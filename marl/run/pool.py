"""The opponent pool inside a training run: built from the config, seated in each iteration's rollout,
grown by snapshots, and measured at the end.

`PoolRun` wraps an `OpponentPool` (`marl.engine.opponent_pool`) with what a run needs around it: the
learning policy map, a probe environment for the seating, its own random stream (so a run's task
seeds do not depend on whether it has a pool), snapshots every `pool.snapshot_every` iterations,
and the final evaluation: the learner against every entry (`eval/pool/...`) and against each
held-out style seated the same way (`eval/heldout/win_rate`), styles it never trained against.
It leaves out the pool's own sampling and bookkeeping (the engine's).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from marl.config import TrainConfig
from marl.engine.opponent_pool import SNAPSHOT_PREFIX, OpponentPool, seating
from marl.engine.policy_map import PolicyMap
from marl.engine.rollout import STYLE_PREFIX, RolloutBatch, RolloutWorker, task_groups
from marl.run.build import frozen_snapshot, load_policy_weights, policy_weights


class PoolRun:
    """A run's opponent pool and the learning policies it seats against it."""

    def __init__(self, cfg: TrainConfig, make_env: Any, learning: PolicyMap) -> None:
        self.cfg = cfg.pool
        self.learning = learning
        self.probe = make_env()
        self.probe.reset(seed=0)
        styles = self.probe.opponent_styles()
        scripted = ["expert", *styles.train] if self.cfg.scripted else []
        leaked = set(scripted) & set(styles.held_out)
        if leaked:
            raise ValueError(f"held-out styles {sorted(leaked)} would enter the opponent pool; they are for evaluation")
        self.held_out = tuple(styles.held_out)
        self.pool = OpponentPool(self.cfg.sampling, scripted, self.cfg.max_snapshots, self.cfg.pfsp_power,
                                 self.cfg.window)
        self.rng = np.random.default_rng([cfg.seed, 0x9001])

    def seated_map(self) -> PolicyMap:
        """The learning policies plus every snapshot, under the owner names the seating uses."""
        return PolicyMap({**self.learning.policies, **self.pool.seated_policies()}, self.learning.route)

    def learns(self, pid: str) -> bool:
        return pid in self.learning.policies

    def collect(self, worker: RolloutWorker, task_seeds: list[int], group_size: int, **kwargs: Any) -> RolloutBatch:
        """One iteration's rollouts: each task draws an entry that plays every side but the learner's, and
        the learner's results against it go into the pool's record."""
        entries = self.pool.draw(len(task_seeds), self.rng)
        batch = self.play(worker, task_seeds, entries, group_size, **kwargs)
        self.pool.record(batch, entries, self.learns)
        return batch

    def play(self, worker: RolloutWorker, task_seeds: list[int], entries: list[str], group_size: int,
             **kwargs: Any) -> RolloutBatch:
        """Task `k` (seed `task_seeds[k]`, `group_size` rollouts, group `k`) against `entries[k]`."""
        seats = [seating(self.probe, k, entries[k], self.learning.route)
                 for k in range(len(task_seeds)) for _ in range(group_size)]
        learning = worker.policies
        worker.policies = self.seated_map()
        try:
            return worker.collect(*task_groups(task_seeds, group_size), seats=seats, **kwargs)
        finally:
            worker.policies = learning

    def after_iteration(self, iteration: int) -> None:
        """A snapshot of every learning policy every `snapshot_every` iterations."""
        every = self.cfg.snapshot_every
        if every and iteration % every == 0:
            self.pool.add_snapshot({pid: frozen_snapshot(p) for pid, p in self.learning.policies.items()}, iteration)

    def metrics(self) -> dict[str, float]:
        return self.pool.metrics()

    def state_dict(self) -> dict[str, Any]:
        """What a resume point keeps of the pool: its entries and records, every snapshot's weights (and opponent
        head's), and the stream entries are drawn from."""
        return {"pool": self.pool.state(), "rng": self.rng.bit_generator.state,
                "snapshots": {name: {pid: policy_weights(p) for pid, p in by_id.items()}
                              for name, by_id in self.pool.snapshots.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Put `state_dict`'s record back; each snapshot is a frozen copy of its learning policy with the saved
        weights (the same architecture, so it acts as the saved one did)."""
        def snapshot(pid: str, saved: dict[str, Any]) -> Any:
            policy = frozen_snapshot(self.learning.policies[pid])
            load_policy_weights(policy, saved)
            return policy
        saved = state["snapshots"]
        self.pool = OpponentPool.from_state(state["pool"], lambda name: {pid: snapshot(pid, w)
                                                                         for pid, w in saved[name].items()})
        self.rng.bit_generator.state = state["rng"]

    def evaluate(self, worker: RolloutWorker, seeds: list[int]) -> dict[str, float]:
        """Greedy win rate and return of the learner against every entry and every held-out style, each on
        `seeds` (the learner's side alternating by seed): `eval/pool/<entry>/...`, `eval/pool/win_rate`
        (the mean over entries; over scripted ones and over snapshots: `eval/pool/styles/win_rate`,
        `eval/pool/snapshots/win_rate`), `eval/heldout/style/<style>/...` and `eval/heldout/win_rate`."""
        out: dict[str, float] = {}
        for prefix, names in (("eval/pool", self.pool.names),
                              ("eval/heldout", [STYLE_PREFIX + s for s in self.held_out])):
            rates = []
            for name in names:
                batch = self.play(worker, seeds, [name] * len(seeds), 1, greedy=True)
                mine = [ep for ep in batch.episodes if self.learns(ep.policy) and not ep.harness_fault]
                rate = float(np.mean([ep.reason == "success" for ep in mine])) if mine else 0.0
                key = f"{prefix}/{name}" if prefix == "eval/pool" else f"{prefix}/style/{name.removeprefix(STYLE_PREFIX)}"
                out[f"{key}/win_rate"] = rate
                out[f"{key}/return_mean"] = float(np.mean([ep.ret for ep in mine])) if mine else 0.0
                rates.append(rate)
            if rates:
                out[f"{prefix}/win_rate"] = float(np.mean(rates))
        for group, keep in (("styles", STYLE_PREFIX), ("snapshots", SNAPSHOT_PREFIX)):
            rates = [out[f"eval/pool/{n}/win_rate"] for n in self.pool.names if n.startswith(keep)]
            if rates:
                out[f"eval/pool/{group}/win_rate"] = float(np.mean(rates))
        return out
