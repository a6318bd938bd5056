"""Episodes per second of whole RL iterations (rollout + update), this tree against another, side by side.

One measurement builds the default training config of a scenario from a checkpoint (so episodes
are as long as a warm-started policy's), runs one warm-up iteration, then `--iterations` timed
ones, each a sampled rollout of `tasks_per_iteration x group_size` episodes and the learner's
update, and prints one JSON line: rollout and update seconds, episodes/s, peak RSS.

With `--vs TREE` the same measurement runs in fresh processes alternately on this tree's code and
on TREE's (a checkout of the baseline, e.g. a git worktree), `--rounds` times each, and the
episodes/s ratio is taken pair by pair (noisy machines drift; pairing keeps the ratio honest).

    python benchmarks/iteration_speed.py --checkpoint CKPT --vs ../baseline --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside this one
from tree_pairs import add_pair_arguments, pairs  # noqa: E402


def measure(args: argparse.Namespace) -> dict[str, float]:
    """One process's figures on the code importable here (its own tree or PYTHONPATH's)."""
    import numpy as np
    import torch

    from marl.config import TrainConfig
    from marl.engine import algorithms
    from marl.engine.rollout import RolloutWorker
    from marl.run.build import build_policy, build_policy_map, seed_everything, train_env_factory, train_seeds
    from marl.run.train import build_learners, peak_rss_gb, role_function
    from policies.chat import ChatFormat

    cfg = TrainConfig(seed=args.seed, scenario=args.scenario, agents=args.agents, algo=args.algo)
    cfg.policy.model = args.checkpoint
    cfg = cfg.validate().resolved()
    seed_everything(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    make_env = train_env_factory(cfg, "train")
    with tempfile.TemporaryDirectory() as tmp:
        tokenizer, _, policy = build_policy(cfg, make_env, Path(tmp), rng)
    chat = ChatFormat(tokenizer)
    policies = build_policy_map(cfg.policy_mapping, cfg.scenario, policy, make_env)
    worker = RolloutWorker(make_env, policy, chat)
    worker.policies = policies
    algo = algorithms.get(cfg.algo)
    learner = next(iter(build_learners(cfg, policies, chat, None, make_env).values()))
    role_of = role_function(cfg, make_env)
    rollout_s = update_s = 0.0
    episodes = tokens = 0
    for it in range(args.iterations + 1):
        tasks = train_seeds(rng, cfg.rl.tasks_per_iteration)
        seeds = [s for s in tasks for _ in range(cfg.rl.group_size)]
        groups = [g for g in range(len(tasks)) for _ in range(cfg.rl.group_size)]
        t0 = time.perf_counter()
        batch = worker.collect(seeds, groups, greedy=False, sample_seed=1000 + it,
                               record_state=algo.centralized_critic)
        t1 = time.perf_counter()
        adv = algo.advantages(batch, learner.critic, cfg.rl.gamma, cfg.rl.gae_lambda, role_of, None)
        learner.update(batch, adv)
        t2 = time.perf_counter()
        if it == 0:  # warm-up: kernels, envs and grammar automata built once
            continue
        rollout_s += t1 - t0
        update_s += t2 - t1
        episodes += len(seeds)
        tokens += batch.generated_tokens
    return {"rollout_s": rollout_s, "update_s": update_s, "episodes": episodes,
            "episodes_per_s": episodes / (rollout_s + update_s), "generated_tokens": tokens,
            "peak_rss_gb": peak_rss_gb(), "threads": torch.get_num_threads()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="a `marl train` checkpoint folder (the warm start)")
    parser.add_argument("--scenario", default="tool_use")
    parser.add_argument("--agents", type=int, default=1)
    parser.add_argument("--algo", default="grpo")
    parser.add_argument("--iterations", type=int, default=2, help="timed iterations after one warm-up")
    add_pair_arguments(parser)
    args = parser.parse_args()
    if args.child or args.vs is None:
        print(json.dumps(measure(args)), flush=True)
        return
    argv = ["--checkpoint", args.checkpoint, "--scenario", args.scenario, "--agents", str(args.agents),
            "--algo", args.algo, "--iterations", str(args.iterations), "--seed", str(args.seed)]
    measured = pairs(__file__, args.vs, argv, args.rounds)
    ours, theirs = [a for a, _ in measured], [b for _, b in measured]
    ratios = [a["episodes_per_s"] / b["episodes_per_s"] for a, b in measured]
    print("| tree | rollout s | update s | episodes/s | peak RSS GB |")
    print("|---|---|---|---|---|")
    for name, rows in (("this", ours), ("baseline", theirs)):
        med = {k: statistics.median(r[k] for r in rows) for k in ("rollout_s", "update_s", "episodes_per_s",
                                                                   "peak_rss_gb")}
        print(f"| {name} | {med['rollout_s']:.2f} | {med['update_s']:.2f} | {med['episodes_per_s']:.2f} | "
              f"{med['peak_rss_gb']:.2f} |")
    print(f"episodes/s ratio (this / baseline), median of {args.rounds} pairs: {statistics.median(ratios):.2f}x "
          f"(each pair: {', '.join(f'{x:.2f}' for x in ratios)})")


if __name__ == "__main__":
    main()
