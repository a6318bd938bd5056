"""The learners of a run: one per policy, the newcomers a curriculum brings, and their state for resuming.

`build_learners` gives every policy of a mapping its own optimizer, frozen KL reference, KL controller,
critic and demonstrations; `newcomer_learner` builds the learner of a policy a curriculum copied from
another. `trainer_state` gathers what a resume point holds of the RL phase (every learner, running
baselines, the run's generators, a curriculum) and `restore_trainer` puts it back into learners built
the same way.

It leaves out the training loop (`marl.run.train`) and the files (`marl.run.resume`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import scenarios
from marl.config import RLConfig, TrainConfig
from marl.engine.advantages import RunningBaseline
from marl.engine.learner import Learner
from marl.engine.learner_state import learner_state, restore_learner
from marl.engine.policy_map import PolicyMap, policy_id
from marl.run.build import build_critic, frozen_reference
from marl.run.resume import global_generators, restore_global_generators, save_resume_point


def demos_for(demos: dict[str, list[Any]] | None, owner: dict[str, str], pid: str) -> dict[str, list[Any]] | None:
    """The demonstrations of the agents that policy `pid` plays."""
    if demos is None:
        return None
    keep = [i for i, agent in enumerate(demos["agents"]) if owner.get(agent) == pid]
    return {key: [demos[key][i] for i in keep] for key in ("input_ids", "assistant_masks")}


def role_function(cfg: TrainConfig, *make_envs: Any) -> Any:
    """Agent -> normalization key: the agent itself, or its team (`rl.normalize_by role`), for the agents of
    every env factory given (a curriculum's stages bring further agents)."""
    if cfg.rl.normalize_by == "agent":
        return _identity
    kind = scenarios.info(cfg.scenario).kind
    roles = {}
    for make_env in make_envs:
        env = make_env()
        env.reset(seed=0)
        roles.update({agent: policy_id("team", env, agent, kind) for agent in env.possible_agents})
    return roles.__getitem__


def _identity(agent: str) -> str:
    return agent


def rl_settings(cfg: TrainConfig) -> RLConfig:
    """The RL section a learner steps with: LoRA adapters take `lora.learning_rate` when it is set."""
    if cfg.lora.rank > 0 and cfg.lora.learning_rate > 0:
        return dataclasses.replace(cfg.rl, learning_rate=cfg.lora.learning_rate)
    return cfg.rl


def build_learners(cfg: TrainConfig, policies: PolicyMap, chat: Any, demos: Any, make_env: Any) -> dict[str, Learner]:
    """One learner per policy, each with its own optimizer, reference, KL controller, critic and demonstrations."""
    probe = make_env()
    probe.reset(seed=0)
    owner = {agent: policies.policy_of(probe, agent) for agent in probe.possible_agents}
    return {pid: Learner(policy, frozen_reference(policy), rl_settings(cfg), cfg.policy.router_aux_loss_coef,
                         seed=cfg.seed + k, critic=build_critic(cfg, policy, chat, seed=cfg.seed + k),
                         demonstrations=demos_for(demos, owner, pid))
            for k, (pid, policy) in enumerate(policies.policies.items())}


def newcomer_learner(cfg: TrainConfig, policy: Any, source: Learner, chat: Any, seed: int) -> Learner:
    """The learner of a policy copied from `source`'s (a curriculum's newcomer): a fresh optimizer, the
    source's KL reference (the same warm start) and a copy of its critic."""
    critic = build_critic(cfg, policy, chat, seed=seed)
    if critic is not None:
        critic.model.load_state_dict(source.critic.model.state_dict())
    return Learner(policy, source.reference, rl_settings(cfg), cfg.policy.router_aux_loss_coef, seed=seed,
                   critic=critic)


def trainer_state(learners: dict[str, Learner], baselines: dict[str, RunningBaseline], rng: np.random.Generator,
                  demo_rng: dict[str, Any], parts: dict[str, Any] | None = None) -> dict[str, Any]:
    """What a resume point holds of the RL phase, as plain data (`demo_rng`: the state demonstrations were
    drawn at, so PPO-ptx gets the same ones back; `parts`: the run's further stateful pieces by name, a
    curriculum, an opponent pool, the alerts, each with `state_dict()`, None where the run has none)."""
    return {"learners": {pid: learner_state(lr) for pid, lr in learners.items()},
            "baselines": {pid: {"mean": dict(b.mean), "var": dict(b.var)} for pid, b in baselines.items()},
            "rng": rng.bit_generator.state, "demo_rng": demo_rng, "globals": global_generators(),
            **{name: part.state_dict() if part is not None else None for name, part in (parts or {}).items()}}


def restore_trainer(state: dict[str, Any], learners: dict[str, Learner], baselines: dict[str, RunningBaseline],
                    rng: np.random.Generator, parts: dict[str, Any] | None = None) -> None:
    """Put `trainer_state`'s record back; the learners (and the policies they train) must be built first."""
    if set(state["learners"]) != set(learners):
        raise ValueError(f"the resume point holds learners {sorted(state['learners'])}, this run built "
                         f"{sorted(learners)}")
    for pid, learner in learners.items():
        restore_learner(learner, state["learners"][pid])
    for pid, saved in state["baselines"].items():
        baselines[pid].mean, baselines[pid].var = dict(saved["mean"]), dict(saved["var"])
    rng.bit_generator.state = state["rng"]
    for name, part in (parts or {}).items():  # the point's own config built the same parts
        if part is not None and state.get(name) is not None:
            part.load_state_dict(state[name])
    restore_global_generators(state["globals"])


@dataclass
class ResumeWriter:
    """Writes a run's resume points (`marl.run.resume`): the config, where, and what the run has drawn."""

    cfg: TrainConfig
    run_dir: Path
    run_id: str
    tokenizer: Any
    demo_rng: dict[str, Any]
    """The state of the run's generator when demonstrations were drawn (PPO-ptx draws them again on resume)."""
    log_artifacts: Callable[[Path, str], None] | None = None
    """Where set, each point is also logged as the run's artifact `resume/it-N` (`Tracker.log_artifacts`)."""

    def due(self, iteration: int) -> bool:
        every = self.cfg.checkpoint.every
        return every > 0 and iteration % every == 0

    def save(self, iteration: int, progress: dict[str, float], rl_seconds: float, learners: dict[str, Learner],
             baselines: dict[str, RunningBaseline], rng: np.random.Generator,
             parts: dict[str, Any] | None = None) -> Path | None:
        """The point after `iteration` (`progress`: the run's step counts so far, the best evaluation's score)."""
        if self.cfg.checkpoint.every <= 0:
            return None
        info = {"iteration": iteration, **progress, "rl_seconds": rl_seconds, "run_id": self.run_id,
                "config": dataclasses.asdict(self.cfg)}
        state = trainer_state(learners, baselines, rng, self.demo_rng, parts)
        folder = save_resume_point(self.run_dir, info, state, self.tokenizer, self.cfg.checkpoint.keep)
        if self.log_artifacts is not None:
            self.log_artifacts(folder, f"resume/{folder.name}")
        return folder
