"""Rollout tokens per second in every scenario, and the time to make SFT demonstrations, this tree against another.

A measurement (one fresh process) does, per scenario: a random-init tiny MoE plays `--envs` sampled
episodes of N agents as in training (constrained decoding, turn cache, the lean forward), after a
warm-up collection, and reports generated tokens/s (`perf/tokens_per_s`) and processed tokens/s (prompt
tokens read + tokens written). Then the demonstrations a run makes before SFT: the scripted expert plays
`--demo-episodes` episodes of `--demo-scenario` and they are tokenized into SFT columns, timed apart.

With `--vs TREE` the measurement alternates between this tree and TREE (a checkout of the baseline),
`--rounds` times each; every ratio is taken pair by pair and its median printed with the pairs. Without
`--vs` it prints this tree's figures.

    python benchmarks/rollout_and_demo_speed.py --agents 8 --envs 16 --vs ../baseline --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside this one
from tree_pairs import add_pair_arguments, pairs  # noqa: E402


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """This process's figures: per scenario its rates, and `demos` its seconds."""
    import numpy as np
    from env_throughput import agent_count

    import scenarios
    from marl.config import TrainConfig
    from marl.engine.rollout import RolloutWorker
    from marl.run.build import build_policy, train_env_factory
    from marl.run.sft import demonstration_episodes
    from marl.run.warm_start import demonstrations
    from policies.chat import ChatFormat

    def worker_for(name: str, n: int, tmp: str) -> tuple[RolloutWorker, ChatFormat]:
        cfg = TrainConfig(seed=args.seed, scenario=name, agents=n)
        cfg.policy.tokenizer_episodes = 200
        cfg = cfg.validate().resolved()
        make = train_env_factory(cfg, "train")
        tokenizer, _, policy = build_policy(cfg, make, Path(tmp), np.random.default_rng(args.seed))
        chat = ChatFormat(tokenizer)
        return RolloutWorker(make, policy, chat), chat

    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios or scenarios.names():
            worker, _ = worker_for(name, agent_count(name, args.agents), tmp)
            worker.collect([10_000, 10_001], sample_seed=1)  # warm-up
            batch = worker.collect([20_000 + i for i in range(args.envs)], sample_seed=args.seed)
            out[name] = {"generated_per_s": batch.generated_tokens / batch.generate_seconds,
                         "processed_per_s": batch.processed_tokens / batch.generate_seconds,
                         "seconds": batch.seconds}
        if args.demo_episodes:
            worker, chat = worker_for(args.demo_scenario, args.demo_agents, tmp)
            t0 = time.perf_counter()
            episodes = demonstration_episodes(worker, list(range(100_000, 100_000 + args.demo_episodes)))
            t1 = time.perf_counter()
            demonstrations(chat, episodes)
            out["demos"] = {"play_s": t1 - t0, "tokenize_s": time.perf_counter() - t1}
    return out


def median_ratio(measured: list[tuple[dict, dict]], key: str, field: str) -> tuple[float, list[float]]:
    each = [a[key][field] / b[key][field] for a, b in measured]
    return statistics.median(each), each


def share_of_tool_use(measured: list[tuple[dict, dict]], side: int, name: str) -> float:
    """Median over the rounds of a scenario's generated tok/s over `tool_use`'s, on one side (0 this tree)."""
    rate = [m[side][name]["generated_per_s"] / m[side]["tool_use"]["generated_per_s"] for m in measured]
    return statistics.median(rate)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--scenarios", nargs="*", default=None)
    parser.add_argument("--demo-scenario", default="info_split")
    parser.add_argument("--demo-agents", type=int, default=3)
    parser.add_argument("--demo-episodes", type=int, default=6000, help="0 skips the demonstrations")
    add_pair_arguments(parser)
    args = parser.parse_args()
    if args.child or args.vs is None:
        print(json.dumps(measure(args)), flush=True)
        return
    argv = ["--agents", str(args.agents), "--envs", str(args.envs), "--demo-scenario", args.demo_scenario,
            "--demo-agents", str(args.demo_agents), "--demo-episodes", str(args.demo_episodes),
            "--seed", str(args.seed), *(["--scenarios", *args.scenarios] if args.scenarios else [])]
    measured = pairs(__file__, args.vs, argv, args.rounds)
    names = [k for k in measured[0][0] if k != "demos"]
    print("\n| scenario | generated tok/s, this / baseline (pairs) | generated tok/s vs tool_use, this | baseline |")
    print("|---|---|---|---|")
    for name in names:
        ratio, each = median_ratio(measured, name, "generated_per_s")
        shares = [f"{share_of_tool_use(measured, side, name):.2f}x" if "tool_use" in names else "-" for side in (0, 1)]
        print(f"| {name} | {ratio:.2f}x ({', '.join(f'{x:.2f}' for x in each)}) | {shares[0]} | {shares[1]} |")
    if "demos" in measured[0][0]:
        for field in ("play_s", "tokenize_s"):
            ratio, each = median_ratio(measured, "demos", field)
            ours = statistics.median(a["demos"][field] for a, _ in measured)
            print(f"demonstrations {field}: this / baseline {ratio:.2f}x ({', '.join(f'{x:.2f}' for x in each)}); "
                  f"this tree {ours:.1f} s")


if __name__ == "__main__":
    main()
