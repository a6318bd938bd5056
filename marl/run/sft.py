"""Warm start: supervised fine-tuning on scripted-expert demonstrations.

Demonstrations are played through the same rollout worker as RL (the scripted expert acts), then
turned into token ids by the policy's `ChatFormat.conversation`, built from exactly the pieces a
rollout prompt is built from, so SFT trains on the token ids the policy will later see (`input_ids`
+ `assistant_masks`: loss on action tokens only). Training stops at a wall-clock budget; the
schedule is constant after warm-up so that stopping anywhere leaves a sensible model, optionally
annealed linearly to 0 over the last part of the budget (`sft.lr_decay_fraction`). Figures go
to the caller's logger, so everything lands in the run's one MLflow run.

The loop is plain PyTorch rather than TRL's `SFTTrainer`: on the pre-tokenized, action-masked
data this stage uses, the trainer added nothing but overhead, and measured on the default
`tool_use` run (docs/results/2026-12-02-rl-iteration-speed-and-memory.md) it peaked about 0.9 GB
higher, its resident memory growing with the steps, and made fewer steps in the same budget.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from marl.config import WarmStartConfig
from marl.engine.opponent import DemoHints
from marl.engine.rollout import Episode, RolloutWorker, expert_actor
from policies.chat import Dialogue
from policies.opponent_head import opponent_loss
from policies.random_policy import RandomPolicy
from policies.scoring import imitation_loss


class Perturbation(str):
    """An action a demonstration played off the expert's path: in the transcript, out of the loss."""


def perturbed_expert(rate: float, seed: int) -> Callable[[Any, str], str]:
    """The scripted expert as an actor that, with probability `rate` per turn, plays a uniformly
    random valid action instead (a `Perturbation`).

    DART-style noise injection: a clean expert never leaves its own path, so its demonstrations
    never show how to get back from a wrong tool call or a wasted turn, and a policy that makes one
    such slip has never seen what comes next. With the noise, the expert's following turns are
    that recovery, and they are what SFT imitates; the random action itself is never imitated.
    """
    rng = random.Random(seed)
    chooser = RandomPolicy()

    def act(env: Any, agent: str) -> str:
        if rng.random() < rate:
            return Perturbation(chooser.act(env.action_grammar(agent), rng))
        return expert_actor(env, agent)

    return act


def demonstration_episodes(worker: RolloutWorker, seeds: list[int], batch: int = 256, noise: float = 0.0,
                           seed: int = 0) -> list[Episode]:
    """Play the scripted expert, `perturbed_expert(noise, seed)`, on `seeds` and return its episodes
    (every agent's); with `noise` 0 it is the plain expert."""
    actor = perturbed_expert(noise, seed)
    episodes: list[Episode] = []
    for start in range(0, len(seeds), batch):
        chunk = seeds[start : start + batch]
        episodes.extend(worker.collect(chunk, actor=actor).episodes)
    return episodes


def conversations(chat: Any, episodes: list[Episode], hints: DemoHints | None = None) -> dict[str, list[Any]]:
    """Pre-tokenized SFT columns from episode transcripts; perturbations are masked out of the loss,
    and an episode with no expert action left is dropped. `prompt_ends` and `opponent` hold, per
    action, the index of its prompt's last id and the opponent model's labels of that step (every
    action's, perturbations too: what the others played does not depend on who chose ours). With
    `hints` (`aux+input`), each action follows a shown prediction of that step, which the prompt end
    precedes (the head reads before it, as in a rollout)."""
    dialogues, labels = [], []
    for ep in filter(imitable, episodes):
        observations = [text for role, text in ep.transcript if role == "observation"]
        actions = [text for role, text in ep.transcript if role == "action"]
        trained = [not isinstance(a, Perturbation) for a in actions]
        steps = list(ep.opponent) if len(ep.opponent) == len(actions) else [()] * len(actions)
        shown = [hints.ids(chat, step) for step in steps] if hints is not None else None
        dialogues.append(Dialogue(observations, actions, trained, shown))
        labels.append(steps)
    input_ids, masks, ends = [], [], []
    for dialogue, conv in zip(dialogues, chat.conversations(dialogues), strict=True):
        shown = dialogue.hints
        input_ids.append(list(conv.input_ids))
        masks.append([int(m) for m in conv.mask])
        ends.append([start - 1 - (len(shown[k]) if shown else 0) for k, start in enumerate(conv.action_starts)])
    return {"input_ids": input_ids, "assistant_masks": masks, "prompt_ends": ends, "opponent": labels}


def imitable(ep: Episode) -> bool:
    """Whether the episode holds an expert action to imitate (not only perturbations)."""
    return any(role == "action" and not isinstance(text, Perturbation) for role, text in ep.transcript)


def perturbed_fraction(episodes: list[Episode]) -> float:
    """Share of demonstration actions that were perturbations."""
    actions = [text for ep in episodes for role, text in ep.transcript if role == "action"]
    return sum(isinstance(a, Perturbation) for a in actions) / max(len(actions), 1)


def decay_factor(elapsed: float, budget: float, fraction: float) -> float:
    """Learning-rate multiplier: 1, then linear to 0 over the last `fraction` of a budget (seconds or steps).

    A constant rate leaves the final weights wherever the last noisy steps put them; held-out
    success then swings widely between seeds at equal budgets (docs/results/2026-11-30-tool-use-sft-lr-annealing.md). Annealing at the
    end of a time budget needs the time, not the step count, since steps per second vary.
    """
    if fraction <= 0.0 or budget <= 0.0:
        return 1.0
    start = budget * (1.0 - fraction)
    if elapsed <= start:
        return 1.0
    return max(0.0, (budget - elapsed) / (budget - start))


def budget_decay(elapsed: float, step: int, cfg: WarmStartConfig) -> float:
    """The `decay_factor` of whichever budget ends first: `cfg.seconds`, or `cfg.max_steps` (a
    step-budgeted run sets its seconds out of reach, and would otherwise never anneal)."""
    return min(decay_factor(elapsed, cfg.seconds, cfg.lr_decay_fraction),
               decay_factor(float(step), float(cfg.max_steps), cfg.lr_decay_fraction))


def run_sft(
    model: Any,
    tokenizer: Any,
    columns: dict[str, list[list[int]]],
    cfg: WarmStartConfig,
    seed: int,
    log: Callable[[dict[str, float], int], None],
    progress: Callable[[float], None] | None = None,
    head: torch.nn.Module | None = None,
    head_coef: float = 0.0,
) -> dict[str, float]:
    """Fine-tune `model` in place within `cfg.seconds` (or `cfg.max_steps`); returns the final SFT figures.

    Each step is the causal-LM loss on the action tokens of a batch of similar-length conversations
    (`policies.scoring.imitation_loss`: the output layer, and the last layer where the model allows it, only
    where an action token is predicted; plus the MoE load-balancing loss, weighted by the model's
    `router_aux_loss_coef`),
    AdamW, gradient norm clipped at `MAX_GRAD_NORM`. The rate warms up linearly over `cfg.warmup_steps`,
    then stays constant until the anneal of `budget_decay`. `sft/loss` (the mean since the last log),
    `sft/learning_rate` (the rate of the next step), `sft/grad_norm` and `sft/epoch` are logged every
    `LOG_EVERY` steps. With an opponent `head`, each step adds `head_coef` times its mean cross-entropy
    over the batch's labelled (action, opponent) pairs, read at each action's prompt end from the
    same forward (`columns["prompt_ends"]`, `columns["opponent"]`), and logs `sft/opponent_loss` and
    `sft/opponent_accuracy`: the head and the trunk's memory of the history learn from the first step.
    """
    start = time.perf_counter()
    input_ids, masks = columns["input_ids"], columns["assistant_masks"]
    if not input_ids:
        raise ValueError("no demonstration to imitate; raise sft.episodes")
    longest = max(len(ids) for ids in input_ids)
    if longest > cfg.max_length:
        raise ValueError(f"a demonstration has {longest} tokens > sft.max_length={cfg.max_length}; raise sft.max_length")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    moe = hasattr(model.config, "output_router_logits")
    aux_coef = float(getattr(model.config, "router_aux_loss_coef", 0.0) or 0.0)
    params = [*model.parameters(), *(head.parameters() if head is not None else ())]
    optimizer = torch.optim.AdamW(params, lr=cfg.learning_rate / max(cfg.warmup_steps, 1), weight_decay=0.0)
    rng = random.Random(seed)
    lengths = [len(ids) for ids in input_ids]
    model.train()
    if head is not None:
        head.train()
    step, total, window, grad_norm = 0, 0.0, [], 0.0
    opp = [0.0, 0.0, 0.0]  # cross-entropy sum, correct, labels since the last log
    try:
        while step < cfg.max_steps and time.perf_counter() - start < cfg.seconds:
            for batch in length_grouped_batches(lengths, cfg.batch_size, rng):
                rows, cols, targets = demo_opponent_targets(columns, batch, head.slots) if head is not None else (None,) * 3
                out = imitation_loss(model, [input_ids[i] for i in batch], [masks[i] for i in batch], pad_id=pad_id,
                                     device=model.device, with_router_logits=moe,
                                     hidden_at=(rows.tolist(), cols.tolist()) if head is not None else None)
                loss = out.cross_entropy if out.aux_loss is None else out.cross_entropy + aux_coef * out.aux_loss
                if head is not None:
                    ce, correct, count = opponent_loss(head(out.hidden), targets.to(model.device))
                    if count > 0:
                        loss = loss + head_coef * ce / count
                    for k, v in enumerate((ce, correct, count)):
                        opp[k] += float(v.detach())
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = float(torch.nn.utils.clip_grad_norm_(params, MAX_GRAD_NORM))
                if math.isfinite(grad_norm) and torch.isfinite(loss):
                    optimizer.step()
                step += 1
                total += float(loss.item())
                window.append(float(loss.item()))
                elapsed = time.perf_counter() - start
                rate = cfg.learning_rate * min(1.0, (step + 1) / max(cfg.warmup_steps, 1)) * budget_decay(
                    elapsed, step, cfg)
                for group in optimizer.param_groups:  # the rate of the next step
                    group["lr"] = rate
                if progress is not None:
                    progress(min(elapsed, cfg.seconds))
                if step % LOG_EVERY == 0:
                    figures = {"sft/loss": float(np.mean(window)), "sft/learning_rate": rate, "sft/grad_norm": grad_norm,
                               "sft/epoch": step * cfg.batch_size / len(input_ids)}
                    if opp[2] > 0:
                        figures.update({"sft/opponent_loss": opp[0] / opp[2], "sft/opponent_accuracy": opp[1] / opp[2]})
                    log(figures, step)
                    window, opp = [], [0.0, 0.0, 0.0]
                if step >= cfg.max_steps or elapsed >= cfg.seconds:
                    break
    finally:
        model.eval()
        if head is not None:
            head.eval()
    return {"sft/steps": float(step), "sft/mean_loss": total / max(step, 1),
            "sft/seconds": time.perf_counter() - start, "sft/conversations": float(len(input_ids))}


MAX_GRAD_NORM = 1.0
"""Gradient norm clip of every SFT step (transformers' Trainer default)."""
LOG_EVERY = 10
"""SFT steps between two logged points."""


def demo_opponent_targets(columns: dict[str, list[Any]], batch: list[int], slots: int
                          ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows and columns (prompt ends) of a batch's actions in its padded ids, and their `[actions, slots]`
    opponent labels (-1: none), for the opponent head's loss."""
    rows, cols, labels = [], [], []
    for row, i in enumerate(batch):
        for end, label in zip(columns["prompt_ends"][i], columns["opponent"][i], strict=True):
            rows.append(row)
            cols.append(end)
            labels.append(list(label[:slots]) + [-1] * (slots - len(label[:slots])))
    return (torch.tensor(rows, dtype=torch.long), torch.tensor(cols, dtype=torch.long),
            torch.tensor(labels, dtype=torch.long).view(-1, slots))


def length_grouped_batches(lengths: list[int], batch_size: int, rng: random.Random) -> list[list[int]]:
    """One epoch of batches of similar-length conversations, in random order: shuffled, cut into chunks of
    `50 * batch_size`, each sorted by length and cut into batches (conversations vary several-fold in
    length, and a batch is as wide as its longest)."""
    order = list(range(len(lengths)))
    rng.shuffle(order)
    chunk = 50 * batch_size
    batches = []
    for k in range(0, len(order), chunk):
        part = sorted(order[k : k + chunk], key=lengths.__getitem__, reverse=True)
        batches += [part[j : j + batch_size] for j in range(0, len(part), batch_size)]
    rng.shuffle(batches)
    return batches
