"""`marl compare`: pick runs from MLflow, print their comparison, and keep it as a run with its curves.

It picks runs (`--experiment`, `--filter`, `--run-ids`), prints the table (`--format md|csv|json`),
writes the three tables and one overlaid learning-curve PNG per `--curves` metric into `--output` or a
temporary folder, and logs them as artifacts of a comparison run in the experiment of the first run
(tag `marl.comparison`, never itself compared; `--no-log-run` skips it). The figures themselves are
`marl.run.compare` and `marl.run.compare_figures`.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from marl.config import CompareConfig, TrackingConfig
from marl.config.sections import experiment_or_default, tracking_uri_or_default
from marl.run.compare import COMPARISON_TAG, comparison, default_metrics, render, select_runs
from marl.run.compare_figures import learning_curves
from marl.run.tracking import Tracker


def run_compare(args: CompareConfig) -> tuple[str, str | None]:
    """The table in `args.format`, and the comparison run's id (None without `log_run`)."""
    uri = tracking_uri_or_default(args.tracking_uri)
    client = MlflowClient(uri)
    runs = select_runs(client, experiment_or_default(args.experiment), args.filter, args.run_ids, args.max_runs,
                       exclude=os.environ.get("MLFLOW_RUN_ID"))
    metrics = list(args.metrics) or default_metrics(runs)
    comp = comparison(client, runs, metrics, list(args.group_by) if args.group_by is not None else None)
    text = render(comp, args.format)
    if args.output is None and not args.log_run:
        return text, None
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(args.output) if args.output else Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for fmt in ("md", "csv", "json"):
            (folder / f"comparison.{fmt}").write_text(text if fmt == args.format else render(comp, fmt))
        learning_curves(client, comp, runs, list(args.curves), folder / "curves")
        if not args.log_run:
            return text, None
        experiment = client.get_experiment(runs[0].info.experiment_id).name
        with Tracker(uri, experiment, f"compare-{len(runs)}-runs", TrackingConfig.artifact_location,
                     run_id=os.environ.get("MLFLOW_RUN_ID"), command="marl compare") as tr:
            tr.set_tags({COMPARISON_TAG: "true", "compared_runs": ",".join(r.info.run_id for r in runs)[:5000],
                         "group_by": ",".join(comp.group_by)[:5000]})
            tr.log_params({"filter": args.filter or "-", "metrics": ",".join(metrics)[:500], "runs": str(len(runs))})
            tr.log_artifacts(folder, "comparison")
        return text, tr.run_id
