"""The on-policy learner: one PPO-clip update from a rollout batch and its advantages.

Loss = policy (PPO-clip) + kl_coef * KL(policy || frozen reference) + aux_coef * MoE load balancing
- entropy_coef * entropy, each term logged by name. Logprobs are recomputed under the same
constrained-decoding masks and temperature the rollout used, from the token ids the rollout kept.
A non-finite loss or gradient skips the optimizer step; a streak of them aborts the run before
anything is checkpointed. Left out: value losses (critic-based algorithms come with the critic).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from marl.advantages import GroupAdvantages
from marl.config import RLConfig
from marl.errors import NonFiniteError
from marl.losses import AdaptiveKL, kl_to_reference, masked_mean, ppo_clip_loss
from marl.rollout import RolloutBatch, Turn
from policies.router_stats import load_entropy


def decision_mask(turns: list[Turn], width: int) -> torch.Tensor:
    """(B, width) mask of tokens where more than one token was allowed (all tokens when unconstrained)."""
    mask = torch.zeros(len(turns), width, dtype=torch.bool)
    for row, turn in enumerate(turns):
        n = len(turn.action_ids)
        if turn.allowed is None:
            mask[row, :n] = True
        else:
            mask[row, :n] = torch.tensor([len(a) > 1 for a in turn.allowed], dtype=torch.bool)
    return mask


@dataclass
class EpisodeSequence:
    """One agent-episode as a single token sequence with the (start, length) span of each action."""

    sequence: list[int]
    spans: list[tuple[int, int]]
    turns: list[Turn]


def episode_sequence(batch: RolloutBatch, episode: int) -> EpisodeSequence:
    """Rebuild an episode's full sequence from its turns, checking the prefix property on the way."""
    turns = [batch.turns[i] for i in batch.episodes[episode].turns if batch.turns[i].action_ids]
    last = turns[-1]
    sequence = list(last.prompt_ids) + list(last.action_ids)
    spans = []
    for t in turns:
        start, end = len(t.prompt_ids), len(t.prompt_ids) + len(t.action_ids)
        if sequence[:start] != t.prompt_ids or sequence[start:end] != t.action_ids:
            raise ValueError(f"episode {episode}: a turn's prompt is not a prefix of the next one; the chat "
                             "format must append to the conversation, never rewrite it")
        spans.append((start, len(t.action_ids)))
    return EpisodeSequence(sequence, spans, turns)


def padded(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


class Learner:
    """Owns the optimizer and the adaptive KL coefficient of one trainable policy."""

    def __init__(self, policy: Any, reference: Any, cfg: RLConfig, aux_coef: float, seed: int = 0) -> None:
        self.policy = policy
        self.reference = reference
        self.cfg = cfg
        self.aux_coef = aux_coef
        self.kl = AdaptiveKL(cfg.kl_coef, cfg.target_kl)
        self.optimizer = torch.optim.AdamW(policy.model.parameters(), lr=cfg.learning_rate, weight_decay=0.0)
        self.rng = np.random.default_rng(seed)
        self.nonfinite_streak = 0
        self.updates = 0

    def update(self, batch: RolloutBatch, adv: GroupAdvantages) -> dict[str, float]:
        """One iteration: `epochs` passes over minibatches of the included episodes.

        Each agent-episode is scored as ONE sequence (its last prompt + last action): every turn's
        prompt is a prefix of the next, so all its turns' action spans come out of one forward,
        without re-running the shared prefix once per turn.
        """
        episodes = [e for e, ep in enumerate(batch.episodes)
                    if adv.include[e] and any(batch.turns[i].action_ids for i in ep.turns)]
        metrics: dict[str, list[float]] = {}
        if not episodes:
            return {"train/skipped_empty_batch": 1.0, "train/kl_coef": self.kl.value}
        model = self.policy.model
        model.train()
        for _ in range(self.cfg.epochs):
            order = self.rng.permutation(len(episodes))
            for chunk in np.array_split(order, min(self.cfg.minibatches, len(episodes))):
                pieces = [episode_sequence(batch, episodes[i]) for i in chunk]
                for key, value in self._step(pieces, adv).items():
                    metrics.setdefault(key, []).append(value)
        model.eval()
        skips = metrics.pop("train/nonfinite_skips", [])
        out = {k: float(np.nanmean(v)) for k, v in metrics.items()}
        out["train/nonfinite_skips"] = float(len(skips))
        out["train/kl_coef"] = self.kl.update(out.get("train/kl", 0.0))
        out["train/episodes"] = float(len(episodes))
        return out

    def _step(self, pieces: list[EpisodeSequence], adv: GroupAdvantages) -> dict[str, float]:
        sequences = [p.sequence for p in pieces]
        spans = [p.spans for p in pieces]
        allowed = [[t.allowed for t in p.turns] for p in pieces]
        turns = [t for p in pieces for t in p.turns]
        scores = self.policy.span_logprobs(sequences, spans, allowed, with_router_logits=self.aux_coef > 0)
        with torch.no_grad():
            ref = self.reference.span_logprobs(sequences, spans, allowed)
        width, device = scores.logprobs.shape[1], scores.logprobs.device
        mask = decision_mask(turns, width).to(device) & scores.mask.bool()
        old = padded([t.logprobs for t in turns], width).to(device)
        advantages = torch.tensor([adv.advantages[t.episode] for t in turns], dtype=torch.float32, device=device)
        policy_loss, clip_frac = ppo_clip_loss(scores.logprobs, old, advantages, mask, self.cfg.clip_eps)
        kl = kl_to_reference(scores.logprobs, ref.logprobs.detach(), mask)
        entropy = masked_mean(scores.entropy, mask)
        aux = scores.aux_loss if scores.aux_loss is not None else torch.zeros((), device=device)
        loss = policy_loss + self.kl.value * kl + self.aux_coef * aux - self.cfg.entropy_coef * entropy
        out = {
            "train/policy_loss": policy_loss.item(),
            "train/kl": kl.item(),
            "train/entropy": entropy.item(),
            "train/clip_frac": clip_frac.item(),
            "train/loss": loss.item(),
            "train/logprob_gap": masked_mean((scores.logprobs.detach() - old).abs(), mask).item(),
            "train/decision_tokens": float(mask.sum().item()),
        }
        if scores.aux_loss is not None:
            out["moe/aux_loss"] = float(aux.item())
        if scores.expert_load is not None:
            entropies = [load_entropy(layer[None]).item() for layer in scores.expert_load]
            out["moe/expert_load_entropy"] = float(np.mean(entropies))
            for i, value in enumerate(entropies):
                out[f"moe/expert_load_entropy/layer_{i}"] = value
        self.optimizer.zero_grad(set_to_none=True)
        if not torch.isfinite(loss):
            return self._skip(out)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.policy.model.parameters(), self.cfg.max_grad_norm)
        out["train/grad_norm"] = float(grad_norm)
        if not math.isfinite(float(grad_norm)):
            return self._skip(out)
        self.optimizer.step()
        self.nonfinite_streak = 0
        self.updates += 1
        return out

    def _skip(self, out: dict[str, float]) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_streak += 1
        out["train/nonfinite_skips"] = 1.0
        if self.nonfinite_streak >= self.cfg.max_nonfinite_streak:
            raise NonFiniteError(
                f"{self.nonfinite_streak} updates in a row had a non-finite loss or gradient; "
                "lower rl.learning_rate or raise rl.max_grad_norm's strictness (smaller value)"
            )
        return out
