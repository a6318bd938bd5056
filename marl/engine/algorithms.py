"""RL algorithms, registered by name with capability flags, and how each turns a batch into advantages.

| name  | critic                                   | advantages                                   | groups |
|-------|------------------------------------------|----------------------------------------------|--------|
| mappo | centralized: `state()` + agent id        | per-turn GAE, normalized per agent or role   | no     |
| ippo  | decentralized: the agent's conversation  | per-turn GAE, normalized per agent or role   | no     |
| grpo  | none                                     | group baseline over rollouts of one seed, per agent; or a running per-role baseline (`rl.baseline running`, competitive self-play) | yes (group baseline) |

All three share the rollout, the PPO-clip update and the open loss (`marl.engine.learner`); an algorithm
only decides what reads values and how advantages are formed. Adding one is a name in
`marl.config.choices.Algo`, what it needs in `ALGORITHM_NEEDS` (config validation reads it) and an
entry here; a test holds the three equal.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marl.config.choices import ALGORITHM_NEEDS, AlgorithmNeeds
from marl.engine.advantages import Advantages, RunningBaseline, gae_advantages, group_advantages, per_turn
from marl.engine.rollout import RolloutBatch


@dataclass(frozen=True)
class Algorithm:
    """An RL algorithm's name, one-line summary and what it needs from the run."""

    name: str
    summary: str

    @property
    def needs(self) -> AlgorithmNeeds:
        return ALGORITHM_NEEDS[self.name]

    @property
    def critic(self) -> str | None:
        """`centralized` (reads the global state), `decentralized` (reads the agent's own view) or None."""
        return self.needs.critic

    @property
    def centralized_critic(self) -> bool:
        return self.needs.centralized_critic

    def advantages(self, batch: RolloutBatch, critic: Any, gamma: float, lam: float,
                   role_of: Callable[[str], str], baseline: RunningBaseline | None = None) -> Advantages:
        """Per-turn advantages (and value targets for critic-based algorithms) of `batch`."""
        if self.critic is not None:
            values, bootstrap = critic.batch_values(batch)
            return gae_advantages(batch, values, bootstrap, gamma, lam, normalize_key=role_of)
        if baseline is not None:
            return per_turn(batch, baseline(batch.episodes, role_of))
        return per_turn(batch, group_advantages(batch.episodes))


ALGORITHMS: dict[str, Algorithm] = {
    "mappo": Algorithm("mappo", "PPO-clip, centralized critic on the global state + agent id, per-turn GAE"),
    "ippo": Algorithm("ippo", "PPO-clip, independent critic on the agent's own observations, per-turn GAE"),
    "grpo": Algorithm("grpo", "critic-free PPO-clip, group baseline over rollouts of the same seed per agent"),
}
"""One entry per name of `marl.config.choices.Algo` (a test holds the two equal)."""


def get(name: str) -> Algorithm:
    """The algorithm registered under `name`, or a ValueError listing the choices."""
    if name not in ALGORITHMS:
        raise ValueError(f"algo={name!r} is unknown; choose one of {sorted(ALGORITHMS)}")
    return ALGORITHMS[name]
