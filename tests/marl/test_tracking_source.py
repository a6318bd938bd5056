"""What MLflow's UI and its users read off a run: where it came from (user, command, git commit), an experiment
that opens as model training, system metrics on request, the resolved config as YAML, and a run `mlflow run`
made adopted instead of duplicated."""

import subprocess
import time
from pathlib import Path

import mlflow
import mlflow.pyfunc
import pytest
import yaml
from mlflow.tracking import MlflowClient
from run_helpers import tiny

import scenarios
from marl.config.files import load_yaml
from marl.run.tracking import Tracker
from marl.run.train import train


def test_a_new_run_carries_its_source_and_git_commit_and_its_experiment_opens_as_model_training(tmp_path):
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).parent).stdout.strip()
    with Tracker(f"sqlite:///{tmp_path}/mlflow.db", "src", "r", str(tmp_path / "mlruns")) as tr:
        pass
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    tags = client.get_run(tr.run_id).data.tags
    assert tags["mlflow.source.git.commit"] == head and len(head) == 40
    assert tags["mlflow.source.name"] == "marl train" and tags["mlflow.source.type"] == "LOCAL"
    assert tags["mlflow.user"] and tags["git.dirty"] in ("true", "false")
    assert client.get_experiment(tr.experiment_id).tags["mlflow.experimentKind"] == "custom_model_development"
    assert tr.ui_path().endswith(f"/runs/{tr.run_id}?workflowType=machine_learning")


def test_system_metrics_are_sampled_while_the_run_lives(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL", "0.2")
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    with Tracker(f"sqlite:///{tmp_path}/mlflow.db", "sys", "r", str(tmp_path / "mlruns"), system_metrics=True) as tr:
        deadline = time.monotonic() + 60  # a loaded machine may take a while to write the first sample
        while "system/cpu_utilization_percentage" not in client.get_run(tr.run_id).data.metrics:
            assert time.monotonic() < deadline, "no system metrics sampled"
            time.sleep(0.2)
    metrics = client.get_run(tr.run_id).data.metrics
    assert "system/cpu_utilization_percentage" in metrics and metrics["system/system_memory_usage_megabytes"] > 0


def test_train_adopts_the_run_mlflow_run_made_and_logs_its_config_as_yaml_that_loads_back(tmp_path, monkeypatch):
    cfg = tiny(tmp_path)
    cfg.eval_episodes, cfg.tracking.log_model = 0, True
    client = MlflowClient(cfg.tracking.tracking_uri)
    made = client.create_run(client.create_experiment("proj", artifact_location=(tmp_path / "mlruns").as_uri()))
    monkeypatch.setenv("MLFLOW_RUN_ID", made.info.run_id)
    result = train(cfg)
    assert result.run_id == made.info.run_id and client.get_run(made.info.run_id).info.status == "FINISHED"
    saved = tmp_path / "config.yaml"
    client.download_artifacts(result.run_id, "config.yaml", str(tmp_path))
    assert "resume" not in yaml.safe_load(saved.read_text())
    assert load_yaml(saved) == cfg.resolved()
    tags = client.get_run(result.run_id).data.tags
    assert tags["scenario"] == "tool_use" and tags["algo"] == "grpo" and tags["policy"] == "tiny-moe"
    # the policy as an MLflow model: observation text in, action text out, as the checkpoint acts
    mlflow.set_tracking_uri(cfg.tracking.tracking_uri)
    model = mlflow.pyfunc.load_model(f"runs:/{result.run_id}/policy")
    env = scenarios.make("tool_use", n_agents=1, split="basic")
    observations, _ = env.reset(seed=3)
    first = observations[env.agents[0]]["text"]
    actions = model.predict([first, first])
    assert len(actions) == 2 and actions[0] == actions[1] and isinstance(actions[0], str)
    assert model.predict([first], params={"policy": "shared"}) == actions[:1]
    with pytest.raises(ValueError, match="not one of this model's"):
        model.predict([first], params={"policy": "nobody"})
    assert tags["model_uri"].startswith("models:/")
