"""A trained policy as an MLflow model: `mlflow.pyfunc.load_model(uri).predict([observation, ...])` -> actions.

The model wraps the run's checkpoint folder (weights, tokenizer, metadata record) and the code that
reads it (`marl`, `policies`, `scenarios`, `comms` as code paths), so it loads wherever those packages'
dependencies are installed. `predict` takes observation texts, each the first observation of an
episode as the scenario wrote it, and returns the action each policy writes greedily; decoding is
unconstrained (the scenario's action grammar needs a live environment), so a weak policy may write an
invalid action, as it would without constrained decoding. With several policies (team or agent
mapping), the first one acts unless `params={"policy": id}` names another. Logged under the name
`policy`, it fills the run's Models column in MLflow's UI. The model is logged from code
(`marl.run.policy_model`), so loading it unpickles nothing. It leaves out serving and multi-turn
conversations (an episode's later turns need the environment's replies).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import mlflow
import mlflow.pyfunc

import comms
import marl
import policies
import scenarios

MODEL_NAME = "policy"
_REQUIREMENTS = ["torch", "transformers", "safetensors", "tokenizers", "pettingzoo", "networkx", "numpy", "pyyaml",
                 "tyro", "tqdm", "mlflow"]


def log_policy_model(tracking_uri: str, run_id: str, checkpoint: Path) -> str:
    """Log `checkpoint` as the run's MLflow model `policy`; returns its model URI (`models:/<model id>`)."""
    code = [str(Path(pkg.__file__).parent) for pkg in (marl, policies, scenarios, comms)]
    from mlflow.models import infer_signature

    from marl.run.checkpoint import read_meta

    first = (read_meta(checkpoint).policies or ("shared",))[0]
    signature = infer_signature(["an observation"], ["an action"], params={"policy": first})
    mlflow.set_tracking_uri(tracking_uri)
    bar = os.environ.get("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR")
    os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = "false"  # a copy between local folders; no bar in the run's output
    try:
        with mlflow.start_run(run_id=run_id), warnings.catch_warnings():  # the run is RUNNING already; the caller ends it
            # The signature is given (with params), so MLflow's advice to add an input example does not apply.
            warnings.filterwarnings("ignore", message=r".*input example.*", category=UserWarning)
            info = mlflow.pyfunc.log_model(name=MODEL_NAME, python_model=str(Path(__file__).with_name("policy_model.py")),
                                           artifacts={"checkpoint": str(checkpoint)}, code_paths=code,
                                           pip_requirements=_REQUIREMENTS, signature=signature)
    finally:  # leaving the fluent run ended it; the caller's run goes on
        mlflow.MlflowClient(tracking_uri).update_run(run_id, status="RUNNING")
        if bar is None:
            os.environ.pop("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", None)
        else:
            os.environ["MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"] = bar
    return info.model_uri
