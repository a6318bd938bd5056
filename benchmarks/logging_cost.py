"""What MLflow logging costs a training run: `perf/logging_seconds` against the iteration it belongs to.

Runs `marl train` (every argument after `--`; its own sqlite store in the work folder), then reads, for
every RL iteration k, the seconds spent logging its metrics (MLflow batch, console line: the run logs
them as `perf/logging_seconds` at iteration k+1, whose wall time, the step of `perf/elapsed_s` from k to
k+1, holds that logging), and prints the share logging took: median, 90th percentile and largest,
measured in the one run. The absolute seconds are context only.

    python benchmarks/logging_cost.py --workdir runs/exp/logging-cost -- --scenario info_split --agents 3 \\
        --iterations 40 --sft.seconds 30 --eval-episodes 0
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="arguments for marl train, after --")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    cmd = [sys.executable, "-m", "marl.cli.main", "train", "--tracking-uri", uri, "--experiment", "logging-cost",
           "--output-dir", str(workdir / "runs"), "--artifact-location", str(workdir / "mlruns"), "--quiet",
           *[a for a in args.train_args if a != "--"]]
    print("running:", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True)
    client = MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("logging-cost").experiment_id],
                             order_by=["start_time DESC"], max_results=1)[0]

    def history(key: str) -> dict[int, float]:
        return {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
    logging, elapsed = history("perf/logging_seconds"), history("perf/elapsed_s")
    shares, seconds = [], []
    for k in sorted(elapsed):
        if k + 1 in elapsed and k + 1 in logging:  # iteration k+1's wall time holds the logging of iteration k
            wall = elapsed[k + 1] - elapsed[k]
            shares.append(logging[k + 1] / wall)
            seconds.append(logging[k + 1])
    if not shares:
        sys.exit("fewer than three RL iterations: nothing to measure")
    shares.sort()
    p90 = shares[min(len(shares) - 1, int(0.9 * len(shares)))]
    metrics = len(run.data.metrics)
    print(f"run {run.info.run_id}: {len(shares)} iterations measured, {metrics} metric keys logged per run")
    print(f"logging share of an iteration: median {100 * statistics.median(shares):.2f}%, "
          f"p90 {100 * p90:.2f}%, largest {100 * shares[-1]:.2f}%")
    print(f"(context: logging {1000 * statistics.median(seconds):.1f} ms median per iteration)")


if __name__ == "__main__":
    main()
