"""A learner's whole state as plain tensors and numbers, and back: what a resume point holds of it.

Everything an update reads or changes is here: the policy's weights and opponent head, the frozen KL
reference, the optimizer (Adam's moments and step counts), the KL controller's coefficient, the
learner's random generator (minibatch order, PPO-ptx draws), its counters, and the critic's weights
and optimizer. Restoring it into a learner built the same way makes the next update bit-identical
to the one the original learner would have made.

It leaves out writing files (`marl.run.resume`) and the demonstrations (rebuilt from their seeds).
"""

from __future__ import annotations

from typing import Any

import torch

from marl.engine.learner import Learner


def learner_state(learner: Learner) -> dict[str, Any]:
    """The learner's state as `torch.save`-able plain data (tensors, dicts, numbers, strings)."""
    head = learner.head
    critic = learner.critic
    return {
        "policy": learner.policy.model.state_dict(),
        "head": head.state_dict() if head is not None else None,
        "reference": learner.reference.model.state_dict(),
        "optimizer": learner.optimizer.state_dict(),
        "kl_coef": float(learner.kl.value),
        "rng": learner.rng.bit_generator.state,
        "nonfinite_streak": learner.nonfinite_streak,
        "updates": learner.updates,
        "critic": critic.model.state_dict() if critic is not None else None,
        "critic_optimizer": critic.optimizer.state_dict() if critic is not None else None,
    }


def restore_learner(learner: Learner, state: dict[str, Any]) -> None:
    """Put a saved state into a learner built the same way (same policy architecture, critic and head)."""
    if (state["head"] is None) != (learner.head is None) or (state["critic"] is None) != (learner.critic is None):
        raise ValueError("the saved learner and this one differ in having an opponent head or a critic: the resume "
                         "point was written by another configuration")
    with torch.no_grad():
        learner.policy.model.load_state_dict(state["policy"])
        learner.reference.model.load_state_dict(state["reference"])
        if learner.head is not None:
            learner.head.load_state_dict(state["head"])
        if learner.critic is not None:
            learner.critic.model.load_state_dict(state["critic"])
    learner.optimizer.load_state_dict(state["optimizer"])
    if learner.critic is not None:
        learner.critic.optimizer.load_state_dict(state["critic_optimizer"])
    learner.kl.value = float(state["kl_coef"])
    learner.rng.bit_generator.state = state["rng"]
    learner.nonfinite_streak = int(state["nonfinite_streak"])
    learner.updates = int(state["updates"])
