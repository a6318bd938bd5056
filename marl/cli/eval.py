"""`marl eval`: load a checkpoint (or build a baseline) and evaluate it on a split's held-out seeds.

Baselines share the rollout worker with the LLM: `expert` (the scenario's scripted expert),
`random` (a uniformly random valid action each turn) and `untrained` (a random-init LLM of the
same preset and tokenizer as training, decoding under the same constraints). A checkpoint brings
its scenario, agent count, scenario options and comms settings in its metadata record; flags
override the agent count and comms. Evaluating a checkpoint on another scenario is refused unless
`--other-scenario` says so: its tokenizer was trained on its own scenario's entities and splits the
other's into pieces it never learned. `--scripted-team T` lets the scripted expert play team T
against the policy (a self-play checkpoint's predators against expert prey), so teams trained by
different runs meet one fixed opponent.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import Any

import numpy as np

import scenarios
from marl.config import CommsConfig, ConfigError, EvalConfig, PolicyConfig, TrackingConfig, TrainConfig
from marl.config.files import flatten
from marl.config.sections import experiment_or_default, tracking_uri_or_default
from marl.engine.opponent import prediction_metrics
from marl.engine.rollout import RolloutWorker, expert_actor, team_name
from marl.run.build import build_tokenizer, env_factory, load_policy, new_policy
from marl.run.checkpoint import CheckpointMeta, read_meta
from marl.run.evaluate import evaluate
from marl.run.runs_uri import checkpoint_folder
from marl.run.tracking import Tracker
from policies.chat import ChatFormat
from policies.random_policy import RandomPolicy


def run_eval(args: EvalConfig) -> dict[str, Any]:
    """Evaluate per `EvalConfig` (checked when built); returns the JSON-ready figures."""
    checkpoint = checkpoint_folder(args.checkpoint, tracking_uri_or_default(args.tracking_uri)) \
        if args.policy == "checkpoint" else None
    meta = read_meta(checkpoint) if checkpoint is not None else None
    scenario = target_scenario(args, meta)
    options = meta.scenario_options if meta is not None and meta.scenario == scenario else {}
    info = scenarios.info(scenario)
    agents = args.agents or (meta.agents if meta is not None else info.agent_range[0])
    if args.split not in info.splits:
        raise ConfigError(f"--split {args.split!r} is not a split of {scenario}; choose one of {list(info.splits)}")
    if not info.agent_range[0] <= agents <= info.agent_range[1]:
        raise ConfigError(f"--agents {agents} is outside {scenario}'s range {list(info.agent_range)}")
    sharing = comms_settings(meta, args)
    make_env = env_factory(scenario, agents, args.split, options, sharing)
    # Checked before a model is loaded or built: a wrong team name fails at once.
    scripted = scripted_team(args, make_env)

    policy = chat = actor = None
    if args.policy == "checkpoint":
        policy, chat, _ = load_policy(checkpoint, device=args.device)
    elif args.policy == "expert":
        actor = expert_actor
    elif args.policy == "random":
        random_policy = RandomPolicy(args.seed)

        def actor(env: Any, agent: str) -> str:
            return random_policy.act(env.action_grammar(agent))
    else:  # untrained: the training preset and tokenizer with random weights
        policy_cfg = PolicyConfig(model=args.model, device=args.device)
        corpus_env = env_factory(scenario, agents, "train", options)
        tokenizer = build_tokenizer(corpus_env, Path(args.output_dir), policy_cfg, np.random.default_rng(args.seed))
        policy, chat = new_policy(policy_cfg, tokenizer, args.seed), ChatFormat(tokenizer)

    seeds = list(make_env().eval_seeds(args.split, args.episodes, skip=args.skip_seeds))
    worker = RolloutWorker(make_env, policy, chat)
    if scripted is not None:
        actor = expert_actor
    figures, played = evaluate(worker, seeds, greedy=args.greedy, sample_seed=args.seed, actor=actor,
                               scripted=scripted)
    if policy is not None:  # an opponent head's predictions on the played turns (nothing without one)
        figures.update(prediction_metrics(policy, played))
    if args.transcripts:
        write_transcripts(played.episodes, Path(args.transcripts))
    out: dict[str, Any] = {"scenario": scenario, "split": args.split, "policy": args.policy,
                           "agents": agents, "greedy": args.greedy, **figures}
    if meta is not None and meta.scenario != scenario:
        out["trained_on"] = meta.scenario
    if sharing.topology != "none":
        out.update({"comms_topology": sharing.topology, "comms_drop": sharing.drop, "comms_delay": sharing.delay,
                    "comms_noise": sharing.noise})
    # `episodes` counts played seeds (what --episodes asked for); rates are over agent-episodes.
    out["episodes"] = len(seeds)
    out["first_seed"] = seeds[0]
    out["agent_episodes"] = int(figures["episodes"])
    if args.checkpoint:
        out["checkpoint"] = str(args.checkpoint)
    if meta is not None and meta.run_id:
        out["trained_run_id"], out["trained_iteration"] = meta.run_id, meta.iteration
    if scripted is not None:
        out["scripted_team"] = args.scripted_team
    return out


def track_eval(args: EvalConfig, report: dict[str, Any]) -> str:
    """Log an evaluation as its own MLflow run: its flags as params, `eval/<split>/<figure>` at the training run's
    last iteration, the transcripts file; linked to the training run (tag `trained_run_id`, and as its child
    run, `mlflow.parentRunId`, where that run is in this store). Returns the evaluation run's id."""
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    uri = tracking_uri_or_default(args.tracking_uri)
    trained = report.get("trained_run_id")
    parent = None
    if trained:
        try:
            parent = MlflowClient(uri).get_run(trained)
        except MlflowException:
            parent = None  # trained against another store: the tag still names it
    experiment = args.experiment or (MlflowClient(uri).get_experiment(parent.info.experiment_id).name if parent
                                     else experiment_or_default(None))
    name = f"eval-{report['scenario']}-{report['split']}-" + (parent.info.run_name if parent else args.policy)
    # under `mlflow run` the run exists already: $MLFLOW_RUN_ID names it
    with Tracker(uri, experiment, name, TrackingConfig.artifact_location, run_id=os.environ.get("MLFLOW_RUN_ID"),
                 command="marl eval") as tr:
        tr.log_params(flatten(args))
        tags = {"scenario": str(report["scenario"]), "split": str(report["split"]), "policy": str(args.policy),
                "agents": str(report["agents"])}
        if trained:
            tags["trained_run_id"] = str(trained)
        if parent is not None and parent.info.experiment_id == tr.experiment_id:
            tags["mlflow.parentRunId"] = str(trained)
        tr.set_tags(tags)
        figures = {f"eval/{report['split']}/{k}": float(v) for k, v in report.items()
                   if isinstance(v, int | float) and not isinstance(v, bool) and k not in ("agents", "trained_iteration")}
        tr.log_metrics(figures, step=int(report.get("trained_iteration", 0)))
        if args.transcripts:
            tr.log_artifact(args.transcripts, "transcripts")
    return tr.run_id


def target_scenario(args: EvalConfig, meta: CheckpointMeta | None) -> str:
    """The scenario to play: `--scenario`, else the checkpoint's, else the default; another one than the
    checkpoint's only with `--other-scenario`."""
    scenario = args.scenario or (meta.scenario if meta is not None else TrainConfig.scenario)
    if scenario not in scenarios.names():
        raise ConfigError(f"--scenario {scenario!r} is unknown; choose one of {scenarios.names()}")
    if meta is not None and scenario != meta.scenario:
        if not args.other_scenario:
            raise ConfigError(f"the checkpoint was trained on {meta.scenario}, not {scenario}: its tokenizer has never "
                              f"seen {scenario}'s entities. Drop --scenario, or pass --other-scenario to evaluate it "
                              "there anyway")
        print(f"marl eval: warning: evaluating a {meta.scenario} checkpoint on {scenario} (--other-scenario); its "
              f"scenario options are not applied", file=sys.stderr)
    return scenario


def write_transcripts(episodes: list[Any], path: Path) -> None:
    """One JSON line per agent-episode, in play order: what each agent saw and did, and how it ended."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for ep in episodes:
            out.write(json.dumps({"seed": ep.seed, "agent": ep.agent, "team": ep.team, "policy": ep.policy,
                                  "reason": ep.reason, "return": ep.ret,
                                  "transcript": [list(item) for item in ep.transcript]}) + "\n")


def scripted_team(args: EvalConfig, make_env: Any) -> Any:
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


def comms_settings(meta: CheckpointMeta | None, args: EvalConfig) -> CommsConfig:
    """The checkpoint's observation sharing, with any `--comms-*` flag of `marl eval` on top."""
    changes = {name: getattr(args, f"comms_{name}") for name in ("topology", "drop", "delay", "noise")}
    if changes["topology"] == "none":
        return CommsConfig()  # sharing off, whatever the checkpoint's channel mode was
    base = CommsConfig(**meta.comms) if meta is not None else CommsConfig()
    try:
        return dataclasses.replace(base, **{k: v for k, v in changes.items() if v is not None})
    except ConfigError as err:
        raise ConfigError(f"--comms-*: {err}") from err
