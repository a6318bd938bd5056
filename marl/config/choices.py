"""The closed sets of choices a config may name, as `Literal` types, and what each algorithm needs.

These are the one definition of every choice: the config fields are typed with them (so `--help`
and YAML validation list the choices), and the engine reads the same names (`marl.engine.algorithms`,
`marl.engine.policy_map`, `marl.engine.critic`), so a choice cannot exist in one place and not the
other. Left out: anything about how an algorithm computes (that is the engine's).
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Literal

Algo = Literal["grpo", "mappo", "ippo"]
"""`grpo` (critic-free group baseline), `mappo` (centralized critic), `ippo` (independent critic)."""
PolicyMapping = Literal["shared", "team", "agent"]
"""Which agents share a model: all of them, each team, or none."""
Ratio = Literal["token", "sequence"]
"""PPO's token-level importance ratio, or GSPO's length-normalized sequence ratio."""
Baseline = Literal["group", "running"]
"""Critic-free baseline: rollouts of the same seed, or a running mean per role."""
NormalizeBy = Literal["agent", "role"]
"""Advantages are normalized within each agent or each role (team)."""
ExploreUnit = Literal["action", "episode"]
"""What `rl.explore` is a share of: each action's chance, or explored actions per episode."""
StateView = Literal["global", "own_last", "own_team", "with_own", "own_and_state"]
"""What a centralized critic reads (see `marl.engine.critic`)."""
CommsMode = Literal["observation", "message", "both"]
"""What travels between graph neighbours."""
OpponentModel = Literal["off", "aux", "aux+input"]
"""`off`; `aux`: an opponent-model head trained by cross-entropy beside the policy (an auxiliary loss);
`aux+input`: that head, whose prediction is also shown to the agent before it acts."""
PoolSampling = Literal["off", "uniform", "pfsp"]
"""No opponent pool, or one whose entries are drawn uniformly or by prioritized fictitious self-play."""
Dtype = Literal["auto", "float32", "bfloat16"]
"""Weights' dtype; `auto`: bfloat16 for a frozen LoRA base on a GPU that supports it, else float32."""
EvalPolicy = Literal["checkpoint", "expert", "random", "untrained"]
"""What `marl eval` plays: a checkpoint, or a baseline."""

def options(choice: object) -> tuple[str, ...]:
    """The values a `Literal` type admits, in declaration order."""
    return tuple(typing.get_args(choice))

@dataclass(frozen=True)
class AlgorithmNeeds:
    """What an algorithm needs from the run, which config validation checks before anything starts."""

    critic: Literal["centralized", "decentralized"] | None
    """`centralized` (reads the global state), `decentralized` (reads the agent's own view) or None."""
    needs_groups: bool
    """Needs several rollouts of each task seed (a group baseline)."""

    @property
    def centralized_critic(self) -> bool:
        return self.critic == "centralized"

ALGORITHM_NEEDS: dict[str, AlgorithmNeeds] = {
    "grpo": AlgorithmNeeds(critic=None, needs_groups=True),
    "mappo": AlgorithmNeeds(critic="centralized", needs_groups=False),
    "ippo": AlgorithmNeeds(critic="decentralized", needs_groups=False),
}
