"""Held-out evaluation: play a split's evaluation seeds (never used in training) and summarize.

The seed list is fixed per split (`env.eval_seeds(split, n)`), so every policy is measured on the
same tasks; `sample_seed` only matters for sampled (non-greedy) decoding. Baselines (scripted
expert, uniform random valid action) go through the same worker as the LLM.
"""

from __future__ import annotations

from typing import Any

from marl.engine.rollout import RolloutBatch, RolloutWorker
from marl.engine.summary import summarize


def evaluate(
    worker: RolloutWorker,
    seeds: list[int],
    greedy: bool = True,
    sample_seed: int | None = 0,
    actor: Any = None,
    batch: int = 200,
    scripted: Any = None,
) -> tuple[dict[str, float], RolloutBatch]:
    """Play every seed once; returns summary figures (names without prefix) and the last batch.

    `actor` plays every agent, or with `scripted(env, agent)` only those (see `RolloutWorker.collect`).
    """
    merged: RolloutBatch | None = None
    for chunk, start in enumerate(range(0, len(seeds), batch)):
        chunk_seed = None if sample_seed is None else sample_seed * 100_003 + chunk
        part = worker.collect(seeds[start : start + batch], greedy=greedy, sample_seed=chunk_seed, actor=actor,
                              scripted=scripted)
        if merged is None:
            merged = part
        else:
            offset = len(merged.episodes)
            turn_offset = len(merged.turns)
            for t in part.turns:
                t.episode += offset
            for e in part.episodes:
                e.turns = [i + turn_offset for i in e.turns]
            merged.turns.extend(part.turns)
            merged.episodes.extend(part.episodes)
            merged.generated_tokens += part.generated_tokens
            merged.env_steps += part.env_steps
            merged.seconds += part.seconds
            merged.generate_seconds += part.generate_seconds
            merged.env_seconds += part.env_seconds
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
