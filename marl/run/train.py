"""`marl train`: tokenizer -> tiny MoE -> SFT warm start -> on-policy RL -> held-out eval, in MLflow.

One function, `train(cfg)`, runs the whole pipeline inside one MLflow run and returns where the
run and the checkpoint are. Everything it builds comes from `TrainConfig`; the pieces (rollout,
advantages, learner, SFT, tracking, checkpoint) live in their own modules.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import comms
from marl.config import TrainConfig
from marl.config.files import flatten, to_yaml
from marl.config.sections import tracking_uri_or_default
from marl.engine import algorithms
from marl.engine.advantages import RunningBaseline
from marl.engine.data_parallel import LearnerGroup
from marl.engine.learner import Learner
from marl.engine.policy_map import PolicyMap
from marl.engine.rollout import RolloutWorker, task_groups
from marl.engine.sequences import subset
from marl.engine.summary import summarize
from marl.run import outputs
from marl.run.alerts import Alerts, announce
from marl.run.build import (
    attach_lora,
    attach_opponent_head,
    build_policy,
    build_policy_map,
    clone_policy,
    keep_lora_base,
    seed_everything,
    train_env_factory,
    train_seeds,
)
from marl.run.console import Console, iteration_line
from marl.run.curriculum import CurriculumRun
from marl.run.exploration import ExploreRate
from marl.run.learners import ResumeWriter, build_learners, newcomer_learner, restore_trainer, role_function
from marl.run.memory import peak_rss_gb, rss_gb, trim_heap
from marl.run.pool import PoolRun
from marl.run.remote import RemoteRollouts, remote_rollouts
from marl.run.resume import DeferredStop, ResumePoint, load_resume_point, write_run_start
from marl.run.runs_uri import checkpoint_folder, is_runs_uri
from marl.run.sft import demonstration_episodes
from marl.run.tracking import Tracker
from marl.run.warm_start import demo_hints, demonstrations, warm_start
from policies.chat import ChatFormat
from policies.presets import count_parameters


@dataclass
class TrainResult:
    """Where a finished run lives, and its final evaluation figures."""

    run_id: str
    checkpoint: Path
    tracking_uri: str
    eval: dict[str, float]


def comms_metrics(worker: RolloutWorker | RemoteRollouts) -> dict[str, float]:
    """Message statistics summed over the worker's envs (cumulative counts; empty without comms)."""
    totals = worker.message_stats()
    if totals.get("comms/sent"):
        totals["comms/drop_rate"] = totals.get("comms/dropped", 0.0) / totals["comms/sent"]
    return totals


def log_topology(cfg: TrainConfig, tr: Tracker, make_env: Any, out_dir: Path) -> None:
    """The communication graph as a PNG artifact and its spec as a tag (nothing without comms)."""
    if cfg.comms.topology == "none":
        return
    env = make_env()
    env.reset(seed=0)
    path = comms.draw(env.topology_graph, out_dir / "topology.png", title=cfg.comms.topology)
    tr.log_artifacts(path.parent, "comms")
    tr.set_tags({"comms.topology": cfg.comms.topology})


def train(cfg: TrainConfig) -> TrainResult | None:
    """Run the whole pipeline; the MLflow run ends FINISHED, or FAILED with the error as a tag. Under torchrun
    only process 0 runs it; the others share its policy steps and return None (`marl.engine.data_parallel`)."""
    group = LearnerGroup.from_env(cfg.policy.device)
    try:
        if not group.leads:
            group.follow(Learner)
            return None
        try:
            return _train(cfg, group)
        finally:
            group.stop()
    finally:
        group.close()


def _train(cfg: TrainConfig, group: LearnerGroup) -> TrainResult:
    point = load_resume_point(cfg.resume, tracking_uri_or_default(cfg.tracking.tracking_uri)) if cfg.resume else None
    if point is not None:
        cfg = point.config()
        where = ("over from the beginning: it stopped before its first resume point" if point.restart
                 else f"after RL iteration {point.iteration} from {point.folder}")
        print(f"resuming run {point.run_id} {where} (its saved config; other flags are ignored)", flush=True)
    cfg = cfg.validate().resolved()  # checked once; resolving only fills in defaults
    seed_everything(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    out_root = Path(cfg.output_dir)
    curriculum = CurriculumRun(cfg) if cfg.curriculum.enabled else None
    # SFT's demonstrations and the tokenizer's first texts come from the first stage (its split and options too)
    make_env = train_env_factory(cfg, cfg.train_split) if curriculum is None else curriculum.first_factory
    run_name = cfg.tracking.run_name
    console = Console(cfg.quiet)
    # Under `mlflow run` the run exists already: $MLFLOW_RUN_ID names it.
    run_id = point.run_id if point is not None else os.environ.get("MLFLOW_RUN_ID")
    with Tracker(cfg.tracking.tracking_uri, cfg.tracking.experiment, run_name, cfg.tracking.artifact_location,
                 run_id=run_id, system_metrics=cfg.tracking.system_metrics, resumed=point is not None) as tr:
        if point is not None and point.restart:  # the same MLflow run, everything else as a fresh run
            tr.set_tags({"restarted": "true"})
            point = None
        console.log_to(out_root / tr.run_id / "console.log")
        if point is None:
            write_run_start(out_root / tr.run_id, tr.run_id, cfg)
            tr.log_params(flatten(cfg))  # before anything slow, so even a failed run says what it was
            tr.log_text(to_yaml(cfg), "config.yaml")  # `marl train --config config.yaml` runs it again
            tr.set_tags({"scenario": cfg.scenario, "algo": cfg.algo, "agents": str(cfg.agents),
                         "policy": cfg.policy.model, "mlflow.runName": run_name})
        else:
            tr.set_tags({"resumed_after_iteration": str(point.iteration)})
        for section in (cfg.policy, cfg.critic):  # a warm start from a checkpoint named through MLflow (params keep the URI)
            if is_runs_uri(section.model):
                section.model = str(checkpoint_folder(section.model, cfg.tracking.tracking_uri))
        stage_envs = curriculum.factories if curriculum is not None else {}
        tokenizer, model, policy = build_policy(cfg, make_env, out_root, rng, tuple(stage_envs.values())[1:],
                                                tokenizer=point.tokenizer() if point is not None else None)
        attach_opponent_head(cfg, policy, make_env)
        chat = ChatFormat(tokenizer)
        worker = RolloutWorker(make_env, policy, chat, max_rows=cfg.rl.rollout_rows, variants=stage_envs,
                               max_env_crashes=cfg.guards.max_env_crashes)
        if point is None:
            tr.log_params({"model.parameters": str(count_parameters(model)), "tokenizer.size": str(len(tokenizer)),
                           "device": str(model.device)})
            log_topology(cfg, tr, make_env, out_root / tr.run_id / "comms")
        print(f"run_id: {tr.run_id} ({run_name}); model {count_parameters(model):,} params, vocab {len(tokenizer)}",
              flush=True)
        demo_rng = point.state["demo_rng"] if point is not None else dict(rng.bit_generator.state)
        demos = None
        if cfg.sft.seconds > 0 and point is None:
            demos = warm_start(cfg, tr, worker, chat, policy, tokenizer, rng, console)
        if point is None:  # from here on, a run without resume points cannot start over in the same MLflow run
            write_run_start(out_root / tr.run_id, tr.run_id, cfg, past_sft=True)
        if cfg.lora.rank > 0:  # the model as SFT left it becomes the frozen base; RL trains adapters on it
            keep_lora_base(policy.model, out_root / tr.run_id, resumed=point is not None)
            attach_lora(cfg, policy)
            if point is None:
                tr.log_params({"lora.trainable_parameters": str(count_parameters(policy.model))})
        # Every policy of a mapping starts from the same warm start, then each learns on its own agents.
        policies = build_policy_map(cfg.policy_mapping, cfg.scenario, policy, make_env)
        if point is not None:  # a curriculum's newcomers get their places back (their weights come with the learners)
            first = next(iter(policies.policies.values()))
            for pid in point.state["learners"]:
                policies.policies.setdefault(pid, clone_policy(first))
        worker.policies = policies
        pool = PoolRun(cfg, make_env, policies) if cfg.pool.sampling != "off" else None
        last_iteration, critics = 0, {}
        if cfg.iterations > 0 and cfg.rl.seconds > 0:
            if cfg.rl.ptx_coef > 0 and demos is None:
                drawn = np.random.default_rng()
                drawn.bit_generator.state = demo_rng  # the draws SFT made (or would have made)
                demos = demonstrations(chat, demonstration_episodes(worker, train_seeds(drawn, cfg.sft.episodes),
                                                                    noise=cfg.sft.demo_noise, seed=cfg.seed),
                                       demo_hints(cfg, policy))
                if point is None:
                    rng.bit_generator.state = drawn.bit_generator.state
            writer = ResumeWriter(cfg, out_root / tr.run_id, tr.run_id, tokenizer, demo_rng,
                                  log_artifacts=tr.log_artifacts if cfg.checkpoint.log_to_mlflow else None)
            rollouts = remote_rollouts(cfg, worker) if cfg.rollout_workers else worker
            try:
                last_iteration, critics = _reinforce(cfg, tr, rollouts, policies, chat, demos, rng, pool, curriculum,
                                                     writer, point, console, group)
            finally:
                if isinstance(rollouts, RemoteRollouts):
                    rollouts.close()
        ckpt_dir = outputs.write_checkpoint(out_root / tr.run_id / "checkpoint", cfg, tokenizer, policies, tr.run_id,
                                            last_iteration, critics, pool, curriculum)
        tr.log_artifacts(ckpt_dir, "checkpoint")  # before evaluation: a failing eval never loses the model
        if (out_root / tr.run_id / "best").is_dir():  # the best by periodic evaluation (`runs:/<id>/best`)
            tr.log_artifacts(out_root / tr.run_id / "best", "best")
        if cfg.tracking.log_model:
            log_model(tr, ckpt_dir)
        if curriculum is not None and curriculum.trace:
            tr.log_artifacts(curriculum.draw(out_root / tr.run_id / "curriculum" / "curriculum.png").parent,
                             "curriculum")
        final = outputs.final_eval(cfg, tr, policies, chat, last_iteration, pool, curriculum, console)
        outputs.log_pictures(tr, out_root / tr.run_id / "pictures")
        console.close()
        tr.log_artifact(console.path)  # the run's console lines, RL's per-iteration summaries among them
    print(f"run_id: {tr.run_id}")
    print(f"checkpoint: {ckpt_dir}")
    print(f"open the MLflow UI: {tr.ui_command()}  (then http://127.0.0.1:5000{tr.ui_path()})")
    return TrainResult(tr.run_id, ckpt_dir, cfg.tracking.tracking_uri, final)


def log_model(tr: Tracker, ckpt_dir: Path) -> None:
    """The checkpoint as the run's MLflow model; a failure is a warning and a tag (the checkpoint is logged already)."""
    from marl.run.logged_model import log_policy_model

    try:
        tr.set_tags({"model_uri": log_policy_model(tr.tracking_uri, tr.run_id, ckpt_dir)})
    except Exception as err:  # an optional extra: the run and its checkpoint stand without it
        print(f"WARNING could not log the MLflow model: {type(err).__name__}: {err}", flush=True)
        tr.set_tags({"log_model_error": f"{type(err).__name__}: {err}"[:4000]})


def _reinforce(cfg: TrainConfig, tr: Tracker, worker: RolloutWorker | RemoteRollouts, policies: PolicyMap, chat: Any,
               demos: Any, rng: np.random.Generator, pool: PoolRun | None, curriculum: CurriculumRun | None,
               writer: ResumeWriter, point: ResumePoint | None, console: Console,
               group: LearnerGroup) -> tuple[int, dict[str, Any]]:
    """RL iterations until `cfg.iterations` or the wall-clock budget; the last iteration and the critics.
    With an opponent pool the learner plays one side of each task and a pool entry the others; with a
    curriculum each task plays the stage it draws, and a promotion may bring newcomers' policies.
    Resume points go to `writer` (before the first iteration, every `checkpoint.every`, at the end and on
    Ctrl-C / SIGTERM, which then stop the run); from `point` the run carries on after its iteration."""
    algo = algorithms.get(cfg.algo)
    learners = build_learners(cfg, policies, chat, demos, worker.make_env)
    for learner in learners.values():  # under torchrun the other processes share every policy step
        learner.group = group
    role_of = role_function(cfg, *worker.factories.values())
    baselines = {pid: RunningBaseline() for pid in learners} if cfg.rl.baseline == "running" else {}
    # A critic warm-up's iterations fit the value on the warm-started policy's own play before any policy step
    # (config validation keeps it 0 for critic-free algorithms).
    warm_critic_until = cfg.critic.warmup_iterations
    first, env_steps, agent_steps, spent = 0, 0, 0, 0.0
    periodic = outputs.PeriodicEval(cfg, chat, writer.run_dir)
    alerts = Alerts(cfg.guards, cfg.rl.target_kl)
    parts = {"curriculum": curriculum, "pool": pool, "alerts": alerts}  # what resume points keep beside the learners
    if point is not None:
        restore_trainer(point.state, learners, baselines, rng, parts)
        first, spent = point.iteration, float(point.info["rl_seconds"])
        env_steps, agent_steps = int(point.info["env_steps"]), int(point.info.get("agent_steps", 0))
        worker.env_crashes = int(point.info.get("env_crashes", 0))  # the run's allowance is the run's, not the process's
        periodic.best = float(point.info.get("best_eval", -1.0))
        periodic.seconds = float(point.info.get("eval_seconds", 0.0))
    else:
        writer.save(0, {"env_steps": 0, "agent_steps": 0}, 0.0, learners, baselines, rng, parts)

    def critics() -> dict[str, Any]:
        return {pid: lr.critic.model for pid, lr in learners.items() if lr.critic is not None}

    def save_best(folder: Path) -> None:
        outputs.write_checkpoint(folder, cfg, writer.tokenizer, policies, writer.run_id, it, critics(), pool, curriculum)
    start = time.perf_counter() - spent
    bar = console.bar(iterable=range(first + 1, cfg.iterations + 1), desc="rl", unit="it", initial=first,
                      total=cfg.iterations)
    it, logging_s = first, None
    explore = ExploreRate(cfg.rl.explore, cfg.rl.explore_unit)
    ahead = None  # with ray.async_rollouts: the next iteration's collection, already under way
    with DeferredStop() as stop:
        for it in bar:
            t_wait = time.perf_counter()
            collect = dict(greedy=False, sample_seed=cfg.seed * 1_000_003 + it, record_state=algo.centralized_critic,
                           **({"explore": explore.per_action()} if cfg.rl.explore else {}))
            if cfg.ray.async_rollouts:  # this batch started last iteration, before its update; the next starts now
                pending = ahead or worker.submit(*task_groups(train_seeds(rng, cfg.rl.tasks_per_iteration),
                                                              cfg.rl.group_size), **collect)
                if it < cfg.iterations:
                    ahead = worker.submit(*task_groups(train_seeds(rng, cfg.rl.tasks_per_iteration), cfg.rl.group_size),
                                          **{**collect, "sample_seed": cfg.seed * 1_000_003 + it + 1})
                batch = worker.finish(pending)
            else:
                task_seeds = train_seeds(rng, cfg.rl.tasks_per_iteration)
                if pool is not None:
                    batch = pool.collect(worker, task_seeds, cfg.rl.group_size, **collect)
                elif curriculum is not None:
                    batch = curriculum.collect(worker, task_seeds, cfg.rl.group_size, **collect)
                else:
                    batch = worker.collect(*task_groups(task_seeds, cfg.rl.group_size), **collect)
            rollout_wait = time.perf_counter() - t_wait
            env_steps += batch.env_steps
            agent_steps += len(batch.turns)
            t0 = time.perf_counter()
            mine = batch if pool is None else subset(batch, lambda ep: ep.policy in learners)
            metrics = summarize(mine)
            if cfg.rl.explore:  # measured only where actions explore, over the learners' actions
                metrics.update(explore.observe(mine))
            per_policy: dict[str, dict[str, float]] = {}
            # A policy learns from its own agents' episodes only (never from a scripted or pool seat's).
            whole = len(learners) == 1 and all(ep.policy in learners for ep in batch.episodes)
            for pid, learner in learners.items():
                part = batch if whole else subset(batch, lambda ep, pid=pid: ep.policy == pid)
                adv = algo.advantages(part, learner.critic, cfg.rl.gamma, cfg.rl.gae_lambda, role_of, baselines.get(pid))
                learner.opponent_weight = cfg.opponent.weight(it - 1, cfg.iterations)
                per_policy[pid] = {**adv.metrics(), **learner.update(part, adv, train_policy=warm_critic_until < it)}
            metrics.update(merge_policy_metrics(per_policy))
            metrics["perf/update_seconds"] = time.perf_counter() - t0
            metrics["perf/rollout_seconds"] = batch.seconds
            if isinstance(worker, RemoteRollouts) and cfg.ray.async_rollouts:  # the rollout overlapped the update
                metrics["perf/rollout_wait_seconds"] = rollout_wait
            metrics["progress/env_steps"] = float(env_steps)
            metrics["progress/agent_steps"] = float(agent_steps)
            if curriculum is not None:
                move = curriculum.after_batch(batch, it, env_steps)
                if move is not None and move.target > move.source:
                    for pid, source in curriculum.newcomers(policies, curriculum.stages[move.target]):
                        learners[pid] = newcomer_learner(cfg, policies[pid], learners[source], chat, cfg.seed + len(learners))
                        learners[pid].group = group
                        if cfg.rl.baseline == "running":
                            baselines[pid] = RunningBaseline()
                metrics.update(curriculum.metrics())
            del batch, part, adv  # the iteration's records, before the freed heap goes back
            trim_heap()
            if pool is not None:
                pool.after_iteration(it)
                metrics.update(pool.metrics())
            metrics["perf/elapsed_s"] = time.perf_counter() - start
            metrics["perf/train_seconds"] = metrics["perf/elapsed_s"] - periodic.seconds  # periodic evaluations left out
            metrics["perf/peak_rss_gb"] = peak_rss_gb()
            metrics["perf/rss_gb"] = rss_gb()
            metrics.update(comms_metrics(worker))
            metrics["rollout/env_crashes"] = float(worker.env_crashes)
            if isinstance(worker, RemoteRollouts):
                metrics["rollout/worker_restarts"] = float(worker.restarts)
            stopping = announce(alerts.check(metrics, it), tr, cfg.guards)
            metrics["alerts/count"] = float(alerts.fired)
            if logging_s is not None:  # the previous iteration's: a call cannot time itself
                metrics["perf/logging_seconds"] = logging_s
            t0 = time.perf_counter()
            tr.log_metrics(metrics, step=it)
            bar.set_postfix(success=f"{metrics['rollout/success_rate']:.2f}", kl=f"{metrics.get('train/kl', 0):.3f}")
            console.say(iteration_line(it, cfg.iterations, metrics))
            logging_s = time.perf_counter() - t0
            if periodic.due(it):
                periodic(tr, policies, it, curriculum, save_best)
            out_of_time = time.perf_counter() - start >= cfg.rl.seconds
            last = out_of_time or it == cfg.iterations or stop.signum is not None or stopping is not None
            if last or writer.due(it):
                progress = {"env_steps": env_steps, "agent_steps": agent_steps, "best_eval": periodic.best,
                            "env_crashes": worker.env_crashes, "eval_seconds": periodic.seconds}
                folder = writer.save(it, progress, time.perf_counter() - start, learners, baselines, rng, parts)
                if stop.signum is not None:
                    raise KeyboardInterrupt(f"stopped by signal {stop.signum} after RL iteration {it}"
                                            + (f"; continue it with: marl train --resume {folder}" if folder else ""))
            if stopping is not None:
                tr.set_tags({"stopped_by": f"alert/{stopping.name}"})
            if out_of_time or stopping is not None:
                break
    bar.close()
    return it, critics()


def merge_policy_metrics(per_policy: dict[str, dict[str, float]]) -> dict[str, float]:
    """One policy: its metrics as they are. Several: each under `policy/<id>/`, plain names the mean."""
    if len(per_policy) == 1:
        return next(iter(per_policy.values()))
    out: dict[str, float] = {}
    sums: dict[str, list[float]] = {}
    for pid, metrics in per_policy.items():
        for k, v in metrics.items():
            out[f"policy/{pid}/{k}"] = v
            sums.setdefault(k, []).append(v)
    out.update({k: float(np.mean(v)) for k, v in sums.items()})
    return out
