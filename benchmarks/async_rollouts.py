"""Synchronous against asynchronous rollouts on Ray workers: seconds an RL iteration, from one run each.

Two `marl train` runs of a few RL iterations from the random-init tiny MoE (no SFT) with `--rollout-workers K`,
one with `--ray.async-rollouts` (the next batch plays while the learner updates, one step off-policy); prints
the median seconds an iteration (after the first) of each, how long the learner waited for its batch, and the
ratio from this run. Where the workers and the learner share the machine's cores, what overlaps competes.

    python benchmarks/async_rollouts.py --workers 2 --scenario info_split --agents 4
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import mlflow


def iteration_seconds(workdir: Path, name: str, asynchronous: bool, args: argparse.Namespace) -> tuple[float, float]:
    uri = f"sqlite:///{workdir}/mlflow.db"
    flags = ["--scenario", args.scenario, "--agents", str(args.agents), "--iterations", str(args.iterations),
             "--sft.seconds", "0", "--eval-episodes", "0", "--rl.tasks-per-iteration", str(args.tasks),
             "--rl.group-size", str(args.group), "--rollout-workers", str(args.workers), "--policy.device", "cpu",
             "--no-log-model", "--quiet", "--tracking-uri", uri, "--experiment", "async-rollouts", "--output-dir",
             str(workdir / name), "--run-name", name] + (["--ray.async-rollouts"] if asynchronous else [])
    subprocess.run([sys.executable, "-m", "marl.cli", "train", *flags], check=True)
    client = mlflow.MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("async-rollouts").experiment_id],
                             f"attributes.run_name = '{name}'")[0]
    elapsed = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "perf/elapsed_s"),
                                       key=lambda m: m.step)]
    waited = client.get_metric_history(run.info.run_id, "perf/rollout_wait_seconds" if asynchronous
                                       else "perf/rollout_seconds")
    steps = [b - a for a, b in zip(elapsed, elapsed[1:], strict=False)]
    return statistics.median(steps), statistics.median(m.value for m in sorted(waited, key=lambda m: m.step)[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="info_split")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--iterations", type=int, default=6)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sync, sync_wait = iteration_seconds(Path(tmp), "sync", False, args)
        ahead, ahead_wait = iteration_seconds(Path(tmp), "async", True, args)
    print(f"{args.scenario} with {args.agents} agents, {args.tasks} x {args.group} episodes an iteration, "
          f"{args.workers} Ray workers")
    print("| rollouts | seconds an iteration (median) | learner waited for its batch (s) | vs synchronous |")
    print("|---|---|---|---|")
    print(f"| synchronous | {sync:.2f} | {sync_wait:.2f} | 1.00x |")
    print(f"| asynchronous | {ahead:.2f} | {ahead_wait:.2f} | {ahead / sync:.2f}x |")


if __name__ == "__main__":
    main()
