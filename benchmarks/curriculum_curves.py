"""A team-size curriculum against direct training at the target size: success curves by env steps and seconds.

Reads the runs of an `arms_table.py` study (one MLflow experiment, runs named `<arm>-s<seed>`): one arm
trains directly at the target team (`--agents 8`), the other grows the team (`--curriculum.stages
agents=2 agents=4 agents=8`). For each run it takes the training success of the target team after
every RL iteration: `rollout/success_rate` of a direct run, `curriculum/success/<team>` of a curriculum
run (its window of the target stage's recent episodes; absent until the curriculum gets there). The
curves are smoothed by a running mean over `--smooth` points, so a level counts as reached when it
holds for a few iterations rather than on one lucky batch.

Per seed it prints the env steps and seconds (SFT included) each arm needs to reach each level, the
ratio curriculum / direct measured on the same seed, each arm's best and final level, the level each
arm stands at when both have spent the same env steps (the smaller of the two totals) and the same
seconds (the earlier of the two last points), and the level
direct training's best: how long each arm takes to get there. With `--figure`, a PNG of both arms'
curves against env steps and against seconds.

    python benchmarks/curriculum_curves.py --workdir runs/exp/info-split-curriculum --experiment arms-info_split \\
        --direct direct --curriculum curriculum --team n8 --seeds 0 1 2 --figure curves.png
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from mlflow.tracking import MlflowClient

Curve = list[tuple[float, float, float]]  # (env steps, seconds since the run started, success)


def history(client: MlflowClient, run_id: str, key: str) -> dict[int, float]:
    return {m.step: m.value for m in client.get_metric_history(run_id, key)}


def target_curve(client: MlflowClient, run_id: str, team: str, smooth: int) -> tuple[Curve, float]:
    """The target team's training success after each iteration, smoothed, with its env steps and seconds;
    and the run's env steps in all (a curriculum's earlier stages included)."""
    metrics = client.get_run(run_id).data.metrics
    key = f"curriculum/success/{team}" if "curriculum/stage" in metrics else "rollout/success_rate"
    success, steps, seconds = (history(client, run_id, k) for k in (key, "progress/env_steps", "perf/elapsed_s"))
    sft = metrics.get("sft/seconds", 0.0)
    raw = [(steps[i], sft + seconds[i], success[i]) for i in sorted(success) if i in steps and i in seconds]
    out = []
    for j, (s, t, _) in enumerate(raw):
        recent = [v for _, _, v in raw[max(0, j - smooth + 1): j + 1]]
        out.append((s, t, statistics.mean(recent)))
    return out, max(steps.values(), default=0.0)


def first_reaching(curve: Curve, level: float) -> tuple[float, float] | None:
    return next(((s, t) for s, t, v in curve if v >= level - 1e-9), None)


def level_at(curve: Curve, budget: float, axis: int = 0) -> float:
    """Success at the last point within `budget` env steps (axis 0) or seconds (axis 1); 0 before the
    target team first plays."""
    before = [p[2] for p in curve if p[axis] <= budget]
    return before[-1] if before else 0.0


def run_id_of(client: MlflowClient, experiment: str, name: str) -> str:
    exp = client.get_experiment_by_name(experiment)
    runs = client.search_runs([exp.experiment_id], f"attributes.run_name = '{name}' and "
                              "attributes.status = 'FINISHED'", max_results=1) if exp else []
    if not runs:
        raise SystemExit(f"no FINISHED run named {name!r} in experiment {experiment!r}")
    return runs[0].info.run_id


def fmt(hit: tuple[float, float] | None) -> str:
    return "not reached" if hit is None else f"{hit[0]:,.0f} steps / {hit[1]:.0f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", type=Path, required=True, help="the arms_table.py workdir (its mlflow.db)")
    parser.add_argument("--experiment", required=True)
    parser.add_argument("--direct", default="direct", help="arm name of direct training at the target team")
    parser.add_argument("--curriculum", default="curriculum", help="arm name of the curriculum")
    parser.add_argument("--team", default="n8", help="the target stage's name (`n8`)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--levels", type=float, nargs="+", default=[0.5, 0.6, 0.7, 0.8])
    parser.add_argument("--smooth", type=int, default=3, help="running mean over this many iterations")
    parser.add_argument("--figure", type=Path, default=None)
    args = parser.parse_args()
    client = MlflowClient(tracking_uri=f"sqlite:///{args.workdir.resolve()}/mlflow.db")
    curves: dict[str, list[Curve]] = {args.direct: [], args.curriculum: []}
    totals: dict[str, list[float]] = {args.direct: [], args.curriculum: []}
    for seed in args.seeds:
        for arm in curves:
            curve, total = target_curve(client, run_id_of(client, args.experiment, f"{arm}-s{seed}"),
                                        args.team, args.smooth)
            curves[arm].append(curve)
            totals[arm].append(total)
    d, c = args.direct, args.curriculum
    print(f"training success of team {args.team}, running mean over {args.smooth} iterations\n")
    for i, seed in enumerate(args.seeds):
        dc, cc = curves[d][i], curves[c][i]
        print(f"## seed {seed}")
        for arm, curve in ((d, dc), (c, cc)):
            vals = [v for _, _, v in curve]
            print(f"- {arm}: best {max(vals, default=0):.3f}, final {vals[-1] if vals else 0:.3f}, "
                  f"{len(curve)} iterations at {args.team}, {totals[arm][i]:,.0f} env steps in all")
        equal = min(totals[d][i], totals[c][i])
        print(f"- at equal env steps ({equal:,.0f}): {d} {level_at(dc, equal):.3f}, {c} {level_at(cc, equal):.3f}")
        same_time = min(dc[-1][1] if dc else 0.0, cc[-1][1] if cc else 0.0)
        print(f"- at equal seconds ({same_time:.0f} s): {d} {level_at(dc, same_time, 1):.3f}, "
              f"{c} {level_at(cc, same_time, 1):.3f}")
        best_direct = max((v for _, _, v in dc), default=0.0)
        for level in [*args.levels, best_direct]:
            hd, hc = first_reaching(dc, level), first_reaching(cc, level)
            ratio = f", ratio {c}/{d}: steps {hc[0] / hd[0]:.2f}, seconds {hc[1] / hd[1]:.2f}" if hd and hc else ""
            tag = " (direct's best)" if level == best_direct else ""
            print(f"- level {level:.3f}{tag}: {d} {fmt(hd)}, {c} {fmt(hc)}{ratio}")
        print()
    if args.figure:
        draw(curves, args.team, args.seeds, args.figure)
        print(f"figure: {args.figure}")


def draw(curves: dict[str, list[Curve]], team: str, seeds: list[int], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    colors = {arm: color for arm, color in zip(curves, ("tab:blue", "tab:orange"), strict=False)}
    for arm, runs in curves.items():
        for seed, curve in zip(seeds, runs, strict=True):
            for ax, x in ((axes[0], 0), (axes[1], 1)):
                ax.plot([p[x] for p in curve], [p[2] for p in curve], color=colors[arm], alpha=0.8,
                        label=f"{arm} s{seed}", linestyle=("-", "--", ":", "-.")[seed % 4])
    for ax, label in zip(axes, ("env steps (RL)", "seconds (SFT + RL)"), strict=True):
        ax.set_xlabel(label)
        ax.set_ylabel(f"training success at {team}")
        ax.set_ylim(0, 1)
        ax.axhline(0.8, color="grey", linewidth=0.5)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
