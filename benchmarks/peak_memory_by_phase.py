"""Peak resident memory of a `marl train` run, split by the phase the process was in at the time.

A sampler thread reads the process's resident set (VmRSS) every 50 ms and charges it to the phase
running then: SFT, rollout collection, the centralized critic's batch values, the critic's step, the
policy update (its own time, less the critic step inside it), the final evaluation, or `other`
(setup, advantages, logging, checkpointing). Resident memory is cumulative, so a phase's peak
includes the heap the phases before it left behind; what the table locates is where the run's
peak happens and how each phase's peak moves when one flag changes (the batch size, say).
It leaves out allocation tracing: for the Python objects behind a figure use `tracemalloc`.

    python benchmarks/peak_memory_by_phase.py --scenario info_split --agents 3 --algo mappo \
        --iterations 2 --sft.seconds 20 --eval-episodes 0 --rl.tasks-per-iteration 32

Every argument goes to `marl train` as is.
"""

from __future__ import annotations

import functools
import sys
import threading
import time
from typing import Any

import marl.run.outputs as outputs
import marl.run.train as train
from marl.cli.main import main
from marl.engine.critic import Critic
from marl.engine.learner import Learner
from marl.engine.rollout import RolloutWorker


class PhaseSampler:
    """Peak VmRSS (GB) per phase label; `during` wraps a function so its calls run under a label."""

    def __init__(self, period_s: float = 0.05) -> None:
        self.phase = "other"
        self.peaks: dict[str, float] = {}
        self.period_s = period_s
        threading.Thread(target=self._sample, daemon=True).start()

    @staticmethod
    def rss_gb() -> float:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS"):
                    return int(line.split()[1]) / 1e6
        return float("nan")

    def _sample(self) -> None:
        while True:
            phase, rss = self.phase, self.rss_gb()
            self.peaks[phase] = max(self.peaks.get(phase, 0.0), rss)
            time.sleep(self.period_s)

    def during(self, owner: Any, name: str, label: str) -> None:
        fn = getattr(owner, name)

        @functools.wraps(fn)
        def labelled(*args: Any, **kwargs: Any) -> Any:
            outer, self.phase = self.phase, label
            try:
                return fn(*args, **kwargs)
            finally:
                self.phase = outer

        setattr(owner, name, labelled)


def run(argv: list[str]) -> dict[str, float]:
    """`marl train argv` under the sampler; prints and returns the peak per phase."""
    sampler = PhaseSampler()
    sampler.during(train, "_warm_start", "sft")
    sampler.during(RolloutWorker, "collect", "rollout")
    sampler.during(Critic, "batch_values", "critic_values")
    sampler.during(Learner, "update", "update")
    sampler.during(Learner, "_critic_step", "critic_step")
    sampler.during(outputs, "final_eval", "final_eval")
    try:
        main(["train", *argv])
    finally:
        time.sleep(2 * sampler.period_s)
        width = max(map(len, sampler.peaks), default=0)
        for phase, peak in sorted(sampler.peaks.items(), key=lambda kv: -kv[1]):
            print(f"peak_rss_gb {phase:<{width}} {peak:.2f}")
    return dict(sampler.peaks)


if __name__ == "__main__":
    run(sys.argv[1:])
