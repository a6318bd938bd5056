"""A trained policy as an MLflow model: `mlflow.pyfunc.load_model(uri).predict([observation, ...])` -> actions.

The model wraps the run's checkpoint folder (weights, tokenizer, metadata record) and the code that
reads it (`marl`, `policies`, `scenarios`, `comms` as code paths), so it loads wherever those packages'
dependencies are installed. `predict` takes observation texts, each the first observation of an
episode as the scenario wrote it, and returns the action each policy writes greedily; decoding is
unconstrained (the scenario's action grammar needs a live environment), so a weak policy may write an
invalid action, as it would without constrained decoding. With several policies (team or agent
mapping), the first one acts unless `params={"policy": id}` names another. Logged under the name
`policy`, it fills the run's Models column in MLflow's UI. It leaves out serving and multi-turn
conversations (an episode's later turns need the environment's replies).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mlflow
import mlflow.pyfunc

import comms
import marl
import policies
import scenarios
from marl.engine.policy_map import PolicyMap

MODEL_NAME = "policy"
_REQUIREMENTS = ["torch", "transformers", "safetensors", "tokenizers", "pettingzoo", "networkx", "numpy", "pyyaml",
                 "tyro", "tqdm", "mlflow"]


class PolicyModel(mlflow.pyfunc.PythonModel):
    """The pyfunc face of a checkpoint (see the module docstring)."""

    def load_context(self, context: Any) -> None:
        from marl.run.build import load_policy

        policy, self.chat, self.meta = load_policy(context.artifacts["checkpoint"], device="cpu")
        self.policies = dict(policy.policies) if isinstance(policy, PolicyMap) else {self.meta.policies[0]: policy}

    def predict(self, context: Any, model_input: list[str], params: dict[str, Any] | None = None) -> list[str]:
        pid = (params or {}).get("policy") or next(iter(self.policies))
        if pid not in self.policies:
            raise ValueError(f"policy {pid!r} is not one of this model's: {sorted(self.policies)}")
        texts = [str(t) for t in model_input]
        if not texts:
            return []
        out = self.policies[pid].generate([self.chat.first(t) for t in texts], [None] * len(texts), greedy=True)
        return list(out.texts)


def log_policy_model(tracking_uri: str, run_id: str, checkpoint: Path) -> str:
    """Log `checkpoint` as the run's MLflow model `policy`; returns its model URI (`models:/<model id>`)."""
    code = [str(Path(pkg.__file__).parent) for pkg in (marl, policies, scenarios, comms)]
    from mlflow.models import infer_signature

    from marl.run.checkpoint import read_meta

    first = (read_meta(checkpoint).policies or ("shared",))[0]
    signature = infer_signature(["an observation"], ["an action"], params={"policy": first})
    mlflow.set_tracking_uri(tracking_uri)
    try:
        with mlflow.start_run(run_id=run_id):  # the run is RUNNING already; the caller ends it
            info = mlflow.pyfunc.log_model(name=MODEL_NAME, python_model=PolicyModel(),
                                           artifacts={"checkpoint": str(checkpoint)}, code_paths=code,
                                           pip_requirements=_REQUIREMENTS, signature=signature)
    finally:  # leaving the fluent run ended it; the caller's run goes on
        mlflow.MlflowClient(tracking_uri).update_run(run_id, status="RUNNING")
    return info.model_uri
