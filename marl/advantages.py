"""Advantage estimators. Today: the critic-free group baseline (GRPO-style).

Episodes that share a task seed and an agent id form a group; an episode's advantage is its return
minus the group mean, divided by the group std. Normalizing inside (seed, agent) groups is
normalizing per agent, never across all agents at once (that causes gradient spikes, Dr. MAS).

Endings (DESIGN.md): `success`/`failure` count with their return; `max_turns` counts with the
reward earned so far (running out of turns is the agent's doing, and a critic-free baseline has no
value to bootstrap from); `timeout`/`error` are harness faults: excluded from the loss and from the
group statistics. Groups whose remaining returns have zero variance carry no signal: dropped and
counted. Per-turn GAE with a critic (mappo/ippo) is left for the critic-based learner.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from marl.rollout import HARNESS_FAULTS, Episode


@dataclass
class GroupAdvantages:
    """Per-episode advantages and which episodes enter the loss, with the counts behind them."""

    advantages: np.ndarray
    include: np.ndarray
    groups: int
    zero_variance_groups: int
    harness_faults: int


def group_advantages(episodes: Sequence[Episode], eps: float = 1e-6) -> GroupAdvantages:
    """Group-relative advantages over episodes grouped by (task group, agent)."""
    adv = np.zeros(len(episodes), dtype=np.float64)
    include = np.zeros(len(episodes), dtype=bool)
    members: dict[tuple[int, str], list[int]] = defaultdict(list)
    faults = 0
    for idx, ep in enumerate(episodes):
        if ep.reason in HARNESS_FAULTS:
            faults += 1
            continue
        members[(ep.group, ep.agent)].append(idx)
    zero = 0
    for idxs in members.values():
        returns = np.array([episodes[i].ret for i in idxs], dtype=np.float64)
        if len(idxs) < 2 or returns.std() < eps:
            zero += 1
            continue
        adv[idxs] = (returns - returns.mean()) / (returns.std() + eps)
        include[idxs] = True
    return GroupAdvantages(advantages=adv, include=include, groups=len(members),
                           zero_variance_groups=zero, harness_faults=faults)
