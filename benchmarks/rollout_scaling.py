"""Rollout cost per agent-step as the team grows, and as more envs share each generate call.

A random-init tiny MoE plays sampled episodes under constrained decoding (the rollout worker with its
turn cache, as in training). Two sweeps per scenario, each from this one run:
- team size: `--envs` envs of N agents for each N of `--agents`; prints milliseconds per agent-step
  (one agent writing one action) and its ratio to the smallest team's;
- envs per batch: `--env-counts` envs at the team size `--sweep-agents`; prints the same figure and its
  ratio to one env at a time (what batching the envs buys).
Also per row: generated tokens/s (what `perf/tokens_per_s` logs) and processed tokens/s (prompt tokens
prefilled + tokens generated), which differ where actions are short next to their observations.

    python benchmarks/rollout_scaling.py --scenarios info_split navigation --agents 2 4 8 --envs 8
    python benchmarks/rollout_scaling.py --scenarios navigation --agents 2 16 --option navigation.view=1
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import scenarios
from marl.config import TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import build_policy, train_env_factory
from policies.chat import ChatFormat

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside this one
from env_throughput import scenario_options  # noqa: E402


def measure(name: str, agents: int, envs: int, tmp: Path, seed: int, lean: bool = True,
            options: dict | None = None) -> dict[str, float]:
    """One rollout of `envs` episodes of `agents` agents after a warm-up one: per agent-step figures."""
    cfg = TrainConfig(seed=seed, scenario=name, agents=agents, scenario_options=dict(options or {}))
    cfg.policy.tokenizer_episodes = 200
    cfg.policy.lean_decoding = lean
    cfg = cfg.validate().resolved()
    make = train_env_factory(cfg, "train")
    tokenizer, _, policy = build_policy(cfg, make, tmp, np.random.default_rng(seed))
    worker = RolloutWorker(make, policy, ChatFormat(tokenizer))
    worker.collect([10_000, 10_001], sample_seed=1)  # warm-up: tries compiled, allocator grown
    batch = worker.collect([20_000 + i for i in range(envs)], sample_seed=seed)
    steps = max(len(batch.turns), 1)
    processed = batch.processed_tokens
    return {"ms_per_agent_step": 1000 * batch.seconds / steps, "agent_steps": steps,
            "generated_tok_s": batch.generated_tokens / max(batch.generate_seconds, 1e-9),
            "processed_tok_s": processed / max(batch.generate_seconds, 1e-9),
            "generate_share": batch.generate_seconds / max(batch.seconds, 1e-9)}


def row(label: str, agents: int, envs: int, m: dict[str, float], base: float) -> str:
    return (f"| {label} | {agents} | {envs} | {m['agent_steps']} | {m['ms_per_agent_step']:.2f} | "
            f"{m['ms_per_agent_step'] / base:.2f}x | {m['generated_tok_s']:,.0f} | {m['processed_tok_s']:,.0f} | "
            f"{m['generate_share']:.0%} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["info_split", "navigation"])
    parser.add_argument("--agents", nargs="+", type=int, default=[2, 4, 8])
    parser.add_argument("--envs", type=int, default=8, help="envs per rollout in the team-size sweep")
    parser.add_argument("--sweep-agents", type=int, default=4, help="team size of the envs-per-batch sweep")
    parser.add_argument("--env-counts", nargs="+", type=int, default=[1, 4, 16, 32])
    parser.add_argument("--model-forward", action="store_true", help="decode through the model's own forward")
    parser.add_argument("--option", action="append", default=[],
                        help="a scenario option, SCENARIO.KEY=VALUE (repeatable), e.g. navigation.view=1")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"decoding through {'the model forward' if args.model_forward else 'the lean forward'}")
    print("| scenario | agents | envs | agent-steps | ms / agent-step | vs first row | generated tok/s | "
          "processed tok/s | generate share |")
    print("|---|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios:
            options = scenario_options(args.option, name)
            label = " ".join([name] + [f"{k}={v}" for k, v in options.items()])
            low, high = scenarios.info(name).agent_range
            counts = [n for n in args.agents if low <= n <= high]
            base = None
            for n in counts:
                m = measure(name, n, args.envs, Path(tmp), args.seed, not args.model_forward, options)
                base = base or m["ms_per_agent_step"]
                print(row(label, n, args.envs, m, base), flush=True)
            base = None
            for envs in args.env_counts:
                m = measure(name, args.sweep_agents, envs, Path(tmp), args.seed, not args.model_forward, options)
                base = base or m["ms_per_agent_step"]
                print(row(f"{label} (envs)", args.sweep_agents, envs, m, base), flush=True)


if __name__ == "__main__":
    main()
