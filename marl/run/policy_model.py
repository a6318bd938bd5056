"""The pyfunc model class of a trained policy, in a file of its own: MLflow logs a model "from code" by running
this file, which names the model with `set_model` (see `marl.run.logged_model` for what it does).
"""

from __future__ import annotations

from typing import Any

import mlflow.pyfunc
from mlflow.models import set_model

from marl.engine.policy_map import PolicyMap


class PolicyModel(mlflow.pyfunc.PythonModel):
    """The pyfunc face of a checkpoint: observation texts in, the actions the policy writes out (greedy, unconstrained)."""

    def load_context(self, context: Any) -> None:
        from marl.run.build import load_policy

        policy, self.chat, self.meta = load_policy(context.artifacts["checkpoint"], device="cpu")
        self.policies = dict(policy.policies) if isinstance(policy, PolicyMap) else {self.meta.policies[0]: policy}

    def predict(self, context, model_input, params=None):  # untyped: the logged signature (with params) holds
        pid = (params or {}).get("policy") or next(iter(self.policies))
        if pid not in self.policies:
            raise ValueError(f"policy {pid!r} is not one of this model's: {sorted(self.policies)}")
        column = model_input.iloc[:, 0] if hasattr(model_input, "iloc") else model_input  # MLflow hands a DataFrame
        texts = [str(t) for t in column]
        if not texts:
            return []
        out = self.policies[pid].generate([self.chat.first(t) for t in texts], [None] * len(texts), greedy=True)
        return list(out.texts)


set_model(PolicyModel())
