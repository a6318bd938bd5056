"""Rollout figures under DESIGN.md's metric names: success, return, truncation, invalid actions, per team,
per agent, the scenario's own per-episode figures, and throughput.

It leaves out the rollout itself (`rollout.py`) and anything learned (the learner's figures).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from marl.engine.rollout import HARNESS_FAULTS, Episode, RolloutBatch


def outcome_rates(eps: Sequence[Episode], prefix: str) -> dict[str, float]:
    """Success, return and truncation of a set of agent-episodes, under `prefix`."""
    n = max(len(eps), 1)
    return {
        f"{prefix}/success_rate": sum(e.reason == "success" for e in eps) / n,
        f"{prefix}/return_mean": float(np.mean([e.ret for e in eps])) if eps else 0.0,
        f"{prefix}/truncation_rate": sum(e.reason == "max_turns" for e in eps) / n,
    }


def summarize(batch: RolloutBatch, prefix: str = "rollout") -> dict[str, float]:
    """Rollout metrics under DESIGN.md's names.

    Conventions: rates are over agent-episodes (success, truncation, harness faults) or over actions
    (invalid actions); `return_mean` is the mean per-agent episode return; `agent/<id>/return` is that
    agent's mean return over the batch. Where agents belong to several teams (predator_prey), the
    mixed figures mean little, so each team's success, return and truncation (for prey: survival)
    rates come too, as `<prefix>/team/<team>/...`. A scenario's own per-episode figures
    (`episode_stats`) come as `<prefix>/stats/<name>`, the mean over the agent-episodes that report it.
    """
    eps = batch.episodes
    n = max(len(eps), 1)
    out = outcome_rates(eps, prefix)
    # Beside a scripted team, the rate is the policy's own (the expert's turns carry no tokens and are valid).
    acted = [t for t in batch.turns if t.action_ids] or batch.turns
    out.update({
        f"{prefix}/invalid_action_rate": sum(t.invalid for t in acted) / max(len(acted), 1),
        f"{prefix}/harness_fault_rate": sum(e.reason in HARNESS_FAULTS for e in eps) / n,
        f"{prefix}/turns_per_episode": len(batch.turns) / n,
    })
    for name in sorted({k for e in eps for k in e.stats}):  # a scenario's own per-episode figures
        values = [e.stats[name] for e in eps if name in e.stats]
        out[f"{prefix}/stats/{name}"] = float(np.mean(values))
    teams = sorted({e.team for e in eps if e.team})
    if len(teams) > 1:
        for team in teams:
            out.update(outcome_rates([e for e in eps if e.team == team], f"{prefix}/team/{team}"))
    if prefix == "rollout":
        by_agent: dict[str, list[float]] = {}
        for e in eps:
            by_agent.setdefault(e.agent, []).append(e.ret)
        for agent, rets in sorted(by_agent.items()):
            out[f"agent/{agent}/return"] = float(np.mean(rets))
        out["perf/tokens_per_s"] = batch.generated_tokens / max(batch.generate_seconds, 1e-9)
        # short actions after long observations: generated tokens alone understate what decoding did
        out["perf/processed_tokens_per_s"] = batch.processed_tokens / max(batch.generate_seconds, 1e-9)
        out["perf/env_steps_per_s"] = batch.env_steps / max(batch.seconds, 1e-9)
    return out
