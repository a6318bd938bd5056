"""How often a training run's actions explore (`rl.explore`, `rl.explore_unit`), and what it measured.

The rollout takes a per-action chance. Under `action` that is `rl.explore` itself; under `episode`,
`rl.explore` is the explored actions an episode should hold, so each action's chance is it over the
learners' actions per episode, measured on the previous batch: a team of eight explores as often per
episode as one agent, and a curriculum that grows the team keeps the rate. The first iteration of a run
(or of a resumed one: the measure is not kept) explores nothing while it measures. It leaves out the drawing
itself (`policies/sampling.py`).
"""

from __future__ import annotations

from marl.engine.records import RolloutBatch


class ExploreRate:
    """The per-action exploring chance of each collection, and the shares an iteration's batch explored."""

    def __init__(self, share: float, unit: str) -> None:
        self.share = share
        self.unit = unit
        self.actions_per_episode = 0.0  # the learners' actions per episode of the last batch (0: not measured yet)

    def per_action(self) -> float:
        """The chance each action of the next collection explores (0 under `episode` until a batch was measured)."""
        if self.unit == "action" or not self.share:
            return self.share
        if not self.actions_per_episode:
            return 0.0
        return min(self.share / self.actions_per_episode, self.share)

    def observe(self, mine: RolloutBatch) -> dict[str, float]:
        """Measure the learners' episodes of `mine`: `rollout/explored_share` (of their actions),
        `rollout/explored_episodes` (of episodes, a team's counted once, holding an explored action) and, under
        `episode`, `rollout/explore_chance` (the per-action chance this batch was played with)."""
        acted = [t for t in mine.turns if t.action_ids]
        envs: dict[int, bool] = {}
        for ep in mine.episodes:
            hit = any(mine.turns[i].explored for i in ep.turns)
            envs[ep.env] = envs.get(ep.env, False) or hit
        out = {"rollout/explored_share": sum(t.explored for t in acted) / max(len(acted), 1),
               "rollout/explored_episodes": sum(envs.values()) / max(len(envs), 1)}
        if self.unit == "episode":
            out["rollout/explore_chance"] = self.per_action()
            if envs:
                self.actions_per_episode = len(acted) / len(envs)
        return out
