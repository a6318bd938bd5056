"""The `ray` section of a training config: where rollout workers run when `rollout_workers > 0`.

Rollout workers are Ray actors, each holding its own environments and an inference copy of the policies
(`marl.run.remote`); the learner stays in the driving process. It leaves out the learner's own data
parallelism and the choice of how many workers (`rollout_workers`, a top-level field).
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.config.checks import SelfChecking, positive, require


@dataclass
class RayConfig(SelfChecking):
    """The Ray cluster rollout workers run on and what each worker gets."""

    address: str | None = None
    """Ray cluster to join (`auto`, or `ray://host:10001`); unset: $RAY_ADDRESS, else a local cluster started for the run."""
    cpus_per_worker: float = 1.0
    """CPUs Ray reserves for each rollout worker (its torch threads follow, at least one)."""
    gpus_per_worker: float = 0.0
    """GPUs (or a fraction of one) Ray reserves for each rollout worker; its policies then run on that GPU."""
    async_rollouts: bool = False
    """Play the next iteration's episodes on the workers while the learner updates: one step off-policy, which
    PPO's ratio against the logprobs the rollout sampled with corrects (not with an opponent pool or a curriculum)."""
    max_restarts: int = 3
    """Times Ray restarts a rollout worker whose process died; its unfinished part of an iteration is played again."""

    def validate(self) -> RayConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        positive("ray.cpus_per_worker", self.cpus_per_worker)
        positive("ray.gpus_per_worker", self.gpus_per_worker, allow_zero=True)
        positive("ray.max_restarts", self.max_restarts, allow_zero=True)
        require(self.address is None or bool(self.address.strip()), "ray.address is empty: leave it unset or name "
                "a cluster (auto, ray://host:10001)")
        return self
