"""Scenario cost: env throughput with scripted actions, and the env's share of an LLM rollout.

For every registered scenario at N agents (default 8, or the nearest count it supports):
1. agent-steps per second with the scripted expert acting (reset included; the expert's own
   thinking is timed apart and left out, so the figure is the env's);
2. the env's share of a rollout's wall-clock when a random-init tiny MoE acts under constrained
   decoding (the rollout worker times generation and env steps separately). The issue's bar is
   under 5%: the env must never be what a run waits for.

Both figures come from this one run on this machine; the share is the ratio that matters.

    python benchmarks/env_throughput.py --agents 8 --episodes 40 --rollout-episodes 8
"""

from __future__ import annotations

import argparse
import time
from functools import partial
from pathlib import Path

import numpy as np
import yaml

import scenarios
from marl.config import TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import build_policy
from policies.chat import ChatFormat


def agent_count(name: str, wanted: int) -> int:
    lo, hi = scenarios.info(name).agent_range
    n = min(max(wanted, lo), hi)
    if name == "predator_prey" and n % 2:  # two teams of equal size
        n -= 1
    return n


def scenario_options(items: list[str], name: str) -> dict[str, object]:
    """The options of `name` among `SCENARIO.KEY=VALUE` items (values read as YAML scalars: `view=1` is an int)."""
    out = {}
    for item in items:
        target, eq, value = item.partition("=")
        scenario, dot, key = target.partition(".")
        if not eq or not dot or not key:
            raise SystemExit(f"--option {item!r}: write SCENARIO.KEY=VALUE, e.g. navigation.view=1")
        if scenario == name:
            out[key] = yaml.safe_load(value)
    return out


def scripted_throughput(name: str, n: int, episodes: int) -> tuple[float, float]:
    """(agent-steps per second of the env alone, agent-steps per episode) with expert actions."""
    env = scenarios.make(name, n_agents=n)
    env_s = 0.0
    agent_steps = 0
    for seed in range(episodes):
        t0 = time.perf_counter()
        env.reset(seed=seed)
        env_s += time.perf_counter() - t0
        while env.agents:
            actions = {a: env.expert_action(a) for a in env.agents}
            t0 = time.perf_counter()
            env.step(actions)
            env_s += time.perf_counter() - t0
            agent_steps += len(actions)
    return agent_steps / env_s, agent_steps / episodes


class TimedEnv:
    """Delegates to a scenario and adds the wall time of reset, step and action_grammar to ``clock``.

    The rollout worker's own env timer also counts the policy's tokenization of observations, and
    counts grammar building as generation; timing the env's methods is the honest split. A proxy
    (not patched methods) because scenarios may deepcopy themselves (``info_split`` plans its turn
    budget on a copy) and must keep calling their own methods.
    """

    def __init__(self, env: scenarios.TextScenario, clock: dict[str, float]) -> None:
        self._env, self._clock = env, clock

    def __getattr__(self, name: str):
        return getattr(self._env, name)

    def _timed(self, method: str, *args, **kwargs):
        t0 = time.perf_counter()
        try:
            return getattr(self._env, method)(*args, **kwargs)
        finally:
            self._clock["env"] += time.perf_counter() - t0

    def reset(self, *args, **kwargs):
        return self._timed("reset", *args, **kwargs)

    def step(self, *args, **kwargs):
        return self._timed("step", *args, **kwargs)

    def action_grammar(self, *args, **kwargs):
        return self._timed("action_grammar", *args, **kwargs)


def timed_env(name: str, n: int, clock: dict[str, float]) -> TimedEnv:
    return TimedEnv(scenarios.make(name, n_agents=n, split="train"), clock)


def rollout_share(name: str, n: int, episodes: int, workdir: Path) -> tuple[float, float]:
    """(env share of an LLM rollout's wall time, generated tokens per second) with a tiny MoE."""
    cfg = TrainConfig(scenario=name, agents=n, output_dir=str(workdir))
    cfg.policy.tokenizer_episodes = 300
    cfg.validate()
    clock = {"env": 0.0}
    make_env = partial(timed_env, name, n, clock)
    tokenizer, _, policy = build_policy(cfg, make_env, workdir, np.random.default_rng(0))
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    worker.collect([10_000 + i for i in range(2)])  # warm-up: trie caches, allocator
    clock["env"] = 0.0
    batch = worker.collect([20_000 + i for i in range(episodes)], sample_seed=0)
    return clock["env"] / batch.seconds, batch.generated_tokens / batch.generate_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--episodes", type=int, default=40, help="scripted episodes per scenario")
    parser.add_argument("--rollout-episodes", type=int, default=8, help="LLM episodes per scenario (0 skips)")
    parser.add_argument("--workdir", default="runs/bench/env")
    parser.add_argument("--scenarios", nargs="*", default=None)
    args = parser.parse_args()
    workdir = Path(args.workdir)
    print("| scenario | N | scripted agent-steps/s | agent-steps/episode | env share of LLM rollout | LLM tok/s |")
    print("|---|---|---|---|---|---|")
    for name in args.scenarios or scenarios.names():
        n = agent_count(name, args.agents)
        rate, per_episode = scripted_throughput(name, n, args.episodes)
        share = tok_s = None
        if args.rollout_episodes > 0:
            share, tok_s = rollout_share(name, n, args.rollout_episodes, workdir)
        share_text = "-" if share is None else f"{100 * share:.2f}%"
        tok_text = "-" if tok_s is None else f"{tok_s:,.0f}"
        print(f"| {name} | {n} | {rate:,.0f} | {per_episode:.1f} | {share_text} | {tok_text} |", flush=True)


if __name__ == "__main__":
    main()
