"""The warm start inside a run: demonstrations drawn through the run's worker, SFT with a progress bar, its
figures logged at step 0; and the demonstrations PPO-ptx trains on during RL.

It leaves out the SFT loop itself (`marl.run.sft`) and drawing the expert's episodes (`sft.demonstration_episodes`).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from marl.config import TrainConfig
from marl.engine.opponent import DemoHints
from marl.engine.rollout import RolloutWorker
from marl.run.build import train_seeds
from marl.run.console import Console
from marl.run.memory import peak_rss_gb, trim_heap
from marl.run.sft import conversations, demonstration_episodes, imitable, perturbed_fraction, run_sft
from marl.run.tracking import Tracker


def warm_start(cfg: TrainConfig, tr: Tracker, worker: RolloutWorker, chat: Any, policy: Any, tokenizer: Any,
               rng: np.random.Generator, console: Console) -> dict[str, list[list[int]]]:
    """SFT on scripted-expert demonstrations (and the opponent head, when the policy has one); returns the
    demonstrations (PPO-ptx reuses them)."""
    t0 = time.perf_counter()
    episodes = demonstration_episodes(worker, train_seeds(rng, cfg.sft.episodes), noise=cfg.sft.demo_noise,
                                      seed=cfg.seed)
    columns = demonstrations(chat, episodes, demo_hints(cfg, policy))
    bar = console.bar(total=int(cfg.sft.seconds), desc="sft (s)", unit="s", leave=False)

    def progress(elapsed: float) -> None:
        bar.update(int(elapsed) - bar.n)

    figures = run_sft(policy.model, tokenizer, columns, cfg.sft, cfg.seed, tr.log_metrics, progress,
                      head=policy.opponent_head, head_coef=cfg.opponent.coef)
    bar.close()
    figures["sft/demo_seconds"] = time.perf_counter() - t0 - figures["sft/seconds"]
    trim_heap()
    figures["perf/peak_rss_gb"] = peak_rss_gb()
    if cfg.sft.demo_noise > 0:
        figures["sft/demo_perturbed_fraction"] = perturbed_fraction(episodes)
    tr.log_metrics(figures, step=0)
    console.say(f"sft: {int(figures['sft/steps'])} steps in {figures['sft/seconds']:.0f}s, "
                f"mean loss {figures['sft/mean_loss']:.3f}")
    return columns


def demonstrations(chat: Any, episodes: list[Any], hints: DemoHints | None = None) -> dict[str, list[Any]]:
    """SFT columns of expert episodes plus the agent of each (PPO-ptx gives each policy its own agents')."""
    return {**conversations(chat, episodes, hints), "agents": [ep.agent for ep in episodes if imitable(ep)]}


def demo_hints(cfg: TrainConfig, policy: Any) -> DemoHints | None:
    """The predictions demonstrations show under `aux+input` (None otherwise)."""
    head = policy.opponent_head
    if head is None or not head.feeds_prompt:
        return None
    return DemoHints(head.classes, head.slots, cfg.opponent.hint_noise, cfg.seed)
