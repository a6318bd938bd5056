"""The curriculum inside a training run: each stage's environments, stage draws per task, growing the
team, the figures and the end-of-run picture.

`CurriculumRun` wraps a `Curriculum` (`marl.engine.curriculum`) with what a run needs around it: one env
factory per stage (team size, split, options; comms rebuilt for the stage's team), handed to the rollout
worker as variants so one batch mixes the current stage with replayed earlier ones in the same generate
calls; after each batch the per-agent success of every stage's episodes and the move it decides.

Newcomers: a shared policy, or one per team, simply plays the larger team. Under `agent` mapping an
agent id that no policy plays yet gets a copy of the current (trained) policy of the existing agent
most like it: the first one of its team where the scenario has teams, else the agent whose place in
the team is the newcomer's modulo the existing agents (agent_2 <- agent_0, agent_3 <- agent_1). Its
learner starts with a fresh optimizer, the source's KL reference and a copy of the source's critic.

It leaves out the stage machine itself (the engine's) and the learners (`marl.run.train`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from marl.config import TrainConfig
from marl.config.curriculum import Stage
from marl.engine.curriculum import Curriculum, Move
from marl.engine.policy_map import PolicyMap
from marl.engine.rollout import Episode, RolloutBatch, RolloutWorker, task_groups
from marl.run.build import EnvFactory, clone_policy, env_factory


def stage_factory(cfg: TrainConfig, stage: Stage, split: str | None = None) -> EnvFactory:
    """The env factory of `stage` (on `split`, default the stage's own training split)."""
    options = {**cfg.scenario_options, **dict(stage.options)}
    return env_factory(cfg.scenario, stage.agents, split or stage.split or cfg.train_split, options, cfg.comms)


def team_success(episodes: list[Episode]) -> float:
    """Per-agent normalized success of one environment's episode: the share of its agents that succeeded."""
    return float(np.mean([ep.reason == "success" for ep in episodes]))


class CurriculumRun:
    """A run's curriculum: stage factories, the stage of each task, and what each batch says."""

    def __init__(self, cfg: TrainConfig) -> None:
        self.cfg = cfg
        self.curriculum = Curriculum.from_config(cfg.curriculum)
        self.factories = {s.name: stage_factory(cfg, s) for s in self.curriculum.stages}
        self.rng = np.random.default_rng([cfg.seed, 0xC0DE])  # task seeds stay those of a run without one
        self.trace: list[dict[str, float]] = []
        """Per iteration: env steps so far, stage, team size, window success and each stage's success."""

    @property
    def stages(self) -> list[Stage]:
        return self.curriculum.stages

    @property
    def first_factory(self) -> EnvFactory:
        """The first stage's env factory: where the run starts (SFT demonstrations, the tokenizer's corpus)."""
        return self.factories[self.stages[0].name]

    def collect(self, worker: RolloutWorker, task_seeds: list[int], group_size: int, **kwargs: Any) -> RolloutBatch:
        """One iteration's rollouts: each task (a whole group) in the stage drawn for it, all in one batch."""
        drawn = self.curriculum.draw_stages(len(task_seeds), self.rng)
        variants = [self.stages[k].name for k in drawn for _ in range(group_size)]
        return worker.collect(*task_groups(task_seeds, group_size), variants=variants, **kwargs)

    def after_batch(self, batch: RolloutBatch, iteration: int, env_steps: int) -> Move | None:
        """Record each environment's per-agent success under its stage (harness faults left out: they say
        nothing of the team's play), then let the curriculum decide; `env_steps`: the run's total so far
        (the trace's x-axis)."""
        index = {s.name: k for k, s in enumerate(self.stages)}
        by_env: dict[int, list[Episode]] = {}
        for ep in batch.episodes:
            by_env.setdefault(ep.env, []).append(ep)
        for eps in by_env.values():
            if eps[0].variant in index and not any(ep.harness_fault for ep in eps):
                self.curriculum.record(index[eps[0].variant], [team_success(eps)])
        played = self.curriculum.metrics()  # the stage this batch trained on, before the move it decides
        move = self.curriculum.step(iteration)
        moves = {k: v for k, v in self.curriculum.metrics().items() if k.endswith(("/promotions", "/demotions"))}
        self.trace.append({"iteration": float(iteration), "env_steps": float(env_steps), **played, **moves})
        return move

    def metrics(self) -> dict[str, float]:
        """The `curriculum/*` figures of the latest batch: the stage it trained on, its success, the moves so far."""
        return {k: v for k, v in self.trace[-1].items() if k.startswith("curriculum/")} if self.trace else {}

    def newcomers(self, policies: PolicyMap, stage: Stage) -> list[tuple[str, str]]:
        """Give every agent of `stage` that no policy plays a copy of its source's (see the module doc);
        returns (new policy id, source policy id) pairs (none under `shared` or `team` mapping)."""
        env = self.factories[stage.name]()
        env.reset(seed=0)
        added = []
        known = [a for a in env.possible_agents if policies.route(env, a) in policies.policies]  # the team before
        for place, agent in enumerate(env.possible_agents):
            pid = policies.route(env, agent)
            if pid in policies.policies:
                continue
            if not known:
                raise RuntimeError(f"stage {stage.name}: no agent of the team has a policy to copy for {agent}")
            team = env.team_of(agent)
            mates = [a for a in known if team and env.team_of(a) == team]
            source = policies.route(env, mates[0] if mates else known[place % len(known)])
            policies.policies[pid] = clone_policy(policies[source])
            added.append((pid, source))
        return added

    def eval_stages(self, policies: PolicyMap) -> list[Stage]:
        """One stage per distinct team (size and options) that every agent of has a policy, in order."""
        out: list[Stage] = []
        for stage in self.stages:
            if any(s.team == stage.team for s in out):
                continue
            env = self.factories[stage.name]()
            env.reset(seed=0)
            if all(policies.route(env, a) in policies.policies for a in env.possible_agents):
                out.append(stage)
        return out

    def furthest(self) -> Stage:
        """The furthest stage the run has reached."""
        return self.stages[max([self.curriculum.stage, *(m.target for m in self.curriculum.history)])]

    def state_dict(self) -> dict[str, Any]:
        return {**self.curriculum.state_dict(), "env_steps": self.trace[-1]["env_steps"] if self.trace else 0.0,
                "trace": self.trace, "rng": self.rng.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Carry on from `state_dict()` (a resumed run): the stage and its window, the trace, the stage draws."""
        self.curriculum.load_state_dict(state)
        self.trace = [dict(row) for row in state["trace"]]
        self.rng.bit_generator.state = state["rng"]

    def draw(self, path: Path) -> Path:
        """A PNG of the team size and success (window and per stage) against env steps, moves marked."""
        from matplotlib.backends.backend_agg import FigureCanvasAgg  # lazy: Agg, no display, no pyplot state
        from matplotlib.figure import Figure

        path.parent.mkdir(parents=True, exist_ok=True)
        fig = Figure(figsize=(7, 5), dpi=100)
        FigureCanvasAgg(fig)
        top, bottom = fig.subplots(2, 1, sharex=True)
        # each batch's team size over the env steps it played (the segment up to its row)
        steps = [0.0] + [row["env_steps"] for row in self.trace]
        sizes = [self.trace[0]["curriculum/n_agents"]] + [row["curriculum/n_agents"] for row in self.trace]
        top.step(steps, sizes, where="pre", color="#3182bd")
        top.set_ylabel("agents (stage)")
        window = [(row["env_steps"], row["curriculum/window_success"]) for row in self.trace
                  if "curriculum/window_success" in row]
        if window:
            bottom.plot(*zip(*window, strict=True), color="black", label="current stage (window)")
        for stage in self.stages:
            key = f"curriculum/success/{stage.name}"
            points = [(row["env_steps"], row[key]) for row in self.trace if key in row]
            if points:
                bottom.plot(*zip(*points, strict=True), alpha=0.6, label=stage.name)
        for value in (self.cfg.curriculum.promote_at, self.cfg.curriculum.demote_at):
            bottom.axhline(value, color="grey", linestyle=":", linewidth=1)
        for move in self.curriculum.history:
            x = next((row["env_steps"] for row in self.trace if row["iteration"] == move.iteration), None)
            if x is not None:
                for ax in (top, bottom):
                    ax.axvline(x, color="green" if move.target > move.source else "red", alpha=0.4)
        bottom.set_ylim(-0.02, 1.02)
        bottom.set_ylabel("success")
        bottom.set_xlabel("env steps")
        bottom.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        fig.savefig(path, format="png")
        return path
