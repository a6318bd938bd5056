"""Soak: a long `marl train` run, its resident memory sampled from outside and logged from inside.

Runs `marl train` in a subprocess (in its own work folder, local sqlite MLflow) and samples the
child's resident set (VmRSS) every `--period` seconds for the whole run (tokenizer, SFT, RL, final
evaluation). After the run it reads the run's own `perf/rss_gb` after every RL iteration from
MLflow and reports the growth of the resident set during RL: from the first iteration to the last,
and from the first iteration to the largest value seen, as a percentage of the first. RL's first
iteration is the baseline because the tokenizer, SFT and the first rollout's caches legitimately
grow the process before it; what a soak looks for is memory that keeps growing while the same kind
of iteration repeats. Writes `soak.csv` (seconds, RSS GB, phase-free outside samples),
`rl_rss.csv` (iteration, seconds, RSS GB) and, with matplotlib, `soak.png`.

    python benchmarks/soak.py --workdir runs/exp/soak -- --scenario info_split --agents 8 \\
        --rl.tasks-per-iteration 2 --rl.group-size 8 --rl.seconds 1200 --iterations 100000 \\
        --sft.seconds 60 --checkpoint.eval-every 25 --eval-episodes 20

Every argument after `--` goes to `marl train` as is (its tracking URI and output folder are the
work folder's).
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import time
from pathlib import Path

from mlflow.tracking import MlflowClient


def vmrss_gb(pid: int) -> float | None:
    """A live process's resident set in GB (None once it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / (1 << 20)
    except OSError:
        return None
    return None


def run_sampled(cmd: list[str], cwd: Path, period: float, log: Path) -> list[tuple[float, float]]:
    """Run `cmd`, sampling its resident set every `period` seconds; the samples (seconds, GB)."""
    samples: list[tuple[float, float]] = []
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
        start = time.perf_counter()
        while proc.poll() is None:
            rss = vmrss_gb(proc.pid)
            if rss is not None:
                samples.append((time.perf_counter() - start, rss))
            time.sleep(period)
    if proc.returncode != 0:
        sys.exit(f"marl train ended with {proc.returncode}; see {log}")
    return samples


def rl_curve(tracking_uri: str) -> tuple[str, list[tuple[int, float, float]]]:
    """The run's (iteration, RL seconds, RSS GB) after every RL iteration."""
    client = MlflowClient(tracking_uri)
    run = client.search_runs([e.experiment_id for e in client.search_experiments()], order_by=["start_time DESC"],
                             max_results=1)[0]
    rss = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "perf/rss_gb")}
    seconds = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "perf/elapsed_s")}
    return run.info.run_id, [(it, seconds.get(it, float("nan")), rss[it]) for it in sorted(rss)]


def draw(samples: list[tuple[float, float]], curve: list[tuple[int, float, float]], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    left.plot([t / 60 for t, _ in samples], [r for _, r in samples])
    left.set(xlabel="minutes since start (whole process)", ylabel="resident set (GB)", title="sampled from outside")
    right.plot([it for it, _, _ in curve], [r for _, _, r in curve])
    right.set(xlabel="RL iteration", ylabel="resident set (GB)", title="perf/rss_gb after each RL iteration")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.set_ylim(bottom=0)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, required=True)
    parser.add_argument("--period", type=float, default=5.0, help="seconds between outside samples")
    parser.add_argument("train_args", nargs=argparse.REMAINDER, help="arguments for marl train, after --")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    extra = [a for a in args.train_args if a != "--"]
    cmd = [sys.executable, "-m", "marl.cli.main", "train", "--tracking-uri", uri, "--output-dir", str(workdir / "runs"),
           "--artifact-location", str(workdir / "mlruns"), "--experiment", "soak", *extra]
    print("running:", " ".join(cmd), flush=True)
    samples = run_sampled(cmd, workdir, args.period, workdir / "train.log")
    run_id, curve = rl_curve(uri)
    with (workdir / "soak.csv").open("w", newline="") as f:
        csv.writer(f).writerows([("seconds", "rss_gb"), *samples])
    with (workdir / "rl_rss.csv").open("w", newline="") as f:
        csv.writer(f).writerows([("iteration", "rl_seconds", "rss_gb"), *curve])
    draw(samples, curve, workdir / "soak.png")
    first, last = curve[0][2], curve[-1][2]
    peak = max(r for _, _, r in curve)
    print(f"run {run_id}: {len(curve)} RL iterations in {curve[-1][1] / 60:.1f} min")
    print(f"RSS after iteration {curve[0][0]}: {first:.3f} GB; after the last ({curve[-1][0]}): {last:.3f} GB; "
          f"largest: {peak:.3f} GB; whole process's largest sample: {max(r for _, r in samples):.3f} GB")
    print(f"growth during RL: first->last {100 * (last - first) / first:+.1f}%, first->largest "
          f"{100 * (peak - first) / first:+.1f}%")
    half = curve[len(curve) // 2][2]
    print(f"second half alone: {half:.3f} -> {last:.3f} GB ({100 * (last - half) / half:+.1f}%)")


if __name__ == "__main__":
    main()
