"""RL rollouts on Ray workers against the in-process worker, and where the learner becomes the bottleneck.

One random-init tiny MoE, one scenario, the same iteration's seeds (`--tasks` x `--group`) and the same
parts (`--rows` agents each), played (after a warm-up) `--repeats` times each way:
- in process (the training loop's default, torch on every core),
- on 1 and on `--workers` Ray actors of a local cluster (one core each: `ray.cpus_per_worker 1`), the
  episodes checked identical to the in-process ones;
then one learner update on that batch. Prints median seconds per collection and the ratios from this run,
and from the measured parts (one worker's rollout seconds, the overhead of shipping weights and gathering
batches, the update's seconds) the seconds an iteration would take with 8 to 64 workers if each had a core
of this machine's kind: rollouts shrink as 1/K plus the overhead, the update does not.

    python benchmarks/ray_rollouts.py --scenario info_split --agents 4 --workers 2
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import ray
import torch

from marl.config import TrainConfig
from marl.engine import algorithms
from marl.engine.policy_map import single
from marl.engine.rollout import RolloutWorker, task_groups
from marl.run.build import build_policy, policy_weights, train_env_factory
from marl.run.learners import build_learners, role_function
from marl.run.remote import RemoteRollouts
from policies.chat import ChatFormat


def timed(collect, seeds, groups, repeats: int) -> tuple[float, object]:
    collect(seeds[:2], groups[:2], sample_seed=1)  # warm-up: grammars compiled, workers' policies shipped
    times, batch = [], None
    for r in range(repeats):
        t0 = time.perf_counter()
        batch = collect(seeds, groups, sample_seed=100 + r)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), batch


def same(a, b) -> bool:
    return [e.transcript for e in a.episodes] == [e.transcript for e in b.episodes]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="info_split")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=16, help="tasks per iteration")
    parser.add_argument("--group", type=int, default=4, help="rollouts per task")
    parser.add_argument("--rows", type=int, default=32, help="agents per part (rl.rollout_rows)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cfg = TrainConfig(seed=args.seed, scenario=args.scenario, agents=args.agents)
    cfg.policy.tokenizer_episodes = 200
    cfg = cfg.validate().resolved()
    make = train_env_factory(cfg, "train")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, model, policy = build_policy(cfg, make, Path(tmp), np.random.default_rng(args.seed))
    chat = ChatFormat(tokenizer)
    seeds, groups = task_groups([50_000 + k for k in range(args.tasks)], args.group)
    local = RolloutWorker(make, policy, chat, max_rows=args.rows)
    parts = len(local.plan(seeds, groups))
    print(f"{args.scenario} with {args.agents} agents: {len(seeds)} episodes a collection in {parts} parts of at "
          f"most {args.rows} agents; torch threads in process: {torch.get_num_threads()}")
    here_s, here = timed(local.collect, seeds, groups, args.repeats)
    ray.init(num_cpus=max(args.workers, 1), include_dashboard=False, configure_logging=False)
    there: dict[int, float] = {}
    for k in sorted({1, args.workers}):
        remote = RemoteRollouts(RolloutWorker(make, policy, chat, max_rows=args.rows), workers=k)
        there[k], batch = timed(remote.collect, seeds, groups, args.repeats)
        assert same(here, batch), f"{k} worker(s) played other episodes than the in-process worker"
        remote.close()
    t0 = time.perf_counter()
    weights = ray.put(policy_weights(policy))
    ship_s = time.perf_counter() - t0
    del weights
    ray.shutdown()
    learner = build_learners(cfg, single(policy), chat, None, make)["shared"]
    adv = algorithms.get(cfg.algo).advantages(here, None, cfg.rl.gamma, cfg.rl.gae_lambda, role_function(cfg, make),
                                              None)
    t0 = time.perf_counter()
    learner.update(here, adv)
    update_s = time.perf_counter() - t0
    print(f"model {sum(p.numel() for p in model.parameters()):,} parameters; weights put in the object store in "
          f"{1000 * ship_s:.1f} ms")
    print("| rollouts | seconds a collection (median) | vs in process |")
    print("|---|---|---|")
    print(f"| in process | {here_s:.2f} | 1.00x |")
    for k, s in there.items():
        print(f"| {k} Ray worker(s) | {s:.2f} | {s / here_s:.2f}x |")
    print(f"learner update on the batch: {update_s:.2f} s ({update_s / here_s:.2f}x an in-process collection)")
    # One worker holds one core: its collection time is the work; a second worker halves the work, and what
    # is left over that is the overhead of shipping and gathering (measured at the largest K of this run).
    work = there[1]
    k_max = max(there)
    overhead = max(there[k_max] - work / k_max, 0.0)
    print(f"projection (a core per worker): rollout = {work:.2f} s / K + {overhead:.2f} s overhead, update "
          f"{update_s:.2f} s")
    print("| workers | rollout s | iteration s | learner's share |")
    print("|---|---|---|---|")
    for k in (1, 2, 8, 16, 32, 64):
        roll = work / k + (overhead if k > 1 else 0.0)
        print(f"| {k} | {roll:.2f} | {roll + update_s:.2f} | {update_s / (roll + update_s):.0%} |")


if __name__ == "__main__":
    main()
