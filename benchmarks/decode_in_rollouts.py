"""Tokens per second of whole rollouts in every scenario, decoding through the model's forward and the lean one.

Per scenario, a random-init tiny MoE plays the same sampled episodes twice (`--envs` envs of N agents,
constrained decoding, the turn cache on, as in training): each decoding forward through the model's own
forward, then through `LeanForward`. Prints, for each, the rollout's seconds, generated tokens/s (what
`perf/tokens_per_s` logs) and processed tokens/s (prompt tokens read + tokens generated: scenarios
whose actions are a few tokens after a long observation spend their time reading), the ratio measured
in this one run, whether both rollouts wrote the same transcripts, and each scenario's generated
tokens/s as a share of `tool_use`'s.

    python benchmarks/decode_in_rollouts.py --agents 8 --envs 16
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import scenarios
from marl.config import TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import build_policy, train_env_factory
from policies.chat import ChatFormat

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside this one
from env_throughput import agent_count, scenario_options  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--scenarios", nargs="*", default=None)
    parser.add_argument("--option", action="append", default=[],
                        help="a scenario option, SCENARIO.KEY=VALUE (repeatable), e.g. navigation.view=1")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| scenario | N | agent-steps | tokens / action | prompt tokens read / action | model forward s | lean s | "
          "speed-up | lean generated tok/s | lean processed tok/s | same transcripts |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    reference = None
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios or scenarios.names():
            n = agent_count(name, args.agents)
            options = scenario_options(args.option, name)
            cfg = TrainConfig(seed=args.seed, scenario=name, agents=n, scenario_options=options)
            cfg.policy.tokenizer_episodes = 200
            cfg = cfg.validate().resolved()
            make = train_env_factory(cfg, "train")
            tokenizer, _, policy = build_policy(cfg, make, Path(tmp), np.random.default_rng(args.seed))
            worker = RolloutWorker(make, policy, ChatFormat(tokenizer))
            seeds = [20_000 + i for i in range(args.envs)]
            runs = {}
            for lean in (False, True):
                policy.lean = lean
                worker.collect([10_000, 10_001], sample_seed=1)  # warm-up
                t0 = time.perf_counter()
                batch = worker.collect(seeds, sample_seed=args.seed)
                runs[lean] = (time.perf_counter() - t0, batch)
            (slow_s, slow), (fast_s, fast) = runs[False], runs[True]
            acted = max(sum(1 for t in fast.turns if t.action_ids), 1)
            read = fast.processed_tokens - fast.generated_tokens
            generated = fast.generated_tokens / max(fast.generate_seconds, 1e-9)
            processed = fast.processed_tokens / max(fast.generate_seconds, 1e-9)
            same = [e.transcript for e in slow.episodes] == [e.transcript for e in fast.episodes]
            reference = reference or (generated if name == "tool_use" else None)
            label = " ".join([name] + [f"{k}={v}" for k, v in options.items()])
            print(f"| {label} | {n} | {len(fast.turns)} | {fast.generated_tokens / acted:.1f} | {read / acted:.0f} | "
                  f"{slow_s:.1f} | {fast_s:.1f} | {slow_s / fast_s:.2f}x | {generated:,.0f} | {processed:,.0f} | "
                  f"{'yes' if same else 'no'} |", flush=True)
    if reference:
        print(f"\n(tool_use's generated tok/s: {reference:,.0f})")


if __name__ == "__main__":
    main()
