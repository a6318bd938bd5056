"""`marl eval`: load a checkpoint (or build a baseline) and evaluate it on a split's held-out seeds.

Baselines share the rollout worker with the LLM: `expert` (the scenario's scripted expert),
`random` (a uniformly random valid action each turn) and `untrained` (a random-init LLM of the
same preset and tokenizer as training, decoding under the same constraints). A checkpoint brings
its scenario, agent count and scenario options; flags override the first two. `--scripted-team T`
lets the scripted expert play team T against the policy (a self-play checkpoint's predators
against expert prey), so teams trained by different runs meet one fixed opponent.
"""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

import scenarios
from marl.checkpoint import read_meta
from marl.config import CommsConfig, ConfigError, TrainConfig, comms_topology
from marl.evaluate import evaluate
from marl.rollout import RolloutWorker, expert_actor, team_name
from policies.random_policy import RandomPolicy

BASELINES = ("expert", "random", "untrained")


def load_policy(checkpoint: str | Path, device: str = "auto") -> tuple[Any, Any, dict[str, Any]]:
    """Policy + ChatFormat from a checkpoint folder (safetensors + tokenizer + JSON metadata).

    A checkpoint of several policies (`policy_mapping` team or agent) comes back as a `PolicyMap`
    that routes each agent to its own model, as during training.
    """
    from transformers import AutoTokenizer

    import scenarios
    from marl.policy_map import PolicyMap, policy_id
    from marl.train import resolve_device
    from policies.chat import ChatFormat
    from policies.llm_policy import LLMPolicy
    from policies.presets import build_model

    meta = read_meta(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))

    def load(folder: Path) -> LLMPolicy:
        model = build_model(str(folder), vocab_size=len(tokenizer)).to(resolve_device(device)).eval()
        return LLMPolicy(model, tokenizer, constrained=bool(meta.get("constrained", True)),
                         temperature=float(meta.get("temperature", 1.0)),
                         max_new_tokens=int(meta.get("max_new_tokens", 48)))

    policy: Any = load(Path(checkpoint))
    ids = meta.get("policies") or []
    if len(ids) > 1:
        mode = str(meta.get("policy_mapping", "shared"))
        kind = scenarios.info(meta["scenario"]).kind
        models = {ids[0]: policy, **{pid: load(Path(checkpoint) / "policies" / pid) for pid in ids[1:]}}
        policy = PolicyMap(models, lambda env, agent: policy_id(mode, env, agent, kind))
    return policy, ChatFormat(tokenizer), meta


def run_eval(args: Any) -> dict[str, Any]:
    """Evaluate per `EvalArgs`; returns the JSON-ready figures."""
    if args.episodes <= 0:
        raise ConfigError("--episodes must be > 0")
    if args.policy not in ("checkpoint", *BASELINES):
        raise ConfigError(f"--policy {args.policy!r}: use 'checkpoint' or one of {BASELINES}")
    meta: dict[str, Any] = {}
    if args.policy == "checkpoint":
        if not args.checkpoint:
            raise ConfigError("pass --checkpoint PATH (printed by `marl train`) or a baseline with --policy")
        meta = read_meta(args.checkpoint)
    scenario = args.scenario or meta.get("scenario", "tool_use")
    options = dict(meta.get("scenario_options", {}))
    if scenario not in scenarios.names():
        raise ConfigError(f"--scenario {scenario!r} is unknown; choose one of {scenarios.names()}")
    info = scenarios.info(scenario)
    agents = args.agents or int(meta.get("agents") or info.agent_range[0])
    if args.split not in info.splits:
        raise ConfigError(f"--split {args.split!r} is not a split of {scenario}; choose one of {list(info.splits)}")
    if not info.agent_range[0] <= agents <= info.agent_range[1]:
        raise ConfigError(f"--agents {agents} is outside {scenario}'s range {list(info.agent_range)}")
    # Checked before a model is loaded or built: a wrong team name fails at once.
    scripted = scripted_team(args, partial(scenarios.make, scenario, n_agents=agents, **options))

    policy = chat = actor = None
    if args.policy == "checkpoint":
        policy, chat, _ = load_policy(args.checkpoint)
    elif args.policy == "expert":
        actor = expert_actor
    elif args.policy == "random":
        random_policy = RandomPolicy(args.seed)

        def actor(env: Any, agent: str) -> str:
            return random_policy.act(env.action_grammar(agent))
    else:  # untrained: the training preset and tokenizer with random weights
        from marl.train import build_policy
        from policies.chat import ChatFormat

        cfg = TrainConfig(scenario=scenario, seed=args.seed, output_dir=args.output_dir)
        cfg.policy.model = args.model
        factory = partial(scenarios.make, scenario, n_agents=agents, split="train", **options)
        tokenizer, _, policy = build_policy(cfg, factory, Path(args.output_dir), np.random.default_rng(args.seed))
        chat = ChatFormat(tokenizer)

    make_env = partial(scenarios.make, scenario, n_agents=agents, split=args.split, **options)
    sharing = comms_settings(meta, args)
    if sharing.topology != "none":
        from marl.train import shared_env

        try:
            channel = TrainConfig(scenario=scenario, agents=agents, comms=sharing).comms_channel()
            comms_topology(sharing.topology)
        except ValueError as err:
            raise ConfigError(f"--comms-*: {err}") from err
        make_env = partial(shared_env, make_env, sharing.topology, channel)
    seeds = list(make_env().eval_seeds(args.split, args.episodes))
    worker = RolloutWorker(make_env, policy, chat)
    if scripted is not None:
        actor = expert_actor
    figures, played = evaluate(worker, seeds, greedy=args.greedy, sample_seed=args.seed, actor=actor,
                               scripted=scripted)
    if args.transcripts:
        write_transcripts(played.episodes, Path(args.transcripts))
    out: dict[str, Any] = {"scenario": scenario, "split": args.split, "policy": args.policy,
                           "agents": agents, "greedy": args.greedy, **figures}
    if sharing.topology != "none":
        out.update({"comms_topology": sharing.topology, "comms_drop": sharing.drop, "comms_delay": sharing.delay,
                    "comms_noise": sharing.noise})
    # `episodes` counts played seeds (what --episodes asked for); rates are over agent-episodes.
    out["episodes"] = len(seeds)
    out["agent_episodes"] = int(figures["episodes"])
    if args.checkpoint:
        out["checkpoint"] = str(args.checkpoint)
    if scripted is not None:
        out["scripted_team"] = args.scripted_team
    return out


def write_transcripts(episodes: list[Any], path: Path) -> None:
    """One JSON line per agent-episode, in play order: what each agent saw and did, and how it ended."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for ep in episodes:
            out.write(json.dumps({"seed": ep.seed, "agent": ep.agent, "team": ep.team, "policy": ep.policy,
                                  "reason": ep.reason, "return": ep.ret,
                                  "transcript": [list(item) for item in ep.transcript]}) + "\n")


def scripted_team(args: Any, make_env: Any) -> Any:
    """`--scripted-team T`: a predicate for the agents of team T (played by the scripted expert), or None."""
    if args.scripted_team is None:
        return None
    if args.policy in ("expert", "random"):
        raise ConfigError(f"--scripted-team puts the expert against an LLM policy, not --policy {args.policy}: "
                          "use a --checkpoint or --policy untrained")
    env = make_env()
    env.reset(seed=0)
    teams = sorted({team_name(env, agent) for agent in env.possible_agents} - {""})
    if args.scripted_team not in teams:
        raise ConfigError(f"--scripted-team {args.scripted_team!r}: this scenario's teams are {teams or 'none'}")
    return lambda env, agent: team_name(env, agent) == args.scripted_team


def comms_settings(meta: dict[str, Any], args: Any) -> CommsConfig:
    """The checkpoint's observation sharing, with any `--comms-*` flag of `marl eval` on top."""
    sharing = CommsConfig(**meta.get("comms", {}))
    for name in ("topology", "drop", "delay", "noise"):
        value = getattr(args, f"comms_{name}", None)
        if value is not None:
            setattr(sharing, name, value)
    return sharing
