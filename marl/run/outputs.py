"""What a run leaves behind: checkpoints (the final one and the best so far) and held-out evaluations.

`write_checkpoint` saves the policies of a run (with critics, opponent heads, a pool, a curriculum's state)
under a typed metadata record; `final_eval` is the held-out evaluation at the end; `PeriodicEval` evaluates
every `checkpoint.eval_every` RL iterations on the first `checkpoint.eval_episodes` held-out seeds of each
split and keeps the best checkpoint by their mean success (`<run>/best/`).

It leaves out the training loop (`marl.run.train`) and resume points (`marl.run.resume`).
"""

from __future__ import annotations

import dataclasses
import time
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import scenarios
from marl.config import TrainConfig
from marl.engine import algorithms
from marl.engine.opponent import prediction_metrics
from marl.engine.policy_map import PolicyMap
from marl.engine.rollout import RolloutWorker
from marl.run.build import train_env_factory
from marl.run.checkpoint import CheckpointMeta, TokenizerInfo, package_versions, save_checkpoint
from marl.run.console import Console
from marl.run.curriculum import CurriculumRun, stage_factory
from marl.run.evaluate import evaluate, transcript_text
from marl.run.pictures import draw_curves, draw_expert_load, episode_viewer
from marl.run.pool import PoolRun
from marl.run.tracking import Tracker
from policies.adapters import BaseView, is_adapter
from policies.tokenizer import TOOL


def checkpoint_meta(cfg: TrainConfig, tokenizer: Any, policies: tuple[str, ...], run_id: str,
                    iteration: int, agents: int | None = None) -> CheckpointMeta:
    """The metadata record of a resolved training config's checkpoint; `agents`: the team size it records
    (default the config's; a curriculum's furthest stage)."""
    entities = len(scenarios.make(cfg.scenario, n_agents=cfg.agents, **cfg.scenario_options).entity_vocabulary())
    return CheckpointMeta(
        scenario=cfg.scenario, agents=agents or cfg.agents, model=cfg.policy.model,
        tokenizer=(TokenizerInfo("offline-bpe", len(tokenizer), merges_budget=cfg.policy.vocab_size, entities=entities)
                   if TOOL in tokenizer.get_vocab() else TokenizerInfo("pretrained", len(tokenizer))),
        policy_mapping=cfg.policy_mapping, policies=policies, algo=cfg.algo,
        critic_view=cfg.critic.state_view if algorithms.get(cfg.algo).critic is not None else None,
        constrained=cfg.policy.constrained, temperature=cfg.policy.temperature,
        max_new_tokens=cfg.policy.max_new_tokens, run_id=run_id, seed=cfg.seed, iteration=iteration,
        scenario_options=dict(cfg.scenario_options), comms=dataclasses.asdict(cfg.comms), versions=package_versions())


def write_checkpoint(path: Path, cfg: TrainConfig, tokenizer: Any, policies: PolicyMap, run_id: str, iteration: int,
                     critics: dict[str, Any], pool: PoolRun | None = None,
                     curriculum: CurriculumRun | None = None) -> Path:
    """The run's policies as a checkpoint at `path` (atomic), recording the team size of the furthest stage."""
    ids = list(policies.policies)
    meta = checkpoint_meta(cfg, tokenizer, tuple(ids), run_id, iteration,
                           agents=curriculum.furthest().agents if curriculum is not None else None)
    heads = {"" if k == 0 else pid: policies[pid].opponent_head for k, pid in enumerate(ids)
             if policies[pid].opponent_head is not None}
    first = policies[ids[0]].model
    if is_adapter(first):  # one frozen base at the top, each policy's adapter under adapters/<id>/
        meta = dataclasses.replace(meta, adapters=tuple(ids))
        return save_checkpoint(path, BaseView(first.shared), tokenizer, meta, critics=critics, heads=heads,
                               adapters={pid: policies[pid].model for pid in ids},
                               pool=pool.pool if pool is not None else None,
                               curriculum=curriculum.state_dict() if curriculum is not None else None)
    return save_checkpoint(path, first, tokenizer, meta,
                           extra_models={pid: policies[pid].model for pid in ids[1:]}, critics=critics, heads=heads,
                           pool=pool.pool if pool is not None else None,
                           curriculum=curriculum.state_dict() if curriculum is not None else None)


def eval_teams(cfg: TrainConfig, policy: Any, curriculum: CurriculumRun | None) -> list[tuple[str, str, Any]]:
    """(label, team, factory of split) per team to evaluate: the run's own (a curriculum's furthest fielded
    stage) as label "", and with a curriculum every distinct team of its stages the run can field, as
    `<team>/` (the run's own team comes twice under two labels: evaluate it once)."""
    if curriculum is None:
        return [("", "", partial(train_env_factory, cfg))]
    fielded = curriculum.eval_stages(policy)
    return [("", fielded[-1].team, partial(stage_factory, cfg, fielded[-1]))] + [
        (f"{stage.team}/", stage.team, partial(stage_factory, cfg, stage)) for stage in fielded]


def final_eval(cfg: TrainConfig, tr: Tracker, policy: Any, chat: Any, step: int, pool: PoolRun | None = None,
               curriculum: CurriculumRun | None = None, console: Console | None = None) -> dict[str, float]:
    """Held-out figures at the end: `eval/<split>/...` for the run's team (a curriculum's last stage, or the
    furthest it reached when newcomers lack a policy), and with a curriculum `eval/<team>/<split>/...` for
    every distinct team of its stages that the run can field (`n4`: forgetting, transfer)."""
    final: dict[str, float] = {}
    if pool is not None and cfg.pool.eval_episodes > 0 and cfg.eval_splits:
        make_env = train_env_factory(cfg, cfg.eval_splits[0])
        seeds = list(make_env().eval_seeds(cfg.eval_splits[0], cfg.pool.eval_episodes))
        final.update(pool.evaluate(RolloutWorker(make_env, policy, chat), seeds))
    if cfg.eval_episodes <= 0:
        tr.log_metrics(final, step=step)
        return final
    console = console or Console(quiet=True)
    played: dict[tuple[str, str], tuple[dict[str, float], dict[str, float]]] = {}  # (team, split) -> figures
    teams = eval_teams(cfg, policy, curriculum)
    games = len({(team, split) for _, team, _ in teams for split in cfg.eval_splits})
    bar = console.bar(total=games * cfg.eval_episodes * (2 if cfg.eval_sampled else 1), desc="eval", unit="ep",
                      leave=False)
    for label, team, factory_of in teams:
        for split in cfg.eval_splits:
            if (team, split) not in played:
                make_env = factory_of(split=split)
                worker = RolloutWorker(make_env, policy, chat)
                seeds = list(make_env().eval_seeds(split, cfg.eval_episodes))
                greedy, batch = evaluate(worker, seeds, greedy=True, progress=bar.update)
                greedy.update(prediction_metrics(policy, batch))
                if not label:
                    tr.log_text(transcript_text(batch, cfg.tracking.transcripts), f"transcripts/{split}.txt")
                    tr.log_text(episode_viewer(batch, f"{cfg.scenario}, {cfg.agents} agents: held-out split {split}",
                                               cfg.tracking.transcripts), f"pictures/episodes_{split}.html")
                # greedy play can tip on one looping path; sampled play averages over paths
                sampled = evaluate(worker, seeds, greedy=False, sample_seed=0, progress=bar.update)[0] \
                    if cfg.eval_sampled else {}
                played[team, split] = greedy, sampled
            greedy, sampled = played[team, split]
            final.update({f"eval/{label}{split}/{k}": v for k, v in greedy.items()})
            final.update({f"eval_sampled/{label}{split}/{k}": v for k, v in sampled.items()})
    bar.close()
    tr.log_metrics(final, step=step)
    console.say("eval: " + ", ".join(f"{k}={v:.3f}" for k, v in final.items() if k.endswith("success_rate")))
    return final


def log_pictures(tr: Tracker, folder: Path) -> None:
    """The run's learning curves and expert-load heatmap, drawn from what it logged, as artifacts `pictures/`."""
    folder.mkdir(parents=True, exist_ok=True)
    drawn = [draw_curves(tr.client, tr.run_id, folder / "curves.png"),
             draw_expert_load(tr.client, tr.run_id, folder / "expert_load.png")]
    if any(drawn):
        tr.log_artifacts(folder, "pictures")


class PeriodicEval:
    """Held-out success every `checkpoint.eval_every` iterations (greedy, the first `checkpoint.eval_episodes`
    seeds of every evaluation split, the run's own team), logged as `eval/<split>/success_rate` at that
    iteration; the best mean so far keeps its checkpoint in `<run>/best/` (tag `best_iteration`)."""

    def __init__(self, cfg: TrainConfig, chat: Any, run_dir: Path, best: float = -1.0) -> None:
        self.cfg, self.chat, self.folder, self.best = cfg, chat, run_dir / "best", best
        self.seconds = 0.0
        """Wall-clock spent in these evaluations so far (the RL clock minus it is training time)."""

    def due(self, iteration: int) -> bool:
        every = self.cfg.checkpoint.eval_every
        return every > 0 and iteration % every == 0 and bool(self.cfg.eval_splits)

    def __call__(self, tr: Tracker, policies: PolicyMap, iteration: int, curriculum: CurriculumRun | None,
                 save: Any) -> dict[str, float]:
        """Evaluate, log, and call `save(folder)` when the mean success is the best so far."""
        started = time.perf_counter()
        factory_of = eval_teams(self.cfg, policies, curriculum)[0][2]
        figures, rates = {}, []
        for split in self.cfg.eval_splits:
            make_env = factory_of(split=split)
            seeds = list(make_env().eval_seeds(split, self.cfg.checkpoint.eval_episodes,
                                                skip=self.cfg.checkpoint.eval_skip_seeds))
            result, _ = evaluate(RolloutWorker(make_env, policies, self.chat), seeds, greedy=True)
            figures.update({f"eval/{split}/{k}": v for k, v in result.items()
                            if k in ("success_rate", "return_mean", "invalid_action_rate")})
            rates.append(result["success_rate"])
        score = float(np.mean(rates))
        figures["eval/mean_success_rate"] = score
        if score > self.best:
            self.best = score
            save(self.folder)
            tr.set_tags({"best_iteration": str(iteration), "best_eval_success": f"{score:.4f}"})
        tr.log_metrics(figures, step=iteration)
        self.seconds += time.perf_counter() - started
        return figures
