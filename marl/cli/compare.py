"""`marl compare`: the runs of an MLflow experiment as one table, for side-by-side comparison."""

from __future__ import annotations

from mlflow.tracking import MlflowClient

from marl.config.checks import ConfigError


def compare_table(tracking_uri: str, experiment: str, metrics: list[str], max_runs: int = 50) -> str:
    """Plain-text table: one row per run (newest first), last value of each metric."""
    client = MlflowClient(tracking_uri=tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        raise ConfigError(f"experiment {experiment!r} does not exist at {tracking_uri}")
    runs = client.search_runs([exp.experiment_id], max_results=max_runs, order_by=["attributes.start_time DESC"])
    header = ["run_id", "name", "status", *metrics]
    rows = [header]
    for run in runs:
        values = [f"{run.data.metrics[m]:.3f}" if m in run.data.metrics else "-" for m in metrics]
        rows.append([run.info.run_id[:8], run.info.run_name or "", run.info.status, *values])
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)
