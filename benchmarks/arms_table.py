"""Compare training arms (algorithms, topologies, ...) on one scenario: seeds x arms, held-out table.

Each arm is a name and the `marl train` flags that make it; every arm gets the same common flags
(scenario, agents, budgets), so arms differ only where they are meant to. Per seed and arm: one
`marl train` run (held-out evaluation on every non-training split), then optional extra evaluations
of its checkpoint with `marl eval` flags (e.g. the same team under 30% message drop). Prints a
markdown table (mean ± std over seeds of success and return per split), each mean's t-based 95%
confidence interval and, for named pairs, the per-seed differences measured in this one run with
their mean's interval. Everything lands in one MLflow experiment, so the
curves can be compared in the UI. Rerun with the same --workdir to resume: arms whose run of the
same name already FINISHED are read back instead of trained again, and an extra evaluation already
made with the same flags (saved as `runs/<id>/extra_evals/<name>.json`) is read back too.

    python benchmarks/arms_table.py --scenario navigation --agents 3 --seeds 0 1 2 \\
        --common "--sft.seconds 60 --rl.seconds 120" \\
        --arm "grpo=--algo grpo" --arm "ippo=--algo ippo" --arm "mappo=--algo mappo" --pair mappo,ippo

With `--shared-sft FLAGS`, each seed first trains one SFT-only run (`--iterations 0 FLAGS`, row
`sft`) and every arm starts its RL from that checkpoint (`--policy.model <it> --sft.seconds 0`): arms
that differ only in RL (algorithms) then share the SFT phase exactly, its seed-to-seed noise included,
at the same total budget and a third of the SFT cost. `{sft}` in an arm's flags stands for that
seed's SFT checkpoint (`--critic.model {sft}`: a critic warm-started from the policy's trunk). The
SFT run trains one shared policy (so `--common` must not set another mapping); an arm may still split
it (`--policy-mapping team` in the arm's flags): every team's policy then starts from the same SFT
weights, which learned every seat from the expert, and RL trains each team's copy on its own.
`{seed}` in an arm's flags stands for the seed: an arm that continues SFT from the shared checkpoint
on fresh demonstrations draws them with another seed than the checkpoint's (`--seed 10{seed}`).

    python benchmarks/arms_table.py --scenario info_split --agents 3 --seeds 0 1 2 \\
        --shared-sft "--sft.seconds 270" --common "--rl.seconds 180" \\
        --arm "grpo=--algo grpo" --arm "ippo=--algo ippo" --arm "mappo=--algo mappo" --pair mappo,ippo

    python benchmarks/arms_table.py --scenario info_split --agents 4 --seeds 0 1 2 \\
        --common "--sft.seconds 100000 --sft.max-steps 2500 --sft.lr-decay-fraction 0.3 --sft.demo-noise 0.1 \\
                  --rl.seconds 100000 --iterations 16 --rl.tasks-per-iteration 4" \\
        --arm "none=" --arm "ring=--comms.topology ring" --arm "full=--comms.topology full" \\
        --arm "full+drop=--comms.topology full --comms.drop 0.3" --eval "sampled=--no-greedy" \\
        --eval "drop30@full,full+drop=--comms-drop 0.3" --pair ring,none --pair full,none

    python benchmarks/arms_table.py --scenario tool_use --seeds 0 1 2 --episodes 200 \\
        --shared-sft "--sft.seconds 270" --common "--eval-episodes 50" \\
        --arm "rl=" --arm "sft-more=--iterations 0 --sft.seconds 180 --seed 10{seed}" \\
        --eval "unseen=--skip-seeds 100000" --pair "rl @ unseen,sft-more @ unseen"

    python benchmarks/arms_table.py --scenario predator_prey --agents 4 --seeds 0 1 2 \\
        --shared-sft "--sft.seconds 270" --common "--rl.seconds 180" \\
        --arm "grpo=--algo grpo --policy-mapping team" --arm "mappo=--algo mappo --policy-mapping team" \\
        --figures team/predator/success_rate team/prey/truncation_rate team/predator/return_mean team/prey/return_mean
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
from pathlib import Path

from mlflow.tracking import MlflowClient


def marl(args: list[str], cwd: Path) -> str:
    proc = subprocess.run([sys.executable, "-m", "marl.cli", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"marl {' '.join(args)} failed:\n{proc.stderr[-4000:]}")
    return proc.stdout


def named(spec: str) -> tuple[str, list[str]]:
    """`name=--flag value ...` -> (name, flags)."""
    if "=" not in spec:
        raise SystemExit(f"{spec!r}: write an arm or evaluation as NAME=FLAGS (FLAGS may be empty)")
    name, flags = spec.split("=", 1)
    return name.strip(), shlex.split(flags)


def finished_run(uri: str, experiment: str, run_name: str) -> str | None:
    """The id of a FINISHED run of that name in the experiment (a resumed benchmark reuses it)."""
    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{run_name}' and "
                              "attributes.status = 'FINISHED'", max_results=1)
    return runs[0].info.run_id if runs else None


def train_arm(cwd: Path, uri: str, experiment: str, run_name: str, flags: list[str]) -> tuple[dict[str, float], str]:
    run_id = finished_run(uri, experiment, run_name)
    if run_id is None:
        out = marl(["train", "--tracking-uri", uri, "--experiment", experiment, "--run-name", run_name, *flags], cwd)
        run_id = next(line.split()[1] for line in out.splitlines() if line.startswith("run_id: ") and "(" not in line)
    else:
        print(f"{run_name}: reusing finished run {run_id}", flush=True)
    checkpoint = str((cwd / "runs" / run_id / "checkpoint").resolve())  # marl train's default --output-dir, under cwd
    metrics = MlflowClient(tracking_uri=uri).get_run(run_id).data.metrics
    figures = {k.removeprefix("eval/"): v for k, v in metrics.items() if k.startswith("eval/")}
    for key, value in metrics.items():  # `--eval-sampled` runs: eval_sampled/<split>/x as <split>/sampled/x
        if key.startswith("eval_sampled/"):
            split, name = key.removeprefix("eval_sampled/").split("/", 1)
            figures[f"{split}/sampled/{name}"] = value
    figures["train_seconds"] = metrics.get("sft/seconds", 0.0) + metrics.get("perf/elapsed_s", 0.0)
    return figures, checkpoint


def extra_eval(cwd: Path, checkpoint: str, name: str, splits: list[str], episodes: int,
               flags: list[str]) -> dict[str, float]:
    """`marl eval` of a checkpoint on every split, kept beside it so a resumed benchmark reads it back."""
    request = {"splits": splits, "episodes": episodes, "flags": flags}
    saved = Path(checkpoint).parent / "extra_evals" / f"{name}.json"
    if saved.exists():
        record = json.loads(saved.read_text())
        if record.get("request") == request:
            print(f"{saved}: reusing the saved evaluation", flush=True)
            return record["figures"]
    out = {}
    for split in splits:
        line = marl(["eval", "--checkpoint", checkpoint, "--split", split, "--episodes", str(episodes), *flags], cwd)
        report = json.loads(line.strip().splitlines()[-1])
        out.update({f"{split}/{k}": v for k, v in report.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool)})
    saved.parent.mkdir(parents=True, exist_ok=True)
    saved.write_text(json.dumps({"request": request, "figures": out}, indent=1))
    return out


# Two-sided 95% quantiles of Student's t by degrees of freedom (the normal's 1.96 past 30).
T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
       12: 2.179, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042}


def ci95(values: list[float]) -> tuple[float, float]:
    """The t-based 95% confidence interval of the mean of `values` (seeds as independent draws)."""
    mean = statistics.mean(values)
    df = len(values) - 1
    t = T95.get(df) or (1.96 if df > 30 else T95[min(k for k in T95 if k >= df)])
    half = t * statistics.stdev(values) / len(values) ** 0.5
    return mean - half, mean + half


def cell(values: list[float]) -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return f"{values[0]:.3f}"
    return f"{statistics.mean(values):.3f} ± {statistics.stdev(values):.3f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenario", required=True)
    parser.add_argument("--agents", type=int, default=None)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--arm", action="append", required=True, help="NAME=FLAGS for `marl train` (repeatable)")
    parser.add_argument("--eval", action="append", default=[], help="NAME=FLAGS for an extra `marl eval` of every "
                        "checkpoint, NAME@ARM1,ARM2=FLAGS for those arms' only (repeatable)")
    parser.add_argument("--eval-arms", nargs="+", default=None, help="arms the extra evaluations apply to (default: all)")
    parser.add_argument("--common", default="", help="flags every arm gets (budgets, eval episodes, ...)")
    parser.add_argument("--episodes", type=int, default=100, help="held-out episodes per split")
    parser.add_argument("--pair", action="append", default=[], help="A,B: report A minus B per seed (repeatable)")
    parser.add_argument("--figures", nargs="+", default=["success_rate", "return_mean"],
                        help="held-out figures to tabulate (and pair) per split, e.g. team/predator/success_rate "
                        "team/prey/truncation_rate for a scenario with teams, sampled/success_rate for runs "
                        "with --eval-sampled")
    parser.add_argument("--shared-sft", default=None, help="flags of one SFT-only run per seed that every arm's RL "
                        "starts from (see the module docstring)")
    parser.add_argument("--workdir", type=Path, default=Path("runs/bench/arms"))
    parser.add_argument("--experiment", default=None)
    args = parser.parse_args()
    import scenarios

    args.workdir.mkdir(parents=True, exist_ok=True)
    uri = f"sqlite:///{args.workdir.resolve()}/mlflow.db"
    experiment = args.experiment or f"arms-{args.scenario}"
    splits = [s for s in scenarios.info(args.scenario).splits if s != "train"]
    agents = ["--agents", str(args.agents)] if args.agents else []
    common = ["--scenario", args.scenario, *agents, "--eval-episodes", str(args.episodes), *shlex.split(args.common)]
    arms = [named(a) for a in args.arm]
    evals, eval_only = [], {}  # `NAME@ARM1,ARM2=FLAGS`: an extra evaluation of those arms only
    for spec in args.eval:
        name, flags = named(spec)
        name, _, only = name.partition("@")
        evals.append((name, flags))
        if only:
            eval_only[name] = set(only.split(","))
    if args.shared_sft is not None and "--policy-mapping" in args.common and "shared" not in args.common:
        raise SystemExit("--shared-sft needs one shared policy: a checkpoint's extra policies would be ignored")
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in arms}
    if args.shared_sft is not None:
        results = {"sft": [], **results}
    eval_arms = set(args.eval_arms) if args.eval_arms else {arm for arm, _ in arms}

    def evaluated(arm: str, ev: str) -> bool:
        return arm in eval_only.get(ev, eval_arms)

    for name, _ in evals:
        for arm, _ in arms:
            if evaluated(arm, name):
                results[f"{arm} @ {name}"] = []
    for seed in args.seeds:
        start: list[str] = []
        if args.shared_sft is not None:
            figures, sft_checkpoint = train_arm(args.workdir, uri, experiment, f"sft-s{seed}",
                                                [*common, "--seed", str(seed), "--iterations", "0",
                                                 *shlex.split(args.shared_sft)])
            results["sft"].append(figures)
            start = ["--policy.model", sft_checkpoint, "--sft.seconds", "0"]
        for arm, flags in arms:
            if start:  # `{sft}` in an arm's flags names this seed's shared SFT checkpoint (a warm-started critic)
                flags = [f.replace("{sft}", sft_checkpoint) for f in flags]
            elif any("{sft}" in f for f in flags):
                raise SystemExit(f"arm {arm}: {{sft}} names the shared SFT checkpoint; add --shared-sft")
            flags = [f.replace("{seed}", str(seed)) for f in flags]
            figures, checkpoint = train_arm(args.workdir, uri, experiment, f"{arm}-s{seed}",
                                            [*common, "--seed", str(seed), *start, *flags])
            results[arm].append(figures)
            for ev, ev_flags in ((e, f) for e, f in evals if evaluated(arm, e)):
                results[f"{arm} @ {ev}"].append(extra_eval(args.workdir, checkpoint, ev, splits, args.episodes, ev_flags))
            shown = ", ".join(f"{s} {figures.get(f'{s}/success_rate', float('nan')):.3f}" for s in splits)
            print(f"seed {seed} {arm}: {shown} ({figures['train_seconds']:.0f} s of training)", flush=True)
    print(f"\n{args.scenario}, agents {args.agents or 'default'}, seeds {args.seeds}, {args.episodes} held-out "
          f"episodes per split; common flags: {' '.join(common)}\n")
    header = " | ".join(f"{s} {f}" for s in splits for f in args.figures)
    print(f"| arm | {header} | train seconds |")
    print("|---|" + "---|" * (len(args.figures) * len(splits) + 1))
    for name, rows in results.items():
        cells = [cell([r[f"{s}/{f}"] for r in rows if f"{s}/{f}" in r]) for s in splits for f in args.figures]
        secs = [r["train_seconds"] for r in rows if "train_seconds" in r]
        print(f"| {name} | " + " | ".join(cells) + f" | {cell(secs)} |")
    print("\n95% confidence intervals of each arm's mean over seeds:")
    for name, rows in results.items():
        shown = []
        for s in splits:
            for f in args.figures:
                values = [r[f"{s}/{f}"] for r in rows if f"{s}/{f}" in r]
                if len(values) > 1:
                    low, high = ci95(values)
                    shown.append(f"{s} {f} {low:.3f} to {high:.3f}")
        print(f"- {name}: " + "; ".join(shown))
    for pair in args.pair:
        a, b = pair.split(",")
        for s in splits:
            shown = []
            for f in args.figures:
                diffs = [x[f"{s}/{f}"] - y[f"{s}/{f}"] for x, y in zip(results[a], results[b], strict=True)
                         if f"{s}/{f}" in x and f"{s}/{f}" in y]
                if len(diffs) > 1:
                    low, high = ci95(diffs)
                    shown.append(f"{f} {', '.join(f'{d:+.3f}' for d in diffs)} (mean {statistics.mean(diffs):+.3f}, "
                                 f"95% CI {low:+.3f} to {high:+.3f})")
                elif diffs:
                    shown.append(f"{f} {diffs[0]:+.3f}")
            print(f"{a} minus {b} on {s}: " + "; ".join(shown))


if __name__ == "__main__":
    main()
