"""Warm start: supervised fine-tuning on scripted-expert demonstrations with TRL's SFTTrainer.

Demonstrations are played through the same rollout worker as RL (the scripted expert acts), then
turned into token ids by the policy's `ChatFormat.conversation`, built from exactly the pieces a
rollout prompt is built from, so SFT trains on the token ids the policy will later see. The
dataset is handed to SFTTrainer pre-tokenized (`input_ids` + `assistant_masks`: loss on action
tokens only). Training stops at a wall-clock budget; the schedule is constant after warm-up so that
stopping anywhere leaves a sensible model, optionally annealed linearly to 0 over the last part of
the budget (`sft.lr_decay_fraction`). MLflow logging goes through our tracker, not
`report_to`, so everything lands in the one run.
"""

from __future__ import annotations

import random
import tempfile
import time
from collections.abc import Callable
from typing import Any

from marl.config import WarmStartConfig
from marl.engine.rollout import Episode, RolloutWorker, expert_actor
from policies.random_policy import RandomPolicy


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


def conversations(chat: Any, episodes: list[Episode]) -> dict[str, list[list[int]]]:
    """Pre-tokenized SFT columns from episode transcripts; perturbations are masked out of the loss,
    and an episode with no expert action left is dropped."""
    input_ids, masks = [], []
    for ep in filter(imitable, episodes):
        observations = [text for role, text in ep.transcript if role == "observation"]
        actions = [text for role, text in ep.transcript if role == "action"]
        trained = [not isinstance(a, Perturbation) for a in actions]
        ids, mask = chat.conversation(observations, actions, trained=trained)
        input_ids.append(list(ids))
        masks.append([int(m) for m in mask])
    return {"input_ids": input_ids, "assistant_masks": masks}


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
) -> dict[str, float]:
    """Fine-tune `model` in place within `cfg.seconds`; returns the final SFT figures."""
    import datasets
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import SFTConfig, SFTTrainer

    start = time.perf_counter()

    class Budget(TrainerCallback):
        """Stops at the wall-clock budget and forwards logs to the run's tracker."""

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
            elapsed = time.perf_counter() - start
            if progress is not None:
                progress(min(elapsed, cfg.seconds))
            if elapsed >= cfg.seconds:
                control.should_training_stop = True
            optimizer = kwargs.get("optimizer")
            factor = budget_decay(elapsed, state.global_step, cfg)
            if optimizer is not None and factor < 1.0:
                # Runs after the trainer's scheduler step, so this is the rate of the next update.
                for group in optimizer.param_groups:
                    group["lr"] = cfg.learning_rate * factor
            return control

        def on_log(self, args: Any, state: Any, control: Any, logs: dict | None = None, **kwargs: Any) -> None:
            if logs:
                metrics = {f"sft/{k}": float(v) for k, v in logs.items() if isinstance(v, int | float)}
                optimizer = kwargs.get("optimizer")
                if optimizer is not None and "sft/learning_rate" in metrics:
                    # the scheduler's rate, which the trainer logs, does not know about the anneal
                    metrics["sft/learning_rate"] = float(optimizer.param_groups[0]["lr"])
                log(metrics, state.global_step)

    class PlainLossSFTTrainer(SFTTrainer):
        """SFTTrainer with the model's own causal-LM loss (which adds the MoE aux loss).

        TRL's default fused chunked-logprob forward is built for large vocabularies on GPUs; on a
        CPU with a vocabulary of about a thousand tokens it is the slower of the two.
        """

        def compute_loss(self, model: Any, inputs: dict, return_outputs: bool = False,
                         num_items_in_batch: Any = None) -> Any:
            inputs = {**inputs, "use_cache": False}
            outputs = model(**inputs)
            return (outputs.loss, outputs) if return_outputs else outputs.loss

    datasets.disable_progress_bars()  # one progress bar (ours) on the terminal, not five
    dataset = Dataset.from_dict(columns)
    # TRL turns router logits on for the training forward (adding the load-balancing loss); generation
    # must not compute them (it breaks with the KV cache), so the flag is restored afterwards.
    aux_before = getattr(model.config, "output_router_logits", None)  # None: not an MoE model
    longest = max(len(ids) for ids in columns["input_ids"])
    if longest > cfg.max_length:
        raise ValueError(f"a demonstration has {longest} tokens > sft.max_length={cfg.max_length}; raise sft.max_length")
    with tempfile.TemporaryDirectory(prefix="marl-sft-") as out:
        args = SFTConfig(
            output_dir=out,
            per_device_train_batch_size=cfg.batch_size,
            learning_rate=cfg.learning_rate,
            lr_scheduler_type="constant_with_warmup",
            warmup_steps=cfg.warmup_steps,
            max_steps=cfg.max_steps,
            logging_steps=10,
            report_to="none",
            save_strategy="no",
            use_cpu=model.device.type == "cpu",
            seed=seed,
            data_seed=seed,
            max_length=cfg.max_length,
            disable_tqdm=True,
            dataloader_num_workers=0,
            weight_decay=0.0,
            # Recomputing activations saves memory a tiny model does not need and costs a large share of a step.
            activation_checkpointing=False,
            # Conversations vary in length several-fold: batching similar lengths cuts padding work.
            train_sampling_strategy="group_by_length",
        )
        trainer = PlainLossSFTTrainer(model=model, args=args, train_dataset=dataset, processing_class=tokenizer,
                             callbacks=[Budget()])
        trainer.remove_callback(PrinterCallback)  # our tracker and progress bar report instead
        result = trainer.train()
        # Accelerate wraps `model.forward` in an instance attribute closed over THIS model object; a
        # later deepcopy (the RL reference) would keep calling the original model, so KL to the
        # reference would read 0. Drop the wrapper: the class's own forward is what we want.
        vars(model).pop("forward", None)
        vars(model).pop("_original_forward", None)
    if aux_before is not None:
        model.config.output_router_logits = aux_before
    model.eval()
    return {"sft/steps": float(result.global_step), "sft/mean_loss": float(result.training_loss),
            "sft/seconds": time.perf_counter() - start, "sft/conversations": float(len(columns["input_ids"]))}
