"""A checkpoint against each scripted partner or opponent style seated in the other agents' seats.

For scenarios whose styles play in agents' seats (`scripted_action`: bargaining's partner styles,
repeated_game in self pairing), plays `--episodes` evaluation seeds of `--split` per style, the
checkpoint's side alternating with the seed (as an opponent pool seats them), greedy, and prints
one row per style: its set (train or held out), the policy's success rate (a deal in bargaining, a
won match in repeated_game), mean return, mean `value` where the scenario measures one (bargaining:
the share of its own pool value the agent got) and, with an opponent head, its prediction accuracy.
`--policy expert` puts the scenario's scripted expert in the checkpoint's seats instead (the reference).

    python benchmarks/partner_styles.py --checkpoint CKPT --episodes 100 --skip-seeds 800000
    python benchmarks/partner_styles.py --policy expert --scenario bargaining --episodes 100 --skip-seeds 800000
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from marl.engine.opponent import prediction_metrics
from marl.engine.opponent_pool import seating
from marl.engine.rollout import STYLE_PREFIX, RolloutWorker, expert_actor
from marl.run.build import env_factory, load_policy


def style_row(worker: RolloutWorker, seeds: list[int], style: str) -> dict[str, Any]:
    """The worker's policy (or its expert actor, with `worker.policies` None) against `style` on `seeds`."""
    probe = worker.make_env()
    probe.reset(seed=0)
    seats = [seating(probe, k, STYLE_PREFIX + style, lambda env, agent: "") for k in range(len(seeds))]
    actor = expert_actor if worker.policies is None else None
    batch = worker.collect(seeds, greedy=True, sample_seed=0, seats=seats, actor=actor)
    mine = [ep for ep in batch.episodes if not ep.policy.startswith(STYLE_PREFIX)]
    row: dict[str, Any] = {"style": style, "success": float(np.mean([ep.reason == "success" for ep in mine])),
                           "return": float(np.mean([ep.ret for ep in mine]))}
    values = [ep.stats["value"] for ep in mine if "value" in ep.stats]
    if values:
        row["value"] = float(np.mean(values))
    if worker.policies is not None:
        accuracy = prediction_metrics(worker.policies, batch).get("opponent/accuracy")
        if accuracy is not None:
            row["accuracy"] = accuracy
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--policy", choices=["checkpoint", "expert"], default="checkpoint")
    parser.add_argument("--scenario", default=None, help="with --policy expert (else the checkpoint's)")
    parser.add_argument("--agents", type=int, default=2, help="with --policy expert (else the checkpoint's)")
    parser.add_argument("--split", default="basic")
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--skip-seeds", type=int, default=0)
    args = parser.parse_args()
    policy = chat = None
    scenario, agents, options = args.scenario, args.agents, {}
    if args.policy == "checkpoint":
        if not args.checkpoint:
            parser.error("--checkpoint is needed unless --policy expert")
        policy, chat, meta = load_policy(args.checkpoint, device="cpu")
        scenario, agents, options = meta.scenario, meta.agents, dict(meta.scenario_options)
    elif not scenario:
        parser.error("--scenario is needed with --policy expert")
    make_env = env_factory(scenario, agents, args.split, options)
    probe = make_env()
    styles = probe.opponent_styles()
    seeds = list(probe.eval_seeds(args.split, args.episodes, skip=args.skip_seeds))
    worker = RolloutWorker(make_env, policy, chat)
    rows = []
    for subset, names in (("train", styles.train), ("heldout", styles.held_out)):
        for style in names:
            rows.append({**style_row(worker, seeds, style), "set": subset})
    summary = {}
    for subset in ("train", "heldout"):
        chosen = [r for r in rows if r["set"] == subset]
        for key in ("success", "return", "value", "accuracy"):
            values = [r[key] for r in chosen if key in r]
            if values:
                summary[f"{subset}_{key}"] = float(np.mean(values))
    print("| style | set | success | return | value | accuracy |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        cells = [f"{r[k]:.3f}" if k in r else "-" for k in ("success", "return", "value", "accuracy")]
        print(f"| {r['style']} | {r['set']} | " + " | ".join(cells) + " |")
    print(json.dumps({"rows": rows, **summary}))


if __name__ == "__main__":
    main()
