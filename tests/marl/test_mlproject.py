"""`mlflow run mlflow -e train_config|eval|compare ... --env-manager local` from the repository root: each entry
point logs into the run `mlflow run` made, in the store it resolved; the training run ends FINISHED with marl's
params, metrics and checkpoint beside the project's own parameters, the evaluation names its training run, and
the comparison compares the training run only."""

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
import yaml
from mlflow.tracking import MlflowClient
from run_helpers import tiny

from marl.config.files import to_yaml

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def tiny_project_run(tmp_path: Path) -> tuple[Path, str, dict[str, str]]:
    """A tiny config as YAML, a store, and the environment `mlflow run` is started in."""
    cfg = tiny(tmp_path)
    cfg.eval_episodes = 0
    cfg.tracking.tracking_uri = cfg.tracking.experiment = None  # from the environment `mlflow run` sets
    config = tmp_path / "tiny.yaml"
    config.write_text(to_yaml(cfg))
    store = f"sqlite:///{tmp_path}/store.db"
    env = {**os.environ, "MLFLOW_TRACKING_URI": store,
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("MLFLOW_RUN_ID", None)
    return config, store, env


def mlflow_run(env: dict[str, str], experiment: str, *args: str, manager: str = "local") -> subprocess.CompletedProcess:
    """`mlflow run mlflow <args>` from the repository root; it must succeed."""
    proc = subprocess.run([sys.executable, "-m", "mlflow", "run", "mlflow", *args, "--env-manager", manager,
                           "--experiment-name", experiment], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    return proc


def test_mlflow_run_trains_into_the_run_it_makes_in_the_callers_store(tmp_path):
    config, store, env = tiny_project_run(tmp_path)
    mlflow_run(env, "project", "-e", "train_config", "-P", f"config_yaml={config}",
               "-P", f"output_dir={tmp_path / 'runs'}")
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("project").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.tags["mlflow.source.type"] == "PROJECT" and run.data.tags["marl.kind"] == "train"
    assert run.data.params["config_yaml"] == str(config) and run.data.params["scenario"] == "tool_use"
    assert "rollout/success_rate" in run.data.metrics
    assert "checkpoint" in {a.path for a in client.list_artifacts(run.info.run_id)}
    assert not (REPO / "mlflow" / "mlflow.db").exists()  # nothing written inside the project folder

    mlflow_run(env, "project", "-e", "eval", "-P", f"checkpoint=runs:/{run.info.run_id}", "-P", "episodes=2")
    compared = mlflow_run(env, "project", "-e", "compare", "-P", "experiment=project")
    assert "1 runs in 1 groups" in compared.stdout  # the training run only: not the eval run, not itself
    kinds = sorted(r.data.tags["marl.kind"] for r in
                   client.search_runs([client.get_experiment_by_name("project").experiment_id]))
    assert kinds == ["comparison", "eval", "train"]
    eval_run = next(r for r in client.search_runs([client.get_experiment_by_name("project").experiment_id])
                    if r.data.tags["marl.kind"] == "eval")
    assert eval_run.data.tags["trained_run_id"] == run.info.run_id and eval_run.info.status == "FINISHED"


def test_mlflow_run_builds_its_own_virtualenv_from_python_env_yaml(tmp_path):
    """The environment MLflow builds (virtualenv + pyenv's Python of python_env.yaml, dependencies from the
    package index): skipped where that Python or virtualenv is missing, since building them needs the network."""
    wanted = yaml.safe_load((REPO / "mlflow" / "python_env.yaml").read_text())["python"]
    pyenv = shutil.which("pyenv") or str(Path.home() / ".pyenv" / "bin" / "pyenv")
    have = subprocess.run([pyenv, "versions", "--bare"], capture_output=True, text=True).stdout.split() \
        if Path(pyenv).exists() else []
    if str(wanted) not in have or importlib.util.find_spec("virtualenv") is None:
        pytest.skip(f"needs pyenv's Python {wanted} and virtualenv (installing them needs the network)")
    config, store, env = tiny_project_run(tmp_path)
    # A sqlite store opens only under the mlflow release whose schema made it, and MLflow reuses an environment
    # built for the same python_env.yaml whatever mlflow it installed then: pin the caller's release and keep
    # each release's environments apart, so the environment's mlflow is always the caller's.
    constraint = tmp_path / "constraints.txt"
    constraint.write_text(f"mlflow=={mlflow.__version__}\n")
    root = Path(os.environ.get("MLFLOW_ENV_ROOT", Path.home() / ".mlflow" / "envs"))
    env.update(PIP_CONSTRAINT=str(constraint), MLFLOW_ENV_ROOT=f"{root}-mlflow-{mlflow.__version__}")
    mlflow_run(env, "venv", "-e", "train_config", "-P", f"config_yaml={config}",
               "-P", f"output_dir={tmp_path / 'runs'}", manager="virtualenv")
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("venv").experiment_id])
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.project.env"] == "virtualenv"
    assert run.data.tags["marl.kind"] == "train" and "rollout/success_rate" in run.data.metrics
