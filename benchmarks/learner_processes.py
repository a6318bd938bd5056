"""The learner's update time with 1 and with N processes (torchrun), the same run otherwise.

Two `marl train` runs of a few RL iterations from the random-init tiny MoE (no SFT), one in a single process
and one under `torchrun --nproc-per-node N`, each process with `--threads` torch threads (the single
process with `--one-threads`); prints the median
`perf/update_seconds` over the iterations after the first of each and the ratio from this run. On a machine
with fewer cores than processes x threads the processes share cores, and the ratio says so.

    python benchmarks/learner_processes.py --processes 2 --threads 1 --scenario info_split --agents 4
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import mlflow


def update_seconds(workdir: Path, name: str, processes: int, threads: int, args: argparse.Namespace) -> float:
    uri = f"sqlite:///{workdir}/mlflow.db"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"] \
        if processes > 1 else [sys.executable]
    flags = ["--scenario", args.scenario, "--agents", str(args.agents), "--iterations", str(args.iterations),
             "--sft.seconds", "0", "--eval-episodes", "0", "--rl.tasks-per-iteration", str(args.tasks),
             "--rl.group-size", str(args.group), "--policy.device", "cpu", "--no-log-model", "--quiet",
             "--tracking-uri", uri, "--experiment", "learner-processes", "--output-dir", str(workdir / name),
             "--run-name", name]
    subprocess.run([*launcher, "-m", "marl.cli", "train", *flags], check=True,
                   env={**os.environ, "OMP_NUM_THREADS": str(threads)})
    client = mlflow.MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("learner-processes").experiment_id],
                             f"attributes.run_name = '{name}'")[0]
    history = sorted(client.get_metric_history(run.info.run_id, "perf/update_seconds"), key=lambda m: m.step)
    return statistics.median(m.value for m in history[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", default="info_split")
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch threads a process (OMP_NUM_THREADS)")
    parser.add_argument("--one-threads", type=int, default=0,
                        help="torch threads of the single process (0: --threads; the machine's cores: its default)")
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        one = update_seconds(Path(tmp), "one", 1, args.one_threads or args.threads, args)
        many = update_seconds(Path(tmp), "many", args.processes, args.threads, args)
    print(f"{args.scenario} with {args.agents} agents, {args.tasks} x {args.group} episodes an iteration, "
          f"{args.threads} thread(s) a process, cores here: {os.cpu_count()}")
    print("| learner processes | update seconds (median) | vs one |")
    print("|---|---|---|")
    print(f"| 1 ({args.one_threads or args.threads} thread(s)) | {one:.2f} | 1.00x |")
    print(f"| {args.processes} | {many:.2f} | {many / one:.2f}x |")


if __name__ == "__main__":
    main()
