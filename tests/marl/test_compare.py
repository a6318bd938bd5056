"""`marl compare` on a real sqlite MLflow store: runs picked by experiment, filter or ids; the parameters that
differ; groups over seeds with mean, std and a t-interval; md / csv / json; curves; the comparison kept as a run."""

import csv
import io
import json
import math

import pytest
from mlflow.tracking import MlflowClient

from marl.cli.compare import run_compare
from marl.config import CompareConfig, ConfigError
from marl.run.compare import COMPARISON_TAG, t95
from marl.run.tracking import Tracker

FINAL = {("grpo", 0): 0.50, ("grpo", 1): 0.70, ("grpo", 2): 0.60, ("mappo", 0): 0.80, ("mappo", 1): 0.90}


@pytest.fixture
def store(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    for (algo, seed), final in FINAL.items():
        with Tracker(uri, "study", f"{algo}-s{seed}", str(tmp_path / "mlruns")) as tr:
            tr.log_params({"algo": algo, "seed": str(seed), "rl.seconds": "180", "tracking.run_name": f"{algo}-s{seed}"})
            for it in range(1, 4):  # a learning curve, best at iteration 2
                tr.log_metrics({"rollout/success_rate": final * (1.2 if it == 2 else it / 3)}, step=it)
            tr.log_metrics({"eval/basic/success_rate": final}, step=3)
    with Tracker(uri, "study", "eval-of-grpo-s0", str(tmp_path / "mlruns"), command="marl eval") as tr:
        tr.log_params({"split": "basic"})  # an evaluation run: never one of the training runs compared
        tr.log_metrics({"eval/basic/success_rate": 0.0}, step=3)
    return uri, tmp_path


def test_groups_over_seeds_have_mean_std_and_a_t_interval_and_runs_show_what_differs(store):
    uri, _ = store
    text, run_id = run_compare(CompareConfig(tracking_uri=uri, experiment="study", log_run=False))
    assert run_id is None
    assert "grouped by: algo; parameters that differ: algo, seed, tracking.run_name" in text
    grpo = [0.5, 0.7, 0.6]
    half = t95(2) * 0.1 / math.sqrt(3)
    assert f"| algo=grpo | 3 | 0.600 ± 0.100 [{0.6 - half:.3f}, {0.6 + half:.3f}] (n=3) |" in text
    assert "| algo=mappo | 2 | 0.850 ± 0.071" in text and sum(grpo) / 3 == pytest.approx(0.6)
    # per run: the final value, and the best one where the run's curve was higher before
    table = json.loads(run_compare(CompareConfig(tracking_uri=uri, experiment="study", format="json",
                                                 metrics=("rollout/success_rate",), log_run=False))[0])
    first = next(r for r in table["runs"] if r["name"] == "grpo-s0")
    assert first["final"]["rollout/success_rate"] == pytest.approx(0.5) and first["best"]["rollout/success_rate"] == 0.6


def test_runs_are_picked_by_filter_or_ids_and_csv_has_one_row_per_run(store):
    uri, _ = store
    text, _ = run_compare(CompareConfig(tracking_uri=uri, experiment="study", filter="params.algo = 'mappo'",
                                        format="csv", log_run=False))
    rows = list(csv.DictReader(io.StringIO(text)))
    assert sorted(r["name"] for r in rows) == ["mappo-s0", "mappo-s1"]
    assert {r["final:eval/basic/success_rate"] for r in rows} == {"0.8", "0.9"}
    client = MlflowClient(uri)
    ids = tuple(r.info.run_id for r in client.search_runs([client.get_experiment_by_name("study").experiment_id])[:2])
    picked = json.loads(run_compare(CompareConfig(tracking_uri=uri, run_ids=ids, format="json", log_run=False))[0])
    assert sorted(r["run_id"] for r in picked["runs"]) == sorted(ids)
    with pytest.raises(ConfigError, match="its experiments: \\['Default', 'study'\\]"):
        run_compare(CompareConfig(tracking_uri=uri, experiment="nope", log_run=False))


def test_the_comparison_is_kept_as_a_run_with_tables_and_curves_and_never_compared_itself(store):
    uri, tmp_path = store
    text, run_id = run_compare(CompareConfig(tracking_uri=uri, experiment="study", output=str(tmp_path / "out")))
    client = MlflowClient(uri)
    run = client.get_run(run_id)
    assert run.data.tags[COMPARISON_TAG] == "true" and len(run.data.tags["compared_runs"].split(",")) == 5
    logged = {a.path for a in client.list_artifacts(run_id, "comparison")}
    assert {"comparison/comparison.md", "comparison/comparison.csv", "comparison/comparison.json",
            "comparison/curves"} <= logged
    curves = {a.path for a in client.list_artifacts(run_id, "comparison/curves")}
    assert curves == {"comparison/curves/rollout__success_rate.png"}  # the only curve metric with a history
    assert (tmp_path / "out" / "comparison.md").read_text() == text
    again, _ = run_compare(CompareConfig(tracking_uri=uri, experiment="study", log_run=False))
    assert "5 runs in 2 groups" in again  # the comparison run is not one of the runs compared


def test_under_mlflow_run_the_comparison_logs_into_the_run_it_was_handed_and_leaves_it_out(store, monkeypatch):
    uri, tmp_path = store
    client = MlflowClient(uri)
    handed = client.create_run(client.get_experiment_by_name("study").experiment_id).info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", handed)
    text, run_id = run_compare(CompareConfig(tracking_uri=uri, experiment="study"))
    assert run_id == handed and "5 runs in 2 groups" in text
    assert client.get_run(handed).data.tags["marl.kind"] == "comparison"
