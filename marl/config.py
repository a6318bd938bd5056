"""Typed configuration of a training run: the single source of truth for every default.

Each field carries a one-line docstring; tyro turns these dataclasses into the `marl train` CLI
whose help text is those docstrings. `validate()` runs at startup and raises `ConfigError` with a
message that says which field to change. YAML files are read into the same
dataclasses by `marl.config_files`.

Left out for now: curriculum settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Annotated, Any

import tyro


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field and what to change."""


@dataclass
class PolicyConfig:
    """The LLM MoE policy and its tokenizer."""

    model: str = "tiny-moe"
    """Preset name (`tiny-moe`, `small-moe`), a local model folder, or a hub id (needs network)."""
    vocab_size: int = 1024
    """Byte-level BPE merges budget of the offline tokenizer (entities and special tokens come on top)."""
    tokenizer_episodes: int = 2000
    """Scripted-expert episodes whose text trains the offline tokenizer (cached on disk by content hash)."""
    constrained: bool = True
    """Constrained decoding from the scenario's action grammar; off means the format reward must teach format."""
    temperature: float = 1.0
    """Sampling temperature during RL rollouts (logprobs are computed at the same temperature)."""
    max_new_tokens: int = 48
    """Longest action in tokens; an unfinished action is malformed text for the scenario."""
    router_aux_loss_coef: float = 0.001
    """Weight of the MoE Switch load-balancing loss from router logits (RL keeps it small)."""
    device: str = "auto"
    """Torch device of the policy: `auto` (cuda when available, else cpu), `cpu`, `cuda`, `cuda:1`, ..."""


@dataclass
class WarmStartConfig:
    """Supervised fine-tuning on scripted-expert demonstrations (TRL SFTTrainer) before RL."""

    seconds: float = 270.0
    """Wall-clock budget of supervised fine-tuning; 0 skips it."""
    episodes: int = 6000
    """Scripted-expert demonstration episodes drawn from training seeds."""
    batch_size: int = 16
    """Conversations per optimizer step (16 beat 32 on 2 cores: 2.5x the steps per second; see docs/results.md)."""
    learning_rate: float = 3e-3
    """Peak learning rate (constant after warm-up so a wall-clock stop leaves a sensible model)."""
    warmup_steps: int = 30
    """Linear warm-up steps."""
    lr_decay_fraction: float = 0.0
    """Anneal the learning rate linearly to 0 over this last fraction of the budget, seconds or max_steps, whichever ends first (0: constant)."""
    demo_noise: float = 0.0
    """Share of demonstration turns played by a random valid action instead of the expert (kept out of the loss): the expert's next turns then show how to recover from a slip (DART)."""
    max_steps: int = 100_000
    """Upper bound on optimizer steps (the wall-clock budget normally stops earlier)."""
    max_length: int = 1024
    """Longest demonstration in tokens; longer ones stop the run (truncating them would train on cut episodes)."""


@dataclass
class RLConfig:
    """On-policy RL: PPO-clip on the agent's own tokens; the advantages come from `algo`."""

    seconds: float = 180.0
    """Wall-clock budget of the RL phase; it stops at `iterations` or this, whichever comes first."""
    tasks_per_iteration: int = 16
    """Distinct task seeds per iteration."""
    group_size: int = 8
    """Rollouts per task seed; `grpo`'s group baseline compares them (needs >= 2), critic-based algos just see more data."""
    learning_rate: float = 1e-4
    """Adam learning rate of the RL phase (5e-4 drifted to KL 0.1-0.5 within ten updates, learning nothing)."""
    epochs: int = 1
    """Passes over each iteration's batch."""
    minibatches: int = 2
    """Minibatches per epoch (the PPO ratio departs from 1 from the second minibatch on)."""
    clip_eps: float = 0.2
    """PPO clip range of the token-level importance ratio."""
    ratio: str = "token"
    """Importance ratio: `token` (PPO) or `sequence` (GSPO: one length-normalized ratio per action, steadier for MoE)."""
    sequence_clip_eps: float = 0.0004
    """Clip range of the sequence-level ratio (GSPO uses ranges this small)."""
    gamma: float = 1.0
    """Discount per turn in GAE (critic-based algorithms)."""
    gae_lambda: float = 0.95
    """GAE lambda (critic-based algorithms)."""
    bootstrap_truncations: bool = True
    """GAE bootstraps a `max_turns` ending from the critic's value (DESIGN.md); off treats it as terminal (value 0), for budgets that are part of the task (docs/algorithms.md)."""
    value_coef: float = 0.5
    """Weight of the value loss in the summed loss; the critic has its own Adam, so its step size is critic.learning_rate."""
    baseline: str = "group"
    """Critic-free baseline of `grpo`: `group` (rollouts of the same seed) or `running` (per-role running mean, for competitive self-play)."""
    normalize_by: str = "agent"
    """Advantages are normalized within each `agent` or each `role` (team), never across all agents."""
    ptx_coef: float = 0.0
    """Weight of a supervised loss on scripted-expert demonstrations during RL (PPO-ptx); 0 turns it off."""
    ptx_batch_size: int = 16
    """Demonstrations per step of the PPO-ptx loss."""
    kl_coef: float = 0.02
    """Initial coefficient of the KL penalty to the frozen reference (the warm-started policy)."""
    target_kl: float = 0.05
    """Target KL per decision token; the coefficient adapts towards it (0 keeps it fixed)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (entropy is always tracked)."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold."""
    max_nonfinite_streak: int = 5
    """Abort after this many consecutive updates with a non-finite gradient (each one is skipped)."""


@dataclass
class CriticConfig:
    """The value model of critic-based algorithms (`mappo`, `ippo`); unused by `grpo`."""

    model: str = "tiny-critic"
    """Critic trunk: a preset (`tiny-critic`, `small-critic`: dense, random init), a saved critic folder, or an AutoModel folder or id (a policy checkpoint: a critic warm-started from the policy's trunk)."""
    learning_rate: float = 1e-3
    """Adam learning rate of the critic."""
    minibatches: int = 8
    """Critic steps per pass over an iteration's batch (whole teams per minibatch); the critic shares no weights with the policy, so it need not follow rl.minibatches, and a random-init critic needs many steps."""
    warmup_iterations: int = 0
    """RL iterations at the start that fit only the critic on the warm-started policy's own rollouts (the policy does not move; counted in the RL budget), so the first policy update already has a learned baseline."""
    state_view: str = "global"
    """What `mappo`'s critic reads: `global` (the state, then the agent's id), `own_last` / `own_team` (the state with the agent's line last / without teammates' lines), `with_own` (the agent's conversation with the state before each turn), `own_and_state` (two trunks whose values add: the agent's conversation, and the state then its id)."""


@dataclass
class CommsConfig:
    """Who shares observations with whom during rollouts (`comms.wrap`); `none` leaves the scenario as is."""

    topology: str = "none"
    """`none`, or a topology spec: full, empty, ring, line, star, grid, random:p=0.3,seed=1, small_world:k=4,p=0.1."""
    mode: str = "observation"
    """What travels: `observation` (each agent's latest observation and action), `message` (a "say" field agents may add to actions), `both`."""
    message_values: int = 16
    """Message modes: an agent may say one of the last this-many scenario entities it has seen."""
    drop: float = 0.0
    """Probability that a shared item is lost on its way."""
    delay: int = 0
    """Steps a shared item takes to arrive."""
    noise: float = 0.0
    """Probability that each character of a shared item is corrupted."""
    budget_chars: int = 0
    """Characters kept per shared item (0: an even share of the observation, 2048 / agents)."""
    seed: int = 0
    """Seed of the channel's faults (with the episode seed: identical seeds replay exactly)."""


@dataclass
class TrackingConfig:
    """MLflow tracking."""

    tracking_uri: str = "sqlite:///mlflow.db"
    """MLflow tracking URI; the default is a sqlite file in the working directory."""
    experiment: str = "marl"
    """MLflow experiment name."""
    run_name: str | None = None
    """MLflow run name (default: scenario-model-seed)."""
    artifact_location: str = "mlruns"
    """Artifact folder pinned for new experiments (a local path or a URI)."""
    transcripts: int = 8
    """Episode transcripts logged as artifacts per evaluation."""


@dataclass
class TrainConfig:
    """`marl train`: warm start by SFT, then on-policy RL, tracked in MLflow."""

    scenario: str = "tool_use"
    """Scenario name (see `marl scenarios`)."""
    agents: int | None = None
    """Number of agents in the scenario (default: the smallest count it supports)."""
    iterations: int = 200
    """RL iterations (collect a batch, update once); the RL wall-clock budget may stop earlier."""
    seed: int = 0
    """Seed of models, sampling and training task draws."""
    algo: str = "grpo"
    """RL algorithm: `grpo` (critic-free group baseline), `mappo` (centralized critic), `ippo` (independent critic)."""
    policy_mapping: str = "shared"
    """Which agents share a model: `shared` (one model, agent id in the prompt), `team` (one per team), `agent`."""
    train_split: str = "train"
    """Scenario split that training tasks come from."""
    eval_episodes: int = 100
    """Held-out episodes per evaluation split at the end of training (0 skips)."""
    eval_sampled: bool = False
    """Also evaluate with sampling at the policy temperature (`eval_sampled/<split>/...`): sturdier than greedy for comparing runs."""
    eval_splits: tuple[str, ...] | None = None
    """Evaluation splits at the end of training (default: every split of the scenario but `train_split`)."""
    output_dir: str = "runs"
    """Folder for checkpoints and the tokenizer cache."""
    config: str | None = None
    """Optional YAML file with the same fields; command-line flags override it."""
    # No flag: tyro cannot parse `dict[str, Any]` from the command line; YAML is the one way to set it.
    scenario_options: Annotated[dict[str, Any], tyro.conf.Suppress] = field(default_factory=dict)
    """Extra scenario options passed to `scenarios.make` (YAML only, e.g. `train_mix: [1, 0, 0]`)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    sft: WarmStartConfig = field(default_factory=WarmStartConfig)
    rl: RLConfig = field(default_factory=RLConfig)
    critic: CriticConfig = field(default_factory=CriticConfig)
    comms: CommsConfig = field(default_factory=CommsConfig)
    tracking: Annotated[TrackingConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=TrackingConfig)
    """MLflow settings; their flags have no prefix (`--tracking-uri`, `--experiment`, `--run-name`)."""

    def comms_channel(self) -> Any:
        """The `comms.ChannelConfig` of `comms.*` (the budget resolved for the agent count)."""
        from comms import ChannelConfig

        c = self.comms
        budget = c.budget_chars or max(64, 2048 // max(self.agents or 1, 1))
        return ChannelConfig(mode=c.mode, drop=c.drop, delay=c.delay, noise=c.noise, budget_chars=budget, seed=c.seed,
                             message_values=c.message_values)

    def validate(self) -> TrainConfig:
        """Check every field; raise ConfigError naming the field and the fix."""
        import scenarios

        if self.scenario not in scenarios.names():
            raise ConfigError(f"scenario={self.scenario!r} is unknown; choose one of {scenarios.names()}")
        low, high = scenarios.info(self.scenario).agent_range
        if self.agents is None:
            self.agents = low
        if self.eval_splits is None:
            self.eval_splits = tuple(s for s in scenarios.info(self.scenario).splits if s != self.train_split)
        if not isinstance(self.agents, int) or not low <= self.agents <= high:
            raise ConfigError(f"agents={self.agents} is outside {self.scenario}'s range [{low}, {high}]")
        splits = scenarios.info(self.scenario).splits
        for split in (self.train_split, *self.eval_splits):
            if split not in splits:
                raise ConfigError(f"split {split!r} is not a split of {self.scenario}; choose from {list(splits)}")
        if "split" in self.scenario_options:
            raise ConfigError("scenario_options must not set 'split'; use train_split / eval_splits")
        try:
            scenarios.make(self.scenario, n_agents=self.agents, **self.scenario_options)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"scenario_options for {self.scenario}: {err}") from err
        if self.comms.topology == "none" and self.comms.mode != "observation":
            raise ConfigError(f"comms.mode={self.comms.mode!r} needs a graph to send on: set comms.topology "
                              "(e.g. ring or full)")
        if self.comms.topology != "none":
            try:
                self.comms_channel()
                comms_topology(self.comms.topology)
            except ValueError as err:
                raise ConfigError(f"comms: {err}") from err
        if self.policy.device != "auto" and not self.policy.device.startswith(("cpu", "cuda", "mps")):
            raise ConfigError(f"policy.device={self.policy.device!r}: use auto, cpu, cuda, cuda:N or mps")
        from marl import algorithms
        from marl.critic import STATE_VIEWS
        from marl.policy_map import MAPPING_MODES

        try:
            algo = algorithms.get(self.algo)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if self.policy_mapping not in MAPPING_MODES:
            raise ConfigError(f"policy_mapping={self.policy_mapping!r} is unknown; choose one of {list(MAPPING_MODES)}")
        _positive(self, "iterations", allow_zero=True)
        _positive(self, "eval_episodes", allow_zero=True)
        p, s, r = self.policy, self.sft, self.rl
        _positive(p, "vocab_size", prefix="policy.")
        _positive(p, "max_new_tokens", prefix="policy.")
        _positive(p, "temperature", prefix="policy.")
        if p.router_aux_loss_coef < 0:
            raise ConfigError("policy.router_aux_loss_coef must be >= 0")
        if s.seconds < 0:
            raise ConfigError("sft.seconds must be >= 0 (0 skips supervised fine-tuning)")
        _positive(s, "batch_size", prefix="sft.")
        if not 0.0 <= s.demo_noise < 1.0:
            raise ConfigError(f"sft.demo_noise={s.demo_noise} must lie in [0, 1): it is the share of turns played "
                              "at random, and the expert must play some")
        if not 0.0 <= s.lr_decay_fraction <= 1.0:
            raise ConfigError(f"sft.lr_decay_fraction={s.lr_decay_fraction} must lie in [0, 1]")
        _positive(s, "learning_rate", prefix="sft.")
        if s.seconds > 0:
            _positive(s, "episodes", prefix="sft.")
        if r.baseline not in ("group", "running"):
            raise ConfigError(f"rl.baseline={r.baseline!r}: choose 'group' or 'running'")
        if algo.needs_groups and r.baseline == "group" and r.group_size < 2:
            raise ConfigError(f"rl.group_size={r.group_size}: a group baseline needs at least 2 rollouts per seed "
                              "(or use rl.baseline running, or a critic-based algo)")
        for name in ("tasks_per_iteration", "group_size", "learning_rate", "epochs", "minibatches", "max_grad_norm",
                     "max_nonfinite_streak", "ptx_batch_size", "sequence_clip_eps"):
            _positive(r, name, prefix="rl.")
        if r.ratio not in ("token", "sequence"):
            raise ConfigError(f"rl.ratio={r.ratio!r}: choose 'token' (PPO) or 'sequence' (GSPO)")
        if r.normalize_by not in ("agent", "role"):
            raise ConfigError(f"rl.normalize_by={r.normalize_by!r}: choose 'agent' or 'role'")
        if not 0 <= r.gamma <= 1 or not 0 <= r.gae_lambda <= 1:
            raise ConfigError(f"rl.gamma={r.gamma} and rl.gae_lambda={r.gae_lambda} must lie in [0, 1]")
        for name in ("value_coef", "ptx_coef"):
            if getattr(r, name) < 0 or not math.isfinite(getattr(r, name)):
                raise ConfigError(f"rl.{name} must be a finite number >= 0")
        if r.ptx_coef > 0 and s.episodes <= 0:
            raise ConfigError("rl.ptx_coef > 0 trains on demonstrations: set sft.episodes > 0")
        if algo.critic is not None and r.value_coef == 0:
            raise ConfigError(f"algo={self.algo} has a critic; rl.value_coef=0 would never train it (use > 0)")
        if algo.critic is not None and r.baseline != "group":
            raise ConfigError(f"rl.baseline={r.baseline!r} is for critic-free algos; {self.algo} uses its critic")
        if r.sequence_clip_eps >= 1:
            raise ConfigError(f"rl.sequence_clip_eps={r.sequence_clip_eps} must be < 1 (GSPO uses ~4e-4)")
        _positive(self.critic, "learning_rate", prefix="critic.")
        if self.critic.warmup_iterations < 0:
            raise ConfigError(f"critic.warmup_iterations={self.critic.warmup_iterations} must be >= 0")
        if self.critic.warmup_iterations > 0 and algo.critic is None:
            raise ConfigError(f"critic.warmup_iterations={self.critic.warmup_iterations} warms a critic, and "
                              f"algo={self.algo} has none: use mappo or ippo, or set it to 0")
        if self.critic.warmup_iterations >= self.iterations > 0:
            raise ConfigError(f"critic.warmup_iterations={self.critic.warmup_iterations} leaves no policy update in "
                              f"iterations={self.iterations}: lower it or raise iterations")
        if self.critic.minibatches < 1:
            raise ConfigError(f"critic.minibatches={self.critic.minibatches} must be >= 1")
        if self.critic.state_view not in ("global", *STATE_VIEWS):
            raise ConfigError(f"critic.state_view={self.critic.state_view!r}: choose global or one of {list(STATE_VIEWS)}")
        if self.critic.state_view != "global" and not (algo.critic is not None and algo.centralized_critic):
            raise ConfigError(f"critic.state_view={self.critic.state_view!r} shapes a centralized critic's input; "
                              f"algo={self.algo} has none (use mappo, or leave it global)")
        if r.seconds < 0:
            raise ConfigError("rl.seconds must be >= 0")
        if not 0 < r.clip_eps < 1:
            raise ConfigError(f"rl.clip_eps={r.clip_eps} must lie in (0, 1); 0.2 is standard")
        for name in ("kl_coef", "target_kl", "entropy_coef"):
            if getattr(r, name) < 0 or not math.isfinite(getattr(r, name)):
                raise ConfigError(f"rl.{name} must be a finite number >= 0")
        if r.minibatches > r.tasks_per_iteration * r.group_size:
            raise ConfigError("rl.minibatches exceeds the episodes per iteration; lower rl.minibatches")
        return self


def _positive(obj: Any, name: str, prefix: str = "", allow_zero: bool = False) -> None:
    value = getattr(obj, name)
    ok = value >= 0 if allow_zero else value > 0
    if not ok or (isinstance(value, float) and not math.isfinite(value)):
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(f"{prefix}{name}={value!r} must be {bound}")


def comms_topology(spec: str) -> Any:
    """The parsed `comms.Topology` of a `--comms.topology` string."""
    from comms import Topology

    return Topology.parse(spec)
