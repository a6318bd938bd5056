"""A repeated_game checkpoint against every scripted style, one at a time: win rates and an exploitability estimate.

For each style (training, held-out and probe styles; option `styles` of the scenario), plays
`--episodes` evaluation seeds of `--split` with the checkpoint in every seat, greedy by default, and
prints one row per style: the policy's match win rate, its mean round result (+1 won, -1 lost, 0
drawn), its share of rounds won from round 11 on (where the history is long enough to read; 20-round
matches), and, with an opponent head, its prediction accuracy (overall and by round bucket). The exploitability estimate is the
best of the deterministic styles' mean round result against the policy (the negative of the
policy's worst): a lower bound on what a best response gains per round, since the styles are only
a family of deterministic response rules, not every one. Against `uniform` (a random move every
round) every policy's expected round result is 0: its row shows how much of a figure is noise at
this episode count. The scripted expert can be measured the same way (`--policy expert`) as the reference.

    python benchmarks/repeated_game_styles.py --checkpoint CKPT --episodes 100 --skip-seeds 500000
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

from marl.engine.opponent import prediction_metrics
from marl.engine.rollout import RolloutWorker, expert_actor
from marl.run.build import env_factory, load_policy
from marl.run.evaluate import evaluate
from scenarios.repeated_game.styles import HELDOUT_STYLES, PROBE_STYLES, STYLES, TRAIN_STYLES

NOISY = {name for name, cls in STYLES.items() if {"uniform_noise", "uniform_random"} & cls.rules}
ROUND = re.compile(r"round (\d+): you \w+, opp \w+: (won|lost|drew)|round (\d+) forfeited \(opp (\w+)\)")


def late_round_win_rate(batch: Any, first: int = 11) -> float | None:
    """Share of rounds numbered `first` or later that the policy won, read from its transcripts (a forfeit
    is a loss, or a draw when both sides forfeited); None when no match lasted that long."""
    won = played = 0
    for ep in batch.episodes:
        for role, text in ep.transcript:
            m = ROUND.search(text) if role == "observation" else None
            if m is None:
                continue
            number = int(m.group(1) or m.group(3))
            if number >= first:
                played += 1
                won += m.group(2) == "won"
    return won / played if played else None


def style_row(policy: Any, chat: Any, style: str, args: argparse.Namespace, options: dict) -> dict[str, Any]:
    """The policy (or the expert) against one style."""
    make_env = env_factory("repeated_game", args.agents, args.split, {**options, "styles": [style]})
    seeds = make_env().eval_seeds(args.split, args.episodes, skip=args.skip_seeds)
    worker = RolloutWorker(make_env, policy, chat)
    figures, batch = evaluate(worker, seeds, greedy=not args.sampled, sample_seed=0,
                              actor=expert_actor if policy is None else None)
    rounds = figures["stats/rounds_won"] + figures["stats/rounds_lost"] + figures["stats/rounds_drawn"]
    row = {"style": style, "set": "train" if style in TRAIN_STYLES else "heldout" if style in HELDOUT_STYLES
           else "probe", "win_rate": figures[f"stats/match_won/{style}"],
           "round_result": (figures["stats/rounds_won"] - figures["stats/rounds_lost"]) / max(rounds, 1e-9)}
    late = late_round_win_rate(batch)
    if late is not None:
        row["round_win_rate/rounds_11_plus"] = late
    if policy is not None:
        row.update({k.split("/", 1)[1]: v for k, v in prediction_metrics(policy, batch).items()})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", default=None)
    parser.add_argument("--policy", choices=["checkpoint", "expert"], default="checkpoint")
    parser.add_argument("--split", default="basic", help="basic (three moves, 10 rounds) or hard (five, first-to-4)")
    parser.add_argument("--agents", type=int, default=2)
    parser.add_argument("--episodes", type=int, default=100)
    parser.add_argument("--skip-seeds", type=int, default=0)
    parser.add_argument("--sampled", action="store_true", help="sample at the policy temperature (default greedy)")
    parser.add_argument("--styles", nargs="+", default=None, help="default: every style")
    parser.add_argument("--rounds", type=int, default=None, help="match length (default: the checkpoint's)")
    parser.add_argument("--in-match", choices=["checkpoint", "on", "off"], default="checkpoint",
                        help="mix an aux+input head's shown prediction with in-match predictors (default: as trained)")
    args = parser.parse_args()
    policy = chat = None
    options: dict = {}
    if args.policy == "checkpoint":
        if not args.checkpoint:
            parser.error("--checkpoint is needed unless --policy expert")
        policy, chat, meta = load_policy(args.checkpoint, device="cpu")
        options = {k: v for k, v in meta.scenario_options.items() if k != "styles"}
        if args.in_match != "checkpoint":
            # a team- or agent-mapped checkpoint holds several policies, each with its own head
            members = list(policy.policies.values()) if hasattr(policy, "policies") else [policy]
            heads = [getattr(p, "opponent_head", None) for p in members]
            if any(h is None or not h.feeds_prompt for h in heads):
                parser.error("--in-match needs a checkpoint trained with opponent.mode aux+input (every policy)")
            for head in heads:
                head.in_match = args.in_match == "on"
    if args.rounds is not None:
        options["rounds"] = args.rounds
    rows = [style_row(policy, chat, s, args, options) for s in args.styles or [*TRAIN_STYLES, *HELDOUT_STYLES,
                                                                                *PROBE_STYLES]]
    deterministic = [r for r in rows if r["style"] not in NOISY]
    summary = {"exploitability": max((-r["round_result"] for r in deterministic), default=float("nan")),
               "best_response_style": min(deterministic, key=lambda r: r["round_result"])["style"] if deterministic
               else None}
    for subset in ("train", "heldout", "probe"):
        chosen = [r for r in rows if r["set"] == subset]
        if chosen:
            summary[f"{subset}_win_rate"] = sum(r["win_rate"] for r in chosen) / len(chosen)
            for key in ("round_win_rate/rounds_11_plus", "accuracy/rounds_11_plus", "shown_accuracy/rounds_11_plus",
                        "round_result"):
                values = [r[key] for r in chosen if key in r]
                if values:
                    summary[f"{subset}_{key}"] = sum(values) / len(values)

    def cell(value: float | None) -> str:
        return "-" if value is None else f"{value:.2f}"

    print("| style | set | win rate | round result | rounds 11+ won | head accuracy (6-10) | head accuracy (11+) "
          "| shown accuracy (11+) |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['style']} | {r['set']} | {r['win_rate']:.2f} | {r['round_result']:+.3f} | "
              f"{cell(r.get('round_win_rate/rounds_11_plus'))} | {cell(r.get('accuracy/rounds_6-10'))} | "
              f"{cell(r.get('accuracy/rounds_11_plus'))} | {cell(r.get('shown_accuracy/rounds_11_plus'))} |")
    print(json.dumps({"rows": rows, **summary}))


if __name__ == "__main__":
    main()
