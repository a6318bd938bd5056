"""Held-out evaluation: play a split's evaluation seeds (never used in training) and summarize.

The seed list is fixed per split (`env.eval_seeds(split, n)`), so every policy is measured on the
same tasks; `sample_seed` only matters for sampled (non-greedy) decoding. Baselines (scripted
expert, uniform random valid action) go through the same worker as the LLM.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from marl.engine.rollout import RolloutBatch, RolloutWorker, concat_batches
from marl.engine.summary import summarize


def evaluate(
    worker: RolloutWorker,
    seeds: list[int],
    greedy: bool = True,
    sample_seed: int | None = 0,
    actor: Any = None,
    batch: int = 200,
    scripted: Any = None,
    progress: Callable[[int], Any] | None = None,
) -> tuple[dict[str, float], RolloutBatch]:
    """Play every seed once; returns summary figures (names without prefix) and the last batch.

    `actor` plays every agent, or with `scripted(env, agent)` only those (see `RolloutWorker.collect`);
    `progress(n)` is told each time `n` more seeds have been played.
    """
    parts = []
    for chunk, start in enumerate(range(0, len(seeds), batch)):
        chunk_seed = None if sample_seed is None else sample_seed * 100_003 + chunk
        parts.append(worker.collect(seeds[start : start + batch], greedy=greedy, sample_seed=chunk_seed, actor=actor,
                                    scripted=scripted))
        if progress is not None:
            progress(len(seeds[start : start + batch]))
    merged = concat_batches(parts) if len(parts) > 1 else (parts[0] if parts else None)
    assert merged is not None, "evaluate needs at least one seed"
    raw = summarize(merged, prefix="eval")
    figures = {k.split("/", 1)[1]: v for k, v in raw.items()}
    figures["episodes"] = float(len(merged.episodes))
    return figures, merged


def transcript_text(batch: RolloutBatch, limit: int) -> str:
    """Human-readable transcripts of the first `limit` episodes."""
    lines = []
    for ep in batch.episodes[:limit]:
        lines.append(f"=== seed {ep.seed} {ep.agent}: {ep.reason} return {ep.ret:.3f}")
        for role, text in ep.transcript:
            lines.append(f"[{role}] {text}")
        lines.append("")
    return "\n".join(lines)
