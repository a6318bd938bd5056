"""The on-policy learner of one policy: a PPO-clip update whose loss is a sum of named terms.

Built-in terms, each logged under its name with the weight it had:
- `policy`: PPO-clip on the agent's own decision tokens of turns whose advantage carries a signal,
  token-level or sequence-level (GSPO) ratio;
- `kl`: the exact KL(policy || reference) of each decision token's distribution over its allowed set,
  weight steered by the adaptive controller;
- `entropy`: the masked entropy, weight `-entropy_coef` (a bonus).
  `kl` and `entropy` cover every generated turn outside harness faults, also those of groups whose
  advantages are all zero: a turn that teaches nothing still keeps its anchor;
- `moe_aux`: the Switch load-balancing loss from router logits;
- `value`: the critic's loss against its GAE targets (critic-based algorithms), stepped in the
  critic's own minibatches (`Critic.minibatches`, whole teams each): it shares no weight with the
  policy, so only its step count changes, and a small random-init critic needs many steps;
- `ptx`: cross-entropy on scripted-expert demonstrations (InstructGPT's PPO-ptx), which keeps
  what the warm start taught while RL chases reward;
- `opponent`: with an opponent head on the policy (`policy.opponent_head`), the cross-entropy of its
  prediction of each opponent's action class, read where each turn's prompt ends, against what the
  opponent played (`marl.engine.opponent`); a mean over the minibatch's labels, weight
  `opponent_weight` (set by the caller, so it can anneal). Every generated turn carries its labels.
More terms plug in with `add_term(name, fn, weight)`: `fn(ctx)` reads the
micro-batch's `StepContext` and returns a scalar tensor (a mean over that micro-batch).

Logprobs are recomputed under the same constrained-decoding masks and temperature the rollout used,
from the token ids the rollout kept. A non-finite loss or gradient skips the step; a streak of
them aborts the run before anything is checkpointed.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from marl.config import RLConfig
from marl.engine.advantages import Advantages, anchored_turns
from marl.engine.data_parallel import LearnerGroup
from marl.engine.errors import NonFiniteError
from marl.engine.losses import (
    AdaptiveKL,
    exact_kl,
    masked_mean,
    ppo_clip_loss,
    sequence_clip_loss,
    value_loss,
)
from marl.engine.opponent import hint_lengths, label_tensor, labelled
from marl.engine.rollout import RolloutBatch
from marl.engine.sequences import (
    EpisodeSequence,
    decision_mask,
    episode_sequence,
    micro_batches,
    padded,
)
from policies.opponent_head import opponent_loss
from policies.router_stats import expert_counts, load_entropy, routing_agreement
from policies.scoring import imitation_loss


@dataclass
class StepContext:
    """What a loss term may read in one micro-batch of a step (the term is a mean over it; the learner
    weights it by the micro-batch's share of the minibatch's tokens)."""

    batch: RolloutBatch
    adv: Advantages
    pieces: list[EpisodeSequence]
    turn_ids: list[int]
    scores: Any
    """The policy's `SequenceScores` (with grad): one row per turn of the micro-batch."""
    mask: torch.Tensor
    """Decision-token mask, (turns, width)."""
    extras: dict[str, Any] = field(default_factory=dict)


LossTerm = Callable[[StepContext], torch.Tensor]


class Learner:
    """Owns one policy's optimizer, reference, KL controller, optional critic and loss terms."""

    def __init__(self, policy: Any, reference: Any, cfg: RLConfig, aux_coef: float, seed: int = 0,
                 critic: Any = None, demonstrations: dict[str, list[list[int]]] | None = None) -> None:
        self.policy = policy
        self.reference = reference
        self.cfg = cfg
        self.aux_coef = aux_coef
        self.critic = critic
        has_demos = bool(demonstrations and demonstrations.get("input_ids"))
        self.demos = demonstrations if has_demos and cfg.ptx_coef > 0 else None
        self.kl = AdaptiveKL(cfg.kl_coef, cfg.target_kl, ceiling_factor=cfg.kl_ceiling)
        self.head = getattr(policy, "opponent_head", None)
        self.opponent_weight = 0.0
        self.optimizer = torch.optim.AdamW(self._parameters(), lr=cfg.learning_rate, weight_decay=0.0)
        self.rng = np.random.default_rng(seed)
        self.nonfinite_streak = 0
        self.updates = 0
        self.extra_terms: dict[str, tuple[LossTerm, float]] = {}
        self.group = LearnerGroup()
        """The processes that share this learner's policy steps (`marl.engine.data_parallel`); one by default."""

    def _parameters(self) -> list[torch.nn.Parameter]:
        """What the optimizer steps and the clip measures: the policy's weights and its opponent head's."""
        return [*self.policy.model.parameters(), *(self.head.parameters() if self.head is not None else ())]

    def add_term(self, name: str, fn: LossTerm, weight: float) -> None:
        """Add a named loss term `weight * fn(ctx)` to every step (logged as `loss/<name>`)."""
        builtin = {"policy", "kl", "entropy", "moe_aux", "value", "ptx", "opponent"}
        if name in builtin or name in self.extra_terms:
            raise ValueError(f"loss term {name!r} already exists")
        self.extra_terms[name] = (fn, weight)

    def update(self, batch: RolloutBatch, adv: Advantages, train_policy: bool = True) -> dict[str, float]:
        """One iteration: `epochs` passes over minibatches of the episodes with turns in the loss.

        Each agent-episode is scored as ONE sequence (its last prompt + last action): every turn's
        prompt is a prefix of the next, so all its turns' action spans come out of one forward,
        without re-running the shared prefix once per turn. Minibatches hold whole groups (in random
        order), whose episodes share their task's first prompt. `train_policy=False` (a critic warm-up)
        steps the critic only: the policy, its optimizer and the KL controller stay as they are.
        """
        if not train_policy and self.critic is None:
            raise ValueError("a critic-only update needs a critic (critic-free algorithms have none)")
        anchor = anchored_turns(batch)
        # Every generated turn keeps its KL and entropy anchor, also in groups whose advantages carry no signal.
        episodes = [e for e, ep in enumerate(batch.episodes)
                    if any((adv.include[i] or anchor[i]) and batch.turns[i].action_ids for i in ep.turns)]
        metrics: dict[str, list[float]] = {}
        if not episodes:
            return {"train/skipped_empty_batch": 1.0, "train/kl_coef": self.kl.value,
                    "train/critic_warmup": float(not train_policy)}
        model = self.policy.model
        model.train()
        if self.head is not None:
            self.head.train()
        if self.critic is not None:
            self.critic.model.train()
        first = True
        for _ in range(self.cfg.epochs):
            order = self._group_order(batch, episodes)
            for chunk in np.array_split(order, min(self.cfg.minibatches, len(episodes))) if train_policy else ():
                pieces = [episode_sequence(batch, episodes[i]) for i in chunk]
                for key, value in self._step(batch, adv, anchor, pieces, first).items():
                    metrics.setdefault(key, []).append(value)
                first = False
            if self.critic is not None:
                for chunk in self.critic.team_chunks(batch, episodes, self.critic.minibatches, self.rng):
                    for key, value in self._critic_step(batch, adv, chunk).items():
                        metrics.setdefault(key, []).append(value)
        model.eval()
        if self.head is not None:
            self.head.eval()
        if self.critic is not None:
            self.critic.model.eval()
        skips = metrics.pop("train/skipped_steps", [])
        # A metric whose every step was skipped stays NaN (the KL controller ignores NaN), without numpy's warning.
        out = {k: float(np.nanmean(v)) if not np.isnan(v).all() else float("nan") for k, v in metrics.items()}
        out["train/skipped_steps"] = float(len(skips))
        out["train/kl_coef"] = self.kl.update(out.get("train/kl", 0.0)) if train_policy else self.kl.value
        out["train/critic_warmup"] = float(not train_policy)
        out["train/episodes"] = float(len(episodes))
        return out

    def _group_order(self, batch: RolloutBatch, episodes: list[int]) -> np.ndarray:
        """A random order of `episodes` that keeps each group's together (groups in random order), so a
        minibatch holds whole groups and their shared first prompts run once per micro-batch."""
        groups = sorted({batch.episodes[e].group for e in episodes})
        rank = dict(zip(groups, self.rng.permutation(len(groups)), strict=True))
        jitter = self.rng.random(len(episodes))
        return np.lexsort((jitter, [rank[batch.episodes[e].group] for e in episodes]))

    def _step(self, batch: RolloutBatch, adv: Advantages, anchor: np.ndarray, pieces: list[EpisodeSequence],
              first: bool) -> dict[str, float]:
        """One optimizer step over a minibatch, scored in micro-batches of at most `rl.micro_batch_tokens`
        padded tokens whose gradients add up to the whole minibatch's (memory bounded by the budget)."""
        cfg = self.cfg
        # The minibatch's token and row counts, known before any forward: every micro-batch divides its
        # sums by them, so the accumulated token means are the minibatch's, not a mean of means.
        turns = [t for p in pieces for t in p.turns]
        turn_ids = [i for p in pieces for i in p.turn_ids]
        decisions = decision_mask(turns, max(len(t.action_ids) for t in turns))
        policy_rows = decisions & torch.tensor([bool(adv.include[i]) for i in turn_ids])[:, None]
        totals = {"policy": float(policy_rows.sum() if cfg.ratio == "token" else policy_rows.any(-1).sum()),
                  "tokens": float(policy_rows.sum()),
                  "anchor": float((decisions & torch.tensor([bool(anchor[i]) for i in turn_ids])[:, None]).sum()),
                  "padded": float(sum(len(p.sequence) for p in pieces)),
                  "opponent": float(labelled(turns)) if self.head is not None else 0.0}
        if self.group.active and self.group.leads:  # the others score their share of this step's micro-batches
            self.group.send_step(str(id(self)), self, (None, adv, anchor, pieces, first))
        self.optimizer.zero_grad(set_to_none=True)
        out: dict[str, float] = {}
        loads = []
        finite = True
        for part in self.group.share(micro_batches(pieces, cfg.micro_batch_tokens)):
            terms, weights, figures, load = self._micro_terms(batch, adv, anchor, part, totals)
            loss = sum(weights[name] * value for name, value in terms.items())
            for key, value in {**figures, "train/loss": float(loss.item())}.items():
                out[key] = out.get(key, 0.0) + value
            for name, value in terms.items():
                key = {"moe_aux": "moe/aux_loss", "opponent": "opponent/loss"}.get(name, f"train/{name}")
                key = f"loss/{name}" if name in self.extra_terms else key
                key = "train/policy_loss" if name == "policy" else key
                out[key] = out.get(key, 0.0) + value.item()
                out[f"loss_weight/{name}"] = float(weights[name])
            if load is not None:
                loads.append(load)
            if not torch.isfinite(loss):
                finite = False
                break
            loss.backward()
        if self.group.active:
            out, loads, finite = self.group.add_gradients(self._parameters(), out, loads, finite)
            if not self.group.leads:  # process 0 clips, steps and reports
                return out
        out["train/decision_tokens"] = totals["tokens"]
        if finite and self.demos is not None:  # its own forward, so its memory is not added to a micro-batch's
            ptx = self._ptx_term(self.policy.device)
            out.update({"train/ptx_loss": ptx.item(), "loss_weight/ptx": float(cfg.ptx_coef)})
            out["train/loss"] = out.get("train/loss", 0.0) + cfg.ptx_coef * ptx.item()
            finite = bool(torch.isfinite(ptx))
            if finite:
                (cfg.ptx_coef * ptx).backward()
        if totals["tokens"] == 0:  # only anchored turns: the policy term measured nothing
            out.update({"train/policy_loss": math.nan, "train/clip_frac": math.nan})
        if first:  # before any update: the gap is the rollout/training mismatch alone (MoE routing, padding)
            out["moe/rollout_train_logprob_gap"] = out["train/logprob_gap"]
        if loads:
            self._expert_load_metrics(torch.stack(loads).sum(0), out)
        if not finite:  # partial sums of a step that never happened would skew the means (and the KL control)
            out = {k: v if k.startswith("loss_weight/") else math.nan for k, v in out.items()}
            return self._skip(out)
        grad_norm = torch.nn.utils.clip_grad_norm_(self._parameters(), cfg.max_grad_norm)
        out["train/grad_norm"] = float(grad_norm)
        if not math.isfinite(float(grad_norm)):
            return self._skip(out)
        self.optimizer.step()
        self.nonfinite_streak = 0
        self.updates += 1
        return out

    def _micro_terms(self, batch: RolloutBatch, adv: Advantages, anchor: np.ndarray, pieces: list[EpisodeSequence],
                     totals: dict[str, float]) -> tuple[dict, dict, dict, torch.Tensor | None]:
        """One micro-batch's share of every loss term (token means over the minibatch's `totals`), their
        weights, its additive figures and its expert load (None without a router)."""
        cfg = self.cfg
        sequences = [p.sequence for p in pieces]
        spans = [p.spans for p in pieces]
        allowed = [[t.allowed for t in p.turns] for p in pieces]
        turns = [t for p in pieces for t in p.turns]
        turn_ids = [i for p in pieces for i in p.turn_ids]
        # The anchor reads the same positions (its prompt hidden states too, unused): the learner's last layer runs
        # on the positions read, so both then route the same rows and their routing can be compared row by row.
        read = {"with_prompt_hidden": totals["opponent"] > 0, "hint_lengths": hint_lengths(pieces)}
        scores = self.policy.span_logprobs(sequences, spans, allowed, with_router_logits=self.aux_coef > 0, **read)
        with torch.no_grad():
            ref = self.reference.span_logprobs(sequences, spans, allowed,
                                               with_router_logits=scores.router_logits is not None, **read)
        width, device = scores.logprobs.shape[1], scores.logprobs.device
        include = torch.tensor([bool(adv.include[i]) for i in turn_ids], dtype=torch.bool, device=device)
        anchored = torch.tensor([bool(anchor[i]) for i in turn_ids], dtype=torch.bool, device=device)
        decisions = decision_mask(turns, width).to(device) & scores.mask.bool()
        mask = decisions & include[:, None]  # the policy term: turns whose advantage carries a signal
        anchor_mask = decisions & anchored[:, None]  # KL and entropy: every generated turn
        old = padded([t.logprobs for t in turns], width).to(device)
        advantages = torch.tensor([adv.advantages[i] for i in turn_ids], dtype=torch.float32, device=device)
        clip = sequence_clip_loss if cfg.ratio == "sequence" else ppo_clip_loss
        eps = cfg.sequence_clip_eps if cfg.ratio == "sequence" else cfg.clip_eps
        policy_loss, clip_frac = clip(scores.logprobs, old, advantages, mask, eps, totals["policy"])
        kl = scores.per_token(exact_kl(scores.log_dist, ref.log_dist.detach()))
        terms: dict[str, torch.Tensor] = {
            "policy": policy_loss,
            "kl": masked_mean(kl, anchor_mask, totals["anchor"]),
            "entropy": masked_mean(scores.entropy, anchor_mask, totals["anchor"]),
        }
        weights = {"policy": 1.0, "kl": self.kl.value, "entropy": -cfg.entropy_coef}
        share = sum(len(s) for s in sequences) / totals["padded"]  # of the minibatch's tokens
        if scores.aux_loss is not None:  # a mean over this forward's tokens: weighted by their share
            terms["moe_aux"], weights["moe_aux"] = scores.aux_loss * share, self.aux_coef
        ctx = StepContext(batch, adv, pieces, turn_ids, scores, mask)
        for name, (fn, weight) in self.extra_terms.items():  # an added term is a mean over its micro-batch
            terms[name], weights[name] = fn(ctx) * share, weight
        # Rollout vs training logprobs over every generated decision token (a mismatch, not a policy figure).
        gap = masked_mean((scores.logprobs.detach() - old).abs(), anchor_mask, totals["anchor"]).item()
        figures = {"train/clip_frac": clip_frac.item(), "train/logprob_gap": gap}
        if totals["opponent"] > 0:  # summed over this micro-batch's labels, divided by the minibatch's
            ce, correct, _ = opponent_loss(self.head(scores.prompt_hidden), label_tensor(turns, self.head.slots, device))
            terms["opponent"], weights["opponent"] = ce / totals["opponent"], self.opponent_weight
            figures["opponent/accuracy"] = float(correct) / totals["opponent"]
        if scores.router_logits is not None and ref.router_logits is not None:
            # the same tokens routed by the policy and by its anchor: how far RL has moved the expert choice
            agree = routing_agreement(scores.router_logits, ref.router_logits, scores.router_masks,
                                      expert_counts(self.policy.model)[1]) * share
            figures["moe/routing_agreement"] = float(agree.mean())
            figures.update({f"moe/routing_agreement/layer_{i}": float(v) for i, v in enumerate(agree.tolist())})
        load = None if scores.expert_load is None else scores.expert_load * share
        return terms, weights, figures, load

    def _expert_load_metrics(self, load: torch.Tensor, out: dict[str, float]) -> None:
        """Expert load per MoE layer ([layers, experts], summed over micro-batches by token share)."""
        entropies = [load_entropy(layer[None]).item() for layer in load]
        out["moe/expert_load_entropy"] = float(np.mean(entropies))
        for i, layer in enumerate(load):
            out[f"moe/expert_load_entropy/layer_{i}"] = entropies[i]
            out[f"moe/expert_load_max/layer_{i}"] = float(layer.max().item())
            for j, share in enumerate(layer.tolist()):  # what the run's expert-load heatmap draws
                out[f"moe/expert_load/layer_{i}/expert_{j}"] = float(share)

    def _critic_step(self, batch: RolloutBatch, adv: Advantages, episodes: list[int]) -> dict[str, float]:
        """One critic step on the `value` term over the given agent-episodes, its forwards in parts of whole
        teams of at most `rl.micro_batch_tokens` input tokens whose gradients add up to the step's (so the
        critic's memory, like the policy's, is bounded by the budget, not by the batch)."""
        out: dict[str, float] = {"loss_weight/value": float(self.cfg.value_coef)}
        if adv.returns is None:
            return out
        parts = []
        for part in self._critic_parts(batch, episodes):
            inputs = self.critic.inputs(batch, part)
            keep = [k for k, read in enumerate(inputs.turns) if read >= 0 and adv.include[read]]
            if keep:
                parts.append((inputs, keep))
        total = sum(len(keep) for _, keep in parts)
        if not total:
            return out
        self.critic.optimizer.zero_grad(set_to_none=True)
        loss_sum = value_sum = 0.0
        for inputs, keep in parts:
            values = self.critic.predict(inputs)
            device = values.device
            chosen = values[torch.tensor(keep, device=device)]
            targets = torch.tensor([adv.returns[inputs.turns[k]] for k in keep], dtype=torch.float32, device=device)
            # this part's share of the step's mean: value_loss is a mean over the part's reads
            loss = value_loss(chosen, targets) * (len(keep) / total)
            loss_sum += loss.item()
            value_sum += float(chosen.detach().sum().item())
            if not torch.isfinite(loss):
                self.critic.optimizer.zero_grad(set_to_none=True)
                out.update({"train/value_loss": loss_sum, "train/value_nonfinite_skips": 1.0})
                return out
            (self.cfg.value_coef * loss).backward()
        # (The explained variance and the targets' mean are measured on the whole batch before this update: Advantages.metrics;
        # a minibatch of a few teams is too small a sample of the targets' variance.)
        out.update({"train/value_loss": loss_sum, "train/value_mean": value_sum / total})
        norm = self.critic.step()
        out["train/value_grad_norm"] = norm
        out["train/value_nonfinite_skips"] = float(not math.isfinite(norm))
        return out

    def _critic_parts(self, batch: RolloutBatch, episodes: list[int]) -> list[list[int]]:
        """`episodes` in parts of whole teams whose conversations hold at most `rl.micro_batch_tokens` tokens
        (a team longer than that is a part of its own; 0: one part). A critic input is about as long as the
        agent's conversation (its own) or shorter (the state text), so this bounds its forwards too."""
        budget = self.cfg.micro_batch_tokens
        teams: dict[int, list[int]] = {}
        for e in episodes:
            env = batch.episodes[e].env
            teams.setdefault(env if env >= 0 else -1 - e, []).append(e)
        parts: list[list[int]] = []
        size = 0
        for team in teams.values():
            tokens = sum(_conversation_tokens(batch, e) for e in team)
            if parts and (budget <= 0 or size + tokens <= budget):
                parts[-1].extend(team)
                size += tokens
            else:
                parts.append(list(team))
                size = tokens
        return parts

    def _ptx_term(self, device: torch.device) -> torch.Tensor:
        """Cross-entropy on a random minibatch of demonstrations, on their action tokens only."""
        ids_all, masks_all = self.demos["input_ids"], self.demos["assistant_masks"]
        pick = self.rng.choice(len(ids_all), size=min(self.cfg.ptx_batch_size, len(ids_all)), replace=False)
        return imitation_loss(self.policy.model, [ids_all[i] for i in pick], [masks_all[i] for i in pick],
                              pad_id=self.policy.pad_id, device=device).cross_entropy

    def _skip(self, out: dict[str, float]) -> dict[str, float]:
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_streak += 1
        out["train/skipped_steps"] = 1.0
        if self.nonfinite_streak >= self.cfg.max_nonfinite_streak:
            raise NonFiniteError(
                f"{self.nonfinite_streak} updates in a row had a non-finite loss or gradient; "
                "lower rl.learning_rate or raise rl.max_grad_norm's strictness (smaller value)"
            )
        return out


def _conversation_tokens(batch: RolloutBatch, e: int) -> int:
    """Tokens of agent-episode e's conversation (its last prompt and action)."""
    turns = [batch.turns[i] for i in batch.episodes[e].turns]
    return max((len(t.prompt_ids) + len(t.action_ids) for t in turns), default=0)
