"""Rollout wall-clock with and without the turn cache (per-row KV caches kept between turns).

For each scenario (and comms topology), one random-init tiny MoE plays the same seeded episodes
twice, sampling under constrained decoding: re-reading the whole conversation every turn, then
prefilling only each turn's new tokens. Prints the speed-up measured in this one run and checks
that both rollouts produced the same transcripts (the cache must change nothing but the time).

    python benchmarks/turn_cache.py --episodes 32
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from marl.config import TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import build_policy, train_env_factory
from policies.chat import ChatFormat

CASES = (("tool_use", 1, "none"), ("info_split", 4, "none"), ("info_split", 4, "full"), ("navigation", 3, "none"),
         ("predator_prey", 4, "none"), ("bargaining", 2, "none"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32, help="episodes per rollout (all agents of each)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print("| scenario | N | comms | turns | re-read s | cached s | speed-up | prompt tokens reused | same |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, n, topology in CASES:
            cfg = TrainConfig(seed=args.seed, scenario=name, agents=n)
            cfg.comms.topology = topology
            make = train_env_factory(cfg, "train")
            cfg.policy.tokenizer_episodes = 200
            tokenizer, _, policy = build_policy(cfg, make, Path(tmp), np.random.default_rng(args.seed))
            seeds = list(range(args.episodes))
            timed = []
            for on in (False, True):
                worker = RolloutWorker(make, policy, ChatFormat(tokenizer), turn_cache=on)
                worker.collect(seeds[:2], sample_seed=1)  # warm-up: envs built, kernels loaded
                t0 = time.perf_counter()
                batch = worker.collect(seeds, sample_seed=args.seed)
                timed.append((time.perf_counter() - t0, batch))
            (t_plain, plain), (t_cached, cached) = timed
            same = [e.transcript for e in plain.episodes] == [e.transcript for e in cached.episodes]
            print(f"| {name} | {n} | {topology} | {len(cached.turns)} | {t_plain:.1f} | {t_cached:.1f} | "
                  f"{t_plain / t_cached:.2f}x | {cached.reused_prompt_tokens} | {'yes' if same else 'NO'} |",
                  flush=True)


if __name__ == "__main__":
    main()
