"""`marl eval`: load a checkpoint (or build a baseline) and evaluate it on a split's held-out seeds.

Baselines share the rollout worker with the LLM: `expert` (the scenario's scripted expert),
`random` (a uniformly random valid action each turn) and `untrained` (a random-init LLM of the
same preset and tokenizer as training, decoding under the same constraints).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import scenarios
from marl.checkpoint import read_meta
from marl.config import ConfigError, TrainConfig
from marl.evaluate import evaluate
from marl.rollout import RolloutWorker

BASELINES = ("expert", "random", "untrained")


def load_policy(checkpoint: str | Path) -> tuple[Any, Any, dict[str, Any]]:
    """LLMPolicy + ChatFormat from a checkpoint folder (safetensors + tokenizer + JSON metadata)."""
    from transformers import AutoTokenizer

    from policies.chat import ChatFormat
    from policies.llm_policy import LLMPolicy
    from policies.presets import build_model

    meta = read_meta(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))
    model = build_model(str(checkpoint), vocab_size=len(tokenizer)).eval()
    policy = LLMPolicy(model, tokenizer, constrained=bool(meta.get("constrained", True)),
                       temperature=float(meta.get("temperature", 1.0)),
                       max_new_tokens=int(meta.get("max_new_tokens", 48)))
    return policy, ChatFormat(tokenizer), meta


def run_eval(args: Any) -> dict[str, Any]:
    """Evaluate per `EvalArgs`; returns the JSON-ready figures."""
    if args.scenario not in scenarios.names():
        raise ConfigError(f"--scenario {args.scenario!r} is unknown; choose one of {scenarios.names()}")
    if args.episodes <= 0:
        raise ConfigError("--episodes must be > 0")
    meta: dict[str, Any] = {}
    policy = chat = actor = None
    if args.policy == "checkpoint":
        if not args.checkpoint:
            raise ConfigError("pass --checkpoint PATH (printed by `marl train`) or a baseline with --policy")
        policy, chat, meta = load_policy(args.checkpoint)
    elif args.policy == "expert":
        actor = _expert
    elif args.policy == "random":
        actor = _RandomValid(args.seed)
    elif args.policy == "untrained":
        from marl.train import build_policy
        from policies.chat import ChatFormat

        cfg = TrainConfig(scenario=args.scenario, seed=args.seed, output_dir=args.output_dir)
        cfg.policy.model = args.model
        factory = partial(scenarios.make, args.scenario, n_agents=args.agents or 1, split="train")
        tokenizer, _, policy = build_policy(cfg, factory, Path(args.output_dir), np.random.default_rng(args.seed))
        chat = ChatFormat(tokenizer)
    else:
        raise ConfigError(f"--policy {args.policy!r}: use 'checkpoint' or one of {BASELINES}")
    agents = args.agents or int(meta.get("agents", 1))
    make_env = partial(scenarios.make, args.scenario, n_agents=agents, split=args.split)
    probe = make_env()
    if args.split not in probe.splits:
        raise ConfigError(f"--split {args.split!r} is not a split of {args.scenario}; choose one of {probe.splits}")
    seeds = list(probe.eval_seeds(args.split, args.episodes))
    worker = RolloutWorker(make_env, policy, chat)
    figures, _ = evaluate(worker, seeds, greedy=args.greedy, sample_seed=args.seed, actor=actor)
    out: dict[str, Any] = {"scenario": args.scenario, "split": args.split, "policy": args.policy,
                           "agents": agents, "greedy": args.greedy, **figures}
    out["episodes"] = int(figures["episodes"])
    if args.checkpoint:
        out["checkpoint"] = str(args.checkpoint)
    return out


def _expert(env: Any, agent: str) -> str:
    return env.expert_action(agent)


class _RandomValid:
    """A uniformly random action among the grammar's valid ones."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)

    def __call__(self, env: Any, agent: str) -> str:
        options = env.action_grammar(agent).expand()
        return options[int(self.rng.integers(len(options)))] if options else ""
