"""MLflow tracking of one run: params, batched metrics, transcripts and checkpoints as artifacts.

Metrics of a step go in one `log_batch` call (one call per metric is far slower into sqlite). The run is
ended FINISHED on success, FAILED on an exception (its traceback an artifact, `error/traceback.txt`) and
KILLED on Ctrl-C or SIGTERM, so nothing logged before a crash is lost and no run is left RUNNING. A
resumed run reopens its run (RUNNING again) instead of creating one.
A new run carries where it came from (user, command, git commit: `marl.run.source`), and its experiment the
tag that makes MLflow's UI open it as model training; system metrics (CPU, memory, disk, network) are
sampled on request. A new experiment gets a pinned artifact location, so artifacts never land wherever the current
directory happens to be. Metric names are checked against MLflow's allowed characters up front.
"""

from __future__ import annotations

import math
import re
import time
import traceback
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param
from mlflow.tracking import MlflowClient

from marl.run.source import EXPERIMENT_KIND, source_tags

_NAME_OK = re.compile(r"^[A-Za-z0-9_\-. :/]{1,250}$")


def resolve_artifact_location(location: str) -> str:
    """A local path becomes an absolute file URI; URIs pass through."""
    if "://" in location:
        return location
    return Path(location).expanduser().resolve().as_uri()


class Tracker:
    """One MLflow run; use as a context manager."""

    def __init__(self, tracking_uri: str, experiment: str, run_name: str | None, artifact_location: str,
                 run_id: str | None = None, command: str = "marl train", system_metrics: bool = False,
                 resumed: bool = False) -> None:
        """`run_id`: log into that run instead of creating one: a resumed run (`resumed`: its tags stand), or a
        new one made elsewhere (`mlflow run` hands it over in `$MLFLOW_RUN_ID`: it gets this run's tags);
        `system_metrics`: sample CPU, memory, disk and network into `system/...` meanwhile."""
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        self.monitor: Any = None
        if run_id is not None:  # the same run, RUNNING again, its metrics continue at later steps
            self.run = self.client.get_run(run_id)
            self.experiment_id = self.run.info.experiment_id
            self.run_id = run_id
            self.client.update_run(run_id, status="RUNNING")
            if not resumed:
                self.set_tags(source_tags(command))
        else:
            exp = self.client.get_experiment_by_name(experiment)
            if exp is None:
                exp_id = self.client.create_experiment(experiment, tags=EXPERIMENT_KIND,
                                                       artifact_location=resolve_artifact_location(artifact_location))
            else:
                exp_id = exp.experiment_id
            self.experiment_id = exp_id
            self.run = self.client.create_run(exp_id, run_name=run_name, tags=source_tags(command))
            self.run_id: str = self.run.info.run_id
        kind = self.client.get_experiment(self.experiment_id).tags.get("mlflow.experimentKind")
        if kind is None:  # an experiment made elsewhere: say what it holds, so the UI opens it as model training
            self.client.set_experiment_tag(self.experiment_id, *next(iter(EXPERIMENT_KIND.items())))
        if system_metrics:
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

            self.monitor = SystemMetricsMonitor(self.run_id, resume_logging=resumed,
                                                tracking_uri=tracking_uri)
            self.monitor.start()

    def __enter__(self) -> Tracker:
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        interrupted = exc_type is not None and issubclass(exc_type, KeyboardInterrupt | SystemExit)
        status = "FINISHED" if exc_type is None else ("KILLED" if interrupted else "FAILED")
        if self.monitor is not None:  # its last samples go in while the run is still RUNNING
            self.monitor.finish()
        try:
            if exc_type is not None:
                self.set_tags({"error": f"{exc_type.__name__}: {exc}"[:4000]})
            if exc_type is not None and not interrupted:
                self.log_text("".join(traceback.format_exception(exc_type, exc, tb)), "error/traceback.txt")
        finally:
            self.client.set_terminated(self.run_id, status=status)

    def log_params(self, params: dict[str, str]) -> None:
        """Log params; ones the run holds already are left as they are (MLflow refuses to change a param:
        a run restarted or adopted keeps what was logged first, and a changed value is a warning)."""
        held = self.client.get_run(self.run_id).data.params
        changed = sorted(k for k, v in params.items() if k in held and held[k] != str(v)[:6000])
        if changed:
            print(f"WARNING params {changed} keep the values the run logged first", flush=True)
        items = [Param(k, str(v)[:6000]) for k, v in sorted(params.items()) if k not in held]
        for i in range(0, len(items), 100):
            self.client.log_batch(self.run_id, params=items[i : i + 100])

    def set_tags(self, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(self.run_id, key, value)

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        """Log a step's metrics in one batch; non-finite values are dropped and counted."""
        now = int(time.time() * 1000)
        batch, dropped = [], 0
        for key, value in sorted(metrics.items()):
            if not _NAME_OK.match(key):
                raise ValueError(f"metric name {key!r} has characters MLflow rejects")
            value = float(value)
            if not math.isfinite(value):
                dropped += 1
                continue
            batch.append(Metric(key, value, now, step))
        if dropped:
            batch.append(Metric("train/nonfinite_metrics", float(dropped), now, step))
        for i in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[i : i + 1000])

    def log_text(self, text: str, artifact_file: str) -> None:
        self.client.log_text(self.run_id, text, artifact_file)

    def log_artifact(self, local_file: str | Path, artifact_path: str | None = None) -> None:
        self.client.log_artifact(self.run_id, str(local_file), artifact_path or None)

    def log_artifacts(self, local_dir: str | Path, artifact_path: str) -> None:
        self.client.log_artifacts(self.run_id, str(local_dir), artifact_path)

    def ui_command(self) -> str:
        return f"mlflow ui --backend-store-uri {self.tracking_uri}"

    def ui_path(self) -> str:
        """The run's page in the MLflow UI, after its address (as a model-training run, not the GenAI view)."""
        return f"/#/experiments/{self.experiment_id}/runs/{self.run_id}?workflowType=machine_learning"

