"""Comparing runs: the runs a user picks, the parameters that tell them apart, and their figures over seeds.

`select_runs` picks runs from an MLflow store by experiment, filter string or ids (comparison runs
themselves left out). `comparison` turns them into plain data: per run its parameters that differ
between the runs, the final and best value of each metric; per group (the runs that share every
grouping parameter: by default all differing parameters but the seed and the run-specific ones) the
mean, standard deviation and a 95% t-interval of each metric over its runs (seeds). `render` writes
that as a Markdown table, CSV (one row per run) or JSON. The learning-curve figures and the MLflow run
that keeps a comparison live in `marl.run.compare_figures` and `marl.cli.compare`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import statistics
from dataclasses import dataclass, field

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from marl.config.checks import ConfigError
from marl.run.source import KIND_TAG

COMPARISON_TAG = "marl.comparison"
"""Tag of the runs `marl compare` logs, for filtering in the UI (selection goes by their `marl.kind`)."""
NOT_COMPARED = {"eval", "comparison"}
"""Kinds of run (tag `marl.kind`) a search leaves out: evaluations and comparisons are not training runs."""
RUN_SPECIFIC = {"seed", "tracking.run_name", "config", "resume", "output_dir", "tracking.artifact_location",
                "tracking.tracking_uri", "tracking.experiment", "model.parameters", "device", "tokenizer.size"}
"""Parameters that differ between runs without telling their treatments apart (never grouped by)."""
_T95 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
        15: 2.131, 20: 2.086, 30: 2.042}


def t95(dof: int) -> float:
    """Student's t quantile for a two-sided 95% interval (the nearest tabled degrees of freedom below; 1.96 past 30)."""
    if dof > 30:
        return 1.96
    return _T95[max(k for k in _T95 if k <= dof)]


def select_runs(client: MlflowClient, experiment: str, filter_string: str = "", run_ids: tuple[str, ...] = (),
                max_runs: int = 200, exclude: str | None = None) -> list[Run]:
    """The runs to compare, oldest first: `run_ids` (any experiment), else the experiment's newest `max_runs` runs
    matching `filter_string` (MLflow's search syntax, e.g. `params.algo = 'mappo'`); evaluation and comparison
    runs are left out of a search, and so is `exclude` (the comparison's own run)."""
    if run_ids:
        runs = [client.get_run(r) for r in run_ids]
    else:
        exp = client.get_experiment_by_name(experiment)
        if exp is None:
            names = sorted(e.name for e in client.search_experiments())
            raise ConfigError(f"experiment {experiment!r} does not exist in this store; its experiments: {names}")
        newest = client.search_runs([exp.experiment_id], filter_string=filter_string, max_results=max_runs,
                                    order_by=["attributes.start_time DESC"])
        runs = [r for r in reversed(newest) if r.data.tags.get(KIND_TAG) not in NOT_COMPARED and r.info.run_id != exclude]
    if not runs:
        raise ConfigError("no runs to compare: check --experiment, --filter or --run-ids")
    return runs


@dataclass
class RunRow:
    """One run: its identity, the parameters that differ between the compared runs, its figures."""

    run_id: str
    name: str
    status: str
    params: dict[str, str]
    final: dict[str, float]
    best: dict[str, float]
    group: str = ""


@dataclass
class GroupRow:
    """The runs that share every grouping parameter, with each metric's spread over them."""

    name: str
    params: dict[str, str]
    runs: list[str]
    stats: dict[str, dict[str, float]] = field(default_factory=dict)
    """metric -> n, mean, std, ci_low, ci_high (over the runs that logged it)."""


@dataclass
class Comparison:
    differing: list[str]
    group_by: list[str]
    metrics: list[str]
    runs: list[RunRow]
    groups: list[GroupRow]


def differing_params(runs: list[Run]) -> list[str]:
    """The parameters whose value is not the same in every run (absent counts as a value)."""
    keys = sorted({k for r in runs for k in r.data.params})
    return [k for k in keys if len({r.data.params.get(k) for r in runs}) > 1]


def default_metrics(runs: list[Run]) -> list[str]:
    """Every held-out success rate the runs logged (`eval/<split>/success_rate`, `eval/<team>/<split>/...`),
    else their training success."""
    found = sorted({k for r in runs for k in r.data.metrics if k.startswith("eval/") and k.endswith("/success_rate")})
    return found or ["rollout/success_rate"]


def best_value(client: MlflowClient, run: Run, key: str) -> float | None:
    history = [m.value for m in client.get_metric_history(run.info.run_id, key) if math.isfinite(m.value)]
    return max(history) if history else None


def spread(values: list[float]) -> dict[str, float]:
    n = len(values)
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if n > 1 else 0.0
    half = t95(n - 1) * std / math.sqrt(n) if n > 1 else 0.0
    return {"n": float(n), "mean": mean, "std": std, "ci_low": mean - half, "ci_high": mean + half}


def comparison(client: MlflowClient, runs: list[Run], metrics: list[str], group_by: list[str] | None = None) -> Comparison:
    """Per run and per group figures of `metrics` (final: the last value logged; best: the largest)."""
    differing = differing_params(runs)
    keys = [k for k in differing if k not in RUN_SPECIFIC] if group_by is None else list(group_by)
    rows, groups = [], {}
    for run in runs:
        data = run.data
        final = {m: data.metrics[m] for m in metrics if m in data.metrics and math.isfinite(data.metrics[m])}
        best = {m: b for m in metrics if (b := best_value(client, run, m)) is not None}
        label = ", ".join(f"{k}={data.params.get(k, '-')}" for k in keys) or "all runs"
        rows.append(RunRow(run.info.run_id, run.info.run_name or "", run.info.status,
                           {k: data.params.get(k, "-") for k in differing}, final, best, label))
        groups.setdefault(label, GroupRow(label, {k: data.params.get(k, "-") for k in keys}, [])).runs.append(
            run.info.run_id)
    by_id = {r.run_id: r for r in rows}
    for group in groups.values():
        for m in metrics:
            values = [by_id[r].final[m] for r in group.runs if m in by_id[r].final]
            if values:
                group.stats[m] = spread(values)
    return Comparison(differing, keys, metrics, rows, list(groups.values()))


def _cell(stats: dict[str, float] | None) -> str:
    if stats is None:
        return "-"
    if stats["n"] < 2:
        return f"{stats['mean']:.3f} (n=1)"
    return f"{stats['mean']:.3f} ± {stats['std']:.3f} [{stats['ci_low']:.3f}, {stats['ci_high']:.3f}] (n={int(stats['n'])})"


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render(comp: Comparison, fmt: str) -> str:
    """The comparison as `md` (groups: mean ± std [95% CI] over runs; then every run), `csv` (one row per run) or
    `json` (everything)."""
    if fmt == "json":
        return json.dumps({"differing_params": comp.differing, "group_by": comp.group_by, "metrics": comp.metrics,
                           "groups": [vars(g) for g in comp.groups], "runs": [vars(r) for r in comp.runs]}, indent=1)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["run_id", "name", "status", "group", *comp.differing,
                         *[f"final:{m}" for m in comp.metrics], *[f"best:{m}" for m in comp.metrics]])
        for r in comp.runs:
            writer.writerow([r.run_id, r.name, r.status, r.group, *[r.params[k] for k in comp.differing],
                             *[r.final.get(m, "") for m in comp.metrics], *[r.best.get(m, "") for m in comp.metrics]])
        return out.getvalue()
    if fmt != "md":
        raise ConfigError(f"--format {fmt!r}: choose md, csv or json")
    parts = [f"{len(comp.runs)} runs in {len(comp.groups)} groups; grouped by: {', '.join(comp.group_by) or 'nothing'}"
             f"; parameters that differ: {', '.join(comp.differing) or 'none'}", "",
             "mean ± std [95% t-interval] over each group's runs (final values)", "",
             _md_table(["group", "runs", *comp.metrics],
                       [[g.name, str(len(g.runs)), *[_cell(g.stats.get(m)) for m in comp.metrics]] for g in comp.groups]),
             "", _md_table(["run", "name", "status", *comp.differing, *[f"{m} (final / best)" for m in comp.metrics]],
                           [[r.run_id[:8], r.name, r.status, *[r.params[k] for k in comp.differing],
                             *[_final_best(r, m) for m in comp.metrics]] for r in comp.runs])]
    return "\n".join(parts) + "\n"


def _final_best(row: RunRow, metric: str) -> str:
    if metric not in row.final:
        return "-"
    best = row.best.get(metric)
    return f"{row.final[metric]:.3f}" + (f" / {best:.3f}" if best is not None and best != row.final[metric] else "")


def metric_histories(client: MlflowClient, runs: list[Run], key: str) -> dict[str, list[tuple[int, float]]]:
    """Each run's (step, value) history of `key` (runs that never logged it left out)."""
    out: dict[str, list[tuple[int, float]]] = {}
    for run in runs:
        history = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)
                         if math.isfinite(m.value))
        if history:
            out[run.info.run_id] = history
    return out
