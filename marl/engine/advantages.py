"""Advantage estimators: per-turn advantages (and value targets) for every turn of a rollout batch.

- `group_advantages` (critic-free, `grpo`): episodes that share a task seed and an agent id form a
  group; an episode's advantage is its return minus the group mean over the group std, given to
  every one of its turns. Groups with zero variance carry no signal: dropped and counted.
- `RunningBaseline` (critic-free, competitive self-play): a running mean and variance of returns
  per role across iterations, for when the same seed's rollouts are not comparable (the opponent
  is learning too) or there is one rollout per seed.
- `gae_advantages` (`mappo`, `ippo`): generalized advantage estimation over each agent's own turns
  from a critic's values, then normalized per agent (or per role).

Normalization is always within an agent (or role), never across all agents at once (that causes
gradient spikes, Dr. MAS). Endings (DESIGN.md): `success`/`failure` are terminal (the value after
the last turn is 0); so is `max_turns` when the agent was shown its turn budget
(`Episode.budget_visible`, the scenario's declaration): finishing within it is part of the task.
A `max_turns` cut the agent could not see is a truncation: GAE bootstraps from the critic's value
of the state the agent was left in. The critic-free baselines count either with the reward earned
so far (there is no value to bootstrap from);
`timeout`/`error` are harness faults: every turn of such an episode, and in a team that shares one
outcome every teammate's (`Episode.harness_fault`), is out of the loss, of the group statistics and
of the normalization, and counted. Agents that finished early simply have no
turns after their end, so nothing of theirs is padded into later steps (the active mask is the
turn list itself).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from marl.engine.rollout import Episode, RolloutBatch

TERMINAL_REASONS = frozenset({"success", "failure"})


@dataclass
class GroupAdvantages:
    """Per-episode advantages and which episodes enter the loss, with the counts behind them."""

    advantages: np.ndarray
    include: np.ndarray
    groups: int
    zero_variance_groups: int
    harness_faults: int


@dataclass
class Advantages:
    """Per-turn advantages (indexed like `batch.turns`), the turns in the loss, and value targets."""

    advantages: np.ndarray
    include: np.ndarray
    returns: np.ndarray | None = None
    """Value targets per turn (critic-based algorithms only)."""
    groups: int = 0
    zero_variance_groups: int = 0
    harness_faults: int = 0
    explained_variance: float | None = None
    """How much of the value targets' variance the critic's values explained, on this batch's fresh
    rollouts before the critic trained on them (critic-based algorithms only)."""
    empirical_return_mean: float | None = None
    """Mean over the turns in the loss of the discounted reward actually earned from the turn to the
    episode's end, nothing bootstrapped: what the value targets (`train/return_target_mean`) should
    match on average when the critic is right about how episodes end (critic-based algorithms only)."""

    def metrics(self) -> dict[str, float]:
        """The counts as `rollout/*` metrics, and the critic's explained variance."""
        out = {"rollout/harness_fault_episodes": float(self.harness_faults),
               "rollout/turns_in_loss": float(self.include.sum())}
        if self.groups:
            out["rollout/zero_variance_group_frac"] = self.zero_variance_groups / self.groups
        if self.explained_variance is not None:
            out["train/explained_variance"] = self.explained_variance
        if self.empirical_return_mean is not None and self.returns is not None:
            out["train/empirical_return_mean"] = self.empirical_return_mean
            out["train/return_target_mean"] = float(self.returns[self.include].mean())
        return out


def anchored_turns(batch: RolloutBatch) -> np.ndarray:
    """Per turn: the policy generated it and its episode is not a harness fault, so its KL to the
    reference and its entropy belong in the loss, whether or not its advantage carries a signal."""
    anchor = np.zeros(len(batch.turns), dtype=bool)
    for ep in batch.episodes:
        if not ep.harness_fault:
            for i in ep.turns:
                anchor[i] = bool(batch.turns[i].action_ids)
    return anchor


def group_advantages(episodes: Sequence[Episode], eps: float = 1e-6) -> GroupAdvantages:
    """Group-relative advantages over episodes grouped by (task group, agent)."""
    adv = np.zeros(len(episodes), dtype=np.float64)
    include = np.zeros(len(episodes), dtype=bool)
    members: dict[tuple[int, str], list[int]] = defaultdict(list)
    faults = 0
    for idx, ep in enumerate(episodes):
        if ep.harness_fault:
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


def per_turn(batch: RolloutBatch, episode_adv: GroupAdvantages) -> Advantages:
    """Give each turn its episode's advantage (critic-free estimators credit the whole episode)."""
    n = len(batch.turns)
    adv = np.zeros(n, dtype=np.float64)
    include = np.zeros(n, dtype=bool)
    for e, ep in enumerate(batch.episodes):
        for i in ep.turns:
            adv[i] = episode_adv.advantages[e]
            include[i] = bool(episode_adv.include[e])
    return Advantages(advantages=adv, include=include, groups=episode_adv.groups,
                      zero_variance_groups=episode_adv.zero_variance_groups,
                      harness_faults=episode_adv.harness_faults)


class RunningBaseline:
    """Per-role exponential moving mean and variance of episode returns, carried across iterations."""

    def __init__(self, momentum: float = 0.9) -> None:
        if not 0.0 <= momentum < 1.0:
            raise ValueError(f"momentum={momentum} must lie in [0, 1)")
        self.momentum = momentum
        self.mean: dict[str, float] = {}
        self.var: dict[str, float] = {}

    def __call__(self, episodes: Sequence[Episode], role_of: Callable[[str], str], eps: float = 1e-6) -> GroupAdvantages:
        """Advantages against the baseline as it stood before this batch; then fold the batch in."""
        adv = np.zeros(len(episodes), dtype=np.float64)
        include = np.zeros(len(episodes), dtype=bool)
        by_role: dict[str, list[int]] = defaultdict(list)
        faults = 0
        for idx, ep in enumerate(episodes):
            if ep.harness_fault:
                faults += 1
                continue
            by_role[role_of(ep.agent)].append(idx)
        for role, idxs in by_role.items():
            returns = np.array([episodes[i].ret for i in idxs], dtype=np.float64)
            if role not in self.mean:  # first sight of a role: the batch itself is the baseline
                self.mean[role], self.var[role] = float(returns.mean()), float(returns.var())
            # A role whose returns have not varied yet (all failures early in RL) is only centred:
            # dividing by a zero spread would turn the first success into a 1e6 advantage.
            scale = np.sqrt(self.var[role]) if self.var[role] > eps else 1.0
            adv[idxs] = (returns - self.mean[role]) / scale
            include[idxs] = True
            m = self.momentum
            batch_mean = float(returns.mean())
            self.var[role] = m * self.var[role] + (1 - m) * float(((returns - self.mean[role]) ** 2).mean())
            self.mean[role] = m * self.mean[role] + (1 - m) * batch_mean
        return GroupAdvantages(advantages=adv, include=include, groups=0, zero_variance_groups=0,
                               harness_faults=faults)


def gae(rewards: Sequence[float], values: Sequence[float], bootstrap: float, gamma: float,
        lam: float) -> tuple[np.ndarray, np.ndarray]:
    """GAE over one agent's turns: (advantages, value targets).

    `values[t]` is the critic's value before turn t; `bootstrap` the value after the last turn
    (0 when the episode terminated, the critic's value of the final state when it was truncated).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    values = np.asarray(values, dtype=np.float64)
    if rewards.shape != values.shape:
        raise ValueError(f"{len(rewards)} rewards but {len(values)} values")
    adv = np.zeros_like(rewards)
    running = 0.0
    next_value = float(bootstrap)
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * next_value - values[t]
        running = delta + gamma * lam * running
        adv[t] = running
        next_value = values[t]
    return adv, adv + values


def discounted_to_go(rewards: Sequence[float], gamma: float) -> np.ndarray:
    """Per turn, the discounted sum of the rewards from that turn to the last (nothing after it)."""
    return gae(rewards, np.zeros(len(rewards)), 0.0, gamma, 1.0)[1]  # with no values, the targets are just that


def bootstrap_needed(ep: Episode) -> bool:
    """Whether an episode's last turn is followed by a state whose value the critic must supply: a cut
    the agent could not see (a `max_turns` ending of a budget it was not shown), never an outcome."""
    visible_budget = ep.reason == "max_turns" and ep.budget_visible
    return ep.reason not in TERMINAL_REASONS and not visible_budget and not ep.harness_fault


def explained_variance(pred: np.ndarray, target: np.ndarray) -> float:
    """1 - Var(target - pred) / Var(target): 1 explains all, 0 no better than the mean (0 for constant targets)."""
    var = float(np.var(target))
    return float(1.0 - np.var(target - pred) / var) if var > 1e-8 else 0.0


def gae_advantages(
    batch: RolloutBatch,
    values: np.ndarray,
    bootstrap: np.ndarray,
    gamma: float,
    lam: float,
    normalize_key: Callable[[str], str] = lambda agent: agent,
    eps: float = 1e-6,
) -> Advantages:
    """Per-turn GAE for every agent-episode, normalized within each `normalize_key(agent)`.

    `values` is indexed like `batch.turns`; `bootstrap` like `batch.episodes` (read only for
    episodes cut where the agent could not see it coming, see `bootstrap_needed`; every other
    ending is valued 0 after its last turn).
    """
    n = len(batch.turns)
    adv = np.zeros(n, dtype=np.float64)
    returns = np.zeros(n, dtype=np.float64)
    include = np.zeros(n, dtype=bool)
    earned = np.zeros(n, dtype=np.float64)
    faults = 0
    by_key: dict[str, list[int]] = defaultdict(list)
    for e, ep in enumerate(batch.episodes):
        if ep.harness_fault:
            faults += 1
            continue
        if not ep.turns:
            continue
        idx = list(ep.turns)
        tail = float(bootstrap[e]) if bootstrap_needed(ep) else 0.0
        rewards = [batch.turns[i].reward for i in idx]
        a, r = gae(rewards, values[idx], tail, gamma, lam)
        adv[idx], returns[idx] = a, r
        earned[idx] = discounted_to_go(rewards, gamma)
        include[idx] = True
        by_key[normalize_key(ep.agent)].extend(idx)
    explained = earned_mean = None
    if include.any():
        explained = explained_variance(np.asarray(values, dtype=np.float64)[include], returns[include])
        earned_mean = float(earned[include].mean())
    for idx in by_key.values():
        block = adv[idx]
        centered = block - block.mean()
        adv[idx] = centered / (block.std() + eps) if len(idx) > 1 and block.std() > eps else centered
    return Advantages(advantages=adv, include=include, returns=returns, harness_faults=faults,
                      explained_variance=explained, empirical_return_mean=earned_mean)
