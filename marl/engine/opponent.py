"""Opponent modeling in the engine: the head's shape from a scenario, its labels, and its figures.

Each agent predicts, at every turn, the action class each of its opponents (the scenario's
`opponent_slots`) plays in that same step, from the hidden state where the agent's own prompt
ends: the prediction reads the agent's own history only (decentralized execution), the labels
come from what the others actually played (centralized training, `Turn.opponent`). The learner and
the SFT loop add the summed cross-entropy as the `opponent` loss term; this module builds the
head, turns turns into label tensors, and measures accuracy by round (`ROUND_BUCKETS`), which is
where modeling shows: early rounds have little history to read.

It leaves out the loss weighting inside a step (the learner's and the SFT loop's) and opponent pools
(`opponent_pool.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from marl.engine.rollout import RolloutBatch, Turn
from marl.engine.sequences import episode_sequence
from policies.opponent_head import OpponentHead, hint_text, opponent_loss

ROUND_BUCKETS: tuple[tuple[str, int, int], ...] = (("1-5", 1, 5), ("6-10", 6, 10), ("11_plus", 11, 10**9))
"""Accuracy is also reported per bucket of rounds (1-based turn of the agent's episode)."""


def build_head(model: Any, env: Any, seed: int = 0) -> OpponentHead:
    """A fresh head for `model`'s hidden size and `env`'s opponent slots (the most any agent has) and classes,
    initialised from `seed` without touching the global random state the rest of the run draws from."""
    slots = max(len(env.opponent_slots(a)) for a in env.possible_agents)
    classes = tuple(env.action_classes())
    if slots == 0 or len(classes) < 2:
        raise ValueError(f"{type(env).__name__} gives no agent another to predict (opponent_slots / action_classes)")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        head = OpponentHead(int(model.config.hidden_size), slots, classes)
    return head.to(model.device)


class DemoHints:
    """The predictions a demonstration shows before each action (`aux+input`): the class each slot really
    plays in that step, replaced with probability `noise` (and where it played none) by a uniformly random
    class, so the policy learns to act on a prediction that is usually right, as the head's will be."""

    def __init__(self, classes: Sequence[str], slots: int, noise: float, seed: int) -> None:
        self.classes, self.slots, self.noise = tuple(classes), slots, noise
        self.rng = np.random.default_rng([seed, 0x41A7])

    def ids(self, chat: Any, labels: Sequence[int]) -> list[int]:
        """The ids of one step's shown prediction, given its labels (`Turn.opponent`)."""
        shown = []
        for k in range(self.slots):
            true = labels[k] if k < len(labels) else -1
            random_class = int(self.rng.integers(len(self.classes)))
            shown.append(true if true >= 0 and self.rng.random() >= self.noise else random_class)
        return chat.encode_text(hint_text(self.classes, shown))


def hint_lengths(pieces: Sequence[Any]) -> list[list[int]]:
    """Per episode sequence, per turn, the ids of a shown prediction before its action (`Turn.hint_len`)."""
    return [[t.hint_len for t in p.turns] for p in pieces]


def label_tensor(turns: Sequence[Turn], slots: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """`[turns, slots]` class indices, -1 where a slot has no label (no valid action, or fewer slots)."""
    out = torch.full((len(turns), slots), -1, dtype=torch.long)
    for row, turn in enumerate(turns):
        labels = turn.opponent[:slots]
        if labels:
            out[row, : len(labels)] = torch.tensor(labels, dtype=torch.long)
    return out.to(device)


def labelled(turns: Sequence[Turn]) -> int:
    """How many (turn, slot) labels these turns carry."""
    return sum(sum(1 for c in t.opponent if c >= 0) for t in turns)


def round_bucket(turn_index: int) -> str:
    """The `ROUND_BUCKETS` name of an episode's turn (0-based index)."""
    r = turn_index + 1
    return next(name for name, lo, hi in ROUND_BUCKETS if lo <= r <= hi)


@torch.no_grad()
def prediction_metrics(policies: Any, batch: RolloutBatch, prefix: str = "opponent",
                       max_tokens: int = 16384) -> dict[str, float]:
    """Cross-entropy and accuracy of the opponent heads on every policy turn of `batch` (overall and by
    round bucket), each read at the end of the turn's own prompt by the head of the policy that played
    it; {} where no policy has a head or no turn a label. `policies`: one policy or a `PolicyMap`."""
    sums: dict[str, list[float]] = {}
    by_policy: dict[str, list[int]] = {}
    for e, ep in enumerate(batch.episodes):
        if any(batch.turns[i].action_ids and batch.turns[i].opponent for i in ep.turns):
            by_policy.setdefault(ep.policy, []).append(e)
    for pid, episodes in by_policy.items():
        policy = policies[pid] if hasattr(policies, "policies") else policies
        head = getattr(policy, "opponent_head", None)
        if head is None:
            continue
        for chunk in _chunks(batch, episodes, max_tokens):
            pieces = [episode_sequence(batch, e) for e in chunk]
            scores = policy.span_logprobs([p.sequence for p in pieces], [p.spans for p in pieces],
                                          [[t.allowed for t in p.turns] for p in pieces], with_prompt_hidden=True,
                                          hint_lengths=hint_lengths(pieces))
            turns = [t for p in pieces for t in p.turns]
            index = [k for p in pieces for k in range(len(p.turns))]
            logits = head(scores.prompt_hidden)
            labels = label_tensor(turns, head.slots, logits.device)
            _add(sums, "", logits, labels)
            for name, lo, hi in ROUND_BUCKETS:
                rows = torch.tensor([lo <= k + 1 <= hi for k in index], device=logits.device)
                if bool(rows.any()):
                    _add(sums, f"/rounds_{name}", logits[rows], labels[rows])
    out = shown_metrics(batch, prefix)
    for key, (ce, correct, count) in sums.items():
        if count:
            out[f"{prefix}/accuracy{key}"] = correct / count
            if key == "":
                out[f"{prefix}/loss"] = ce / count
    return out


def shown_metrics(batch: RolloutBatch, prefix: str = "opponent") -> dict[str, float]:
    """Accuracy of the predictions an in-match model showed the agents (`Turn.prediction`), overall and by
    round bucket, as `<prefix>/shown_accuracy...`; {} where no turn has one (the head's alone were shown)."""
    counts: dict[str, list[int]] = {}
    for ep in batch.episodes:
        for k, index in enumerate(ep.turns):
            turn = batch.turns[index]
            pairs = [(p, y) for p, y in zip(turn.prediction, turn.opponent, strict=False) if y >= 0]
            for key in ("", f"/rounds_{round_bucket(k)}"):
                tally = counts.setdefault(key, [0, 0])
                tally[0] += sum(p == y for p, y in pairs)
                tally[1] += len(pairs)
    return {f"{prefix}/shown_accuracy{key}": hit / n for key, (hit, n) in counts.items() if n}


def _chunks(batch: RolloutBatch, episodes: list[int], max_tokens: int) -> list[list[int]]:
    chunks: list[list[int]] = []
    size = 0
    for e in episodes:
        last = batch.turns[batch.episodes[e].turns[-1]]
        tokens = len(last.prompt_ids) + len(last.action_ids)
        if chunks and size + tokens <= max_tokens:
            chunks[-1].append(e)
            size += tokens
        else:
            chunks.append([e])
            size = tokens
    return chunks


def _add(sums: dict[str, list[float]], key: str, logits: torch.Tensor, labels: torch.Tensor) -> None:
    ce, correct, count = opponent_loss(logits, labels)
    acc = sums.setdefault(key, [0.0, 0.0, 0.0])
    acc[0] += float(ce)
    acc[1] += float(correct)
    acc[2] += float(count)
