"""The opponent-model head: from an agent's own context, a distribution over each other's next action class.

A linear layer on the policy's last hidden state at the end of a turn's prompt (the token after
which the agent starts writing its action), so the prediction reads exactly the history the agent
acts on and nothing else: decentralized at execution, whatever was used to train it. Its output
is `[slots, classes]` logits: one distribution per other agent the scenario lets the agent predict
(`opponent_slots`), over the scenario's `action_classes`. The head is small next to the trunk;
what makes it work is the trunk learning to carry the history forward, which the cross-entropy
trains through the head's gradient into the trunk.

With `feeds_prompt` the prediction is also put in front of the agent (`aux+input`): rendered as
text (`hint_text`: each slot's predicted class name) right after the turn's prompt, before the
action, so the policy reads it like any other token of its context. With `in_match` the shown class is
that of a mixture of the head and predictors fitted to the match so far, which the engine supplies
(`hint_mix`); the head itself is trained and replayed the same either way. The head reads the hidden
state before the hint (its own prediction cannot be its input), the policy acts after it. Text
rather than hidden features: the prediction then lives in the token stream the learner already
replays untouched, the tokenizer keeps class names whole (they are scenario entities), and a
transcript shows what the agent was told; a feature added to the hidden state would need every
forward (generation, scoring, the KV cache) to carry it.

It leaves out the loss weighting and the labels (the engine's).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

WEIGHTS = "opponent_head.pt"
CONFIG = "opponent_head.json"


class OpponentHead(torch.nn.Module):
    """Logits `[n, slots, classes]` from hidden states `[n, hidden]`."""

    def __init__(self, hidden_size: int, slots: int, classes: tuple[str, ...], feeds_prompt: bool = False,
                 in_match: bool = False) -> None:
        super().__init__()
        self.feeds_prompt = feeds_prompt
        self.in_match = in_match
        """With `feeds_prompt`: the shown prediction is the head's mixed with what the match so far shows
        (the rollout's `hint_mix`), not the head's alone."""
        if slots < 1 or len(classes) < 2:
            raise ValueError(f"an opponent head needs at least one slot and two classes, got {slots} and {classes}")
        self.slots = slots
        self.classes = tuple(classes)
        self.linear = torch.nn.Linear(hidden_size, slots * len(self.classes))

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.linear(hidden.to(self.linear.weight.dtype)).view(-1, self.slots, len(self.classes))

    def save(self, folder: str | Path) -> None:
        """Weights and shape into `folder` (a checkpoint's)."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        torch.save(self.state_dict(), folder / WEIGHTS)
        (folder / CONFIG).write_text(json.dumps({"hidden_size": self.linear.in_features, "slots": self.slots,
                                                 "classes": list(self.classes), "feeds_prompt": self.feeds_prompt,
                                                 "in_match": self.in_match}))

    @classmethod
    def load(cls, folder: str | Path, device: torch.device | str = "cpu") -> OpponentHead | None:
        """The head saved in `folder`, or None when it holds none."""
        folder = Path(folder)
        if not (folder / CONFIG).is_file():
            return None
        spec = json.loads((folder / CONFIG).read_text())
        head = cls(int(spec["hidden_size"]), int(spec["slots"]), tuple(spec["classes"]),
                   bool(spec.get("feeds_prompt", False)), bool(spec.get("in_match", False)))
        head.load_state_dict(torch.load(folder / WEIGHTS, map_location="cpu", weights_only=True))
        return head.to(device)


def shown_classes(head: OpponentHead, hidden: torch.Tensor,
                  hint_mix: Callable[[Sequence[int], torch.Tensor], torch.Tensor] | None = None) -> list[list[int]]:
    """The class shown per row and slot: the head's argmax, or where the head adapts in-match the argmax of
    `hint_mix(rows, probs)` (the rollout worker's mixture of the head with predictors fitted to the match)."""
    scores = head(hidden)
    if getattr(head, "in_match", False):
        if hint_mix is not None:
            scores = hint_mix(list(range(scores.shape[0])), scores.float().softmax(-1))
        else:  # only a rollout worker keeps the match's history; a bare call can show the head alone
            warnings.warn("the opponent head adapts in-match, but this call has no hint_mix (only the rollout "
                          "worker's generation has one): the head's own prediction is shown", stacklevel=4)
    return scores.argmax(-1).tolist()


def hint_text(classes: tuple[str, ...], predicted: list[int]) -> str:
    """What the agent is shown of a prediction: each slot's predicted class name, then a newline."""
    return " ".join(classes[k] for k in predicted) + "\n"


def opponent_loss(logits: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Summed cross-entropy over the labelled (row, slot) pairs of `labels` (`[n, slots]`, -1 unlabelled),
    the number of correct argmax predictions among them, and their count; sums so that micro-batches add up."""
    flat, target = logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1).to(logits.device)
    known = target >= 0
    if not bool(known.any()):
        zero = logits.sum() * 0.0
        return zero, zero.detach(), zero.detach()
    ce = torch.nn.functional.cross_entropy(flat[known], target[known], reduction="sum")
    correct = (flat[known].argmax(-1) == target[known]).sum().float()
    return ce, correct, known.sum().float()
