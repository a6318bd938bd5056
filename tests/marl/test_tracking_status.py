"""How a run ends in MLflow: FINISHED, FAILED with its traceback as an artifact, KILLED on an interrupt."""

import pytest
from mlflow.tracking import MlflowClient

from marl.run.tracking import Tracker


def _tracker(tmp_path, run_id=None) -> Tracker:
    return Tracker(f"sqlite:///{tmp_path}/mlflow.db", "status", "r", str(tmp_path / "mlruns"), run_id=run_id)


def test_a_crash_ends_failed_with_its_traceback_and_an_interrupt_killed(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(ValueError, match="boom"), _tracker(tmp_path) as tr:
        raise ValueError("boom")
    run = client.get_run(tr.run_id)
    assert run.info.status == "FAILED" and run.data.tags["error"] == "ValueError: boom"
    text = (tmp_path / "mlruns").rglob("traceback.txt")
    assert "raise ValueError" in next(text).read_text()
    with pytest.raises(KeyboardInterrupt), _tracker(tmp_path) as killed:
        raise KeyboardInterrupt("stopped")
    assert client.get_run(killed.run_id).info.status == "KILLED"


def test_a_resumed_tracker_reopens_the_same_run(tmp_path):
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    with pytest.raises(KeyboardInterrupt), _tracker(tmp_path) as first:
        first.log_metrics({"x": 1.0}, step=1)
        raise KeyboardInterrupt
    with _tracker(tmp_path, run_id=first.run_id) as again:
        assert client.get_run(again.run_id).info.status == "RUNNING"
        again.log_metrics({"x": 2.0}, step=2)
    run = client.get_run(first.run_id)
    assert run.info.status == "FINISHED" and len(client.search_runs([run.info.experiment_id])) == 1
    assert [(m.step, m.value) for m in client.get_metric_history(first.run_id, "x")] == [(1, 1.0), (2, 2.0)]
