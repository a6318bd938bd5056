"""Held-out learning table for tool_use: SFT+RL (the default) vs SFT alone at equal wall-clock.

Runs, per seed: `marl train` with its defaults (SFT then RL), and `marl train --iterations 0` with
the SFT budget raised to the default's SFT + RL budget (equal wall-clock). Both evaluate greedily on
the same 200 held-out seeds per split. Then the untrained policy and the scripted expert through
`marl eval`. Prints a markdown table (mean and spread over seeds) and the per-seed differences on
`hard`, measured in this one run. Slow: about 20 minutes per seed on 2 cores.

    python benchmarks/learning_table.py --seeds 0 1 2 --episodes 200 --workdir runs/bench/learning
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient

SPLITS = ("basic", "hard", "adversarial")


def marl(args: list[str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "marl.cli", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"marl {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


def run_id_of(stdout: str) -> str:
    return next(line.split()[1] for line in stdout.splitlines() if line.startswith("run_id: ") and "(" not in line)


def train_run(cwd: Path, uri: str, name: str, extra: list[str], episodes: int) -> dict[str, float]:
    out = marl(["train", "--tracking-uri", uri, "--experiment", "learning-table", "--run-name", name,
                "--eval-episodes", str(episodes), *extra], cwd)
    run = MlflowClient(tracking_uri=uri).get_run(run_id_of(out))
    figures = {split: run.data.metrics[f"eval/{split}/success_rate"] for split in SPLITS}
    sft_s = run.data.metrics.get("sft/seconds", 0.0)
    rl_s = run.data.metrics.get("perf/elapsed_s", 0.0)
    figures["train_seconds"] = sft_s + rl_s
    return figures


def baseline(cwd: Path, policy: str, episodes: int, seed: int) -> dict[str, float]:
    out = {}
    for split in SPLITS:
        line = marl(["eval", "--policy", policy, "--split", split, "--episodes", str(episodes), "--seed", str(seed)],
                    cwd)
        out[split] = json.loads(line.strip().splitlines()[-1])["success_rate"]
    return out


def cell(values: list[float]) -> str:
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--episodes", type=int, default=200)
    parser.add_argument("--workdir", type=Path, default=Path("runs/bench/learning"))
    parser.add_argument("--sft-seconds", type=float, default=None, help="default: the config's SFT + RL budget")
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{args.workdir.resolve()}/mlflow.db"
    from marl.config import TrainConfig

    defaults = TrainConfig()
    sft_only_seconds = args.sft_seconds or defaults.sft.seconds + defaults.rl.seconds
    rows: dict[str, list[dict[str, float]]] = {"SFT + RL (default `marl train`)": [], "SFT alone, equal wall-clock": []}
    for seed in args.seeds:
        rl = train_run(args.workdir, uri, f"sft+rl-s{seed}", ["--seed", str(seed)], args.episodes)
        sft = train_run(args.workdir, uri, f"sft-only-s{seed}",
                        ["--seed", str(seed), "--iterations", "0", "--sft.seconds", str(sft_only_seconds)],
                        args.episodes)
        rows["SFT + RL (default `marl train`)"].append(rl)
        rows["SFT alone, equal wall-clock"].append(sft)
        print(f"seed {seed}: sft+rl {rl}  sft-only {sft}  hard diff {rl['hard'] - sft['hard']:+.3f}", flush=True)
    rows["untrained (random-init tiny MoE, constrained)"] = [baseline(args.workdir, "untrained", args.episodes, 0)]
    rows["scripted expert"] = [baseline(args.workdir, "expert", args.episodes, 0)]
    print(f"\n{args.episodes} held-out episodes per split, greedy decoding, seeds {args.seeds} (mean ± std over seeds)\n")
    print("| policy | basic | hard | adversarial | train seconds |")
    print("|---|---|---|---|---|")
    for name, results in rows.items():
        secs = [r["train_seconds"] for r in results if "train_seconds" in r]
        print(f"| {name} | " + " | ".join(cell([r[s] for r in results]) for s in SPLITS)
              + f" | {cell(secs) if secs else '-'} |")
    diffs = [a["hard"] - b["hard"] for a, b in zip(rows["SFT + RL (default `marl train`)"],
                                                    rows["SFT alone, equal wall-clock"], strict=True)]
    print(f"\nRL minus SFT-alone on hard, per seed: {', '.join(f'{d:+.3f}' for d in diffs)}; "
          f"mean {statistics.mean(diffs):+.3f}")


if __name__ == "__main__":
    main()
