"""The sections of a training config: policy, warm start, RL, critic, comms and tracking (opponents: `opponents`).

Each section is a dataclass whose fields carry their default and a one-line docstring (tyro turns
them into `marl train` flags whose help is that docstring) and checks its own fields when it is built
(`__post_init__`) or asked again (`validate()`, after fields were changed in Python), raising
`ConfigError` with a message that says what to change. Checks that span sections (an algorithm and
its critic, a scenario and its agent count) belong to `marl.config.train.TrainConfig`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from marl.config.checks import (
    ConfigError,
    SelfChecking,
    finite_non_negative,
    one_of,
    positive,
    require,
    within,
)
from marl.config.choices import (
    Baseline,
    CommsMode,
    Dtype,
    ExploreUnit,
    NormalizeBy,
    Ratio,
    StateView,
    options,
)
from scenarios.base import EVAL_SEED_BLOCK

OBSERVATION_CHARS = 2048
"""Characters of an observation (the scenarios' `max_obs_length`) that shared items split evenly by default."""
MIN_ITEM_CHARS = 64
"""The least a shared item keeps when the even share would be smaller."""


@dataclass
class PolicyConfig(SelfChecking):
    """The LLM MoE policy and its tokenizer."""

    model: str = "tiny-moe"
    """Preset name (`tiny-moe`, `small-moe`), a local model folder or checkpoint (`runs:/<run_id>[/checkpoint]` too), or a hub id (needs network)."""
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
    lean_decoding: bool = True
    """Decode through the lean Qwen3-MoE forward (the model's logits to float tolerance, less per-step overhead); off, or another model family, runs the model's own forward each step."""
    device: str = "auto"
    """Torch device of the policy: `auto` (cuda when available, else cpu), `cpu`, `cuda`, `cuda:1`, ..."""
    dtype: Dtype = "auto"
    """Weights' dtype: `auto` (bfloat16 for a frozen LoRA base on a GPU that supports it, else float32), `float32`, `bfloat16`."""

    def validate(self) -> PolicyConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        positive("policy.vocab_size", self.vocab_size)
        positive("policy.tokenizer_episodes", self.tokenizer_episodes)
        positive("policy.max_new_tokens", self.max_new_tokens)
        positive("policy.temperature", self.temperature)
        require(self.router_aux_loss_coef >= 0, "policy.router_aux_loss_coef must be >= 0")
        one_of("policy.dtype", self.dtype, options(Dtype))
        require(self.device == "auto" or self.device.startswith(("cpu", "cuda", "mps")),
                f"policy.device={self.device!r}: use auto, cpu, cuda, cuda:N or mps")
        return self


@dataclass
class WarmStartConfig(SelfChecking):
    """Supervised fine-tuning on scripted-expert demonstrations before RL (a plain PyTorch loop on action tokens)."""

    seconds: float = 270.0
    """Wall-clock budget of supervised fine-tuning; 0 skips it."""
    episodes: int = 6000
    """Scripted-expert demonstration episodes drawn from training seeds."""
    batch_size: int = 16
    """Conversations per optimizer step (16 learns more than 32 in the same budget on a 2-core CPU: docs/results/2026-11-30-tool-use-sft-batch-size.md)."""
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
    max_length: int = 2048
    """Longest demonstration in tokens; longer ones stop the run (truncating them would train on cut episodes)."""

    def validate(self) -> WarmStartConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        require(self.seconds >= 0, "sft.seconds must be >= 0 (0 skips supervised fine-tuning)")
        positive("sft.batch_size", self.batch_size)
        require(0.0 <= self.demo_noise < 1.0, f"sft.demo_noise={self.demo_noise} must lie in [0, 1): it is the share "
                "of turns played at random, and the expert must play some")
        within("sft.lr_decay_fraction", self.lr_decay_fraction, 0.0, 1.0)
        positive("sft.learning_rate", self.learning_rate)
        positive("sft.warmup_steps", self.warmup_steps, allow_zero=True)
        positive("sft.max_steps", self.max_steps)
        positive("sft.max_length", self.max_length)
        if self.seconds > 0:
            positive("sft.episodes", self.episodes)
        return self


@dataclass
class RLConfig(SelfChecking):
    """On-policy RL: PPO-clip on the agent's own tokens; the advantages come from `algo`."""

    seconds: float = 180.0
    """Wall-clock budget of the RL phase; it stops at `iterations` or this, whichever comes first."""
    tasks_per_iteration: int = 16
    """Distinct task seeds per iteration."""
    rollout_rows: int = 256
    """Most agents (envs x agents) a rollout plays at once; more envs play in consecutive parts, so its KV caches stay bounded (0: all at once)."""
    group_size: int = 8
    """Rollouts per task seed; `grpo`'s group baseline compares them (needs >= 2), critic-based algos just see more data."""
    learning_rate: float = 1e-4
    """Adam learning rate of the RL phase (higher rates drifted far past the KL target on `tool_use`: docs/results/2026-11-30-tool-use-rl-vs-sft.md)."""
    epochs: int = 1
    """Passes over each iteration's batch."""
    minibatches: int = 2
    """Minibatches per epoch (the PPO ratio departs from 1 from the second minibatch on)."""
    micro_batch_tokens: int = 8192
    """Most padded tokens per training forward: a minibatch is scored in micro-batches this size whose gradients add up to the minibatch's (the MoE load-balancing term's approximately), so the update's memory is bounded by it, not by the batch (0: one forward per minibatch)."""
    clip_eps: float = 0.2
    """PPO clip range of the token-level importance ratio."""
    ratio: Ratio = "token"
    """Importance ratio: `token` (PPO) or `sequence` (GSPO: one length-normalized ratio per action, steadier for MoE)."""
    sequence_clip_eps: float = 0.0004
    """Clip range of the sequence-level ratio (GSPO uses ranges this small)."""
    gamma: float = 1.0
    """Discount per turn in GAE (critic-based algorithms)."""
    gae_lambda: float = 0.95
    """GAE lambda (critic-based algorithms)."""
    value_coef: float = 0.5
    """Weight of the value loss in the summed loss; the critic has its own Adam, so its step size is critic.learning_rate."""
    baseline: Baseline = "group"
    """Critic-free baseline of `grpo`: `group` (rollouts of the same seed) or `running` (per-role running mean, for competitive self-play)."""
    normalize_by: NormalizeBy = "agent"
    """Advantages are normalized within each `agent` or each `role` (team), never across all agents."""
    ptx_coef: float = 0.0
    """Weight of a supervised loss on scripted-expert demonstrations during RL (PPO-ptx); 0 turns it off."""
    ptx_batch_size: int = 16
    """Demonstrations per step of the PPO-ptx loss."""
    kl_coef: float = 0.01
    """Initial coefficient of the KL penalty to the frozen reference (the warm-started policy)."""
    target_kl: float = 0.1
    """Target KL per decision token; the coefficient adapts towards it (0 keeps it fixed)."""
    kl_ceiling: float = 10.0
    """The adapting coefficient never grows past this many times rl.kl_coef (1 lets it only fall)."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (entropy is always tracked)."""
    explore: float = 0.0
    """Share of training actions whose first real decision (the first token their grammar leaves open: which tool, which verb) is drawn uniformly among the allowed ones instead of from the policy; finds actions the warm start gives almost no probability, e.g. ones its demonstrations never show. Recorded with the policy's own log-probs (the update treats them as its samples); evaluation and frozen pool opponents never explore. Per action unless rl.explore_unit says episode."""
    explore_unit: ExploreUnit = "action"
    """`action`: rl.explore is each action's chance (an episode of many actions, a team's, explores more often than one agent's); `episode`: rl.explore is the expected explored actions per episode, each action's chance being it over the learners' actions per episode in the previous batch (it holds as a curriculum grows the team; the first iteration explores nothing while it measures)."""
    max_grad_norm: float = 1.0
    """Gradient clipping threshold."""
    max_nonfinite_streak: int = 5
    """Abort after this many consecutive updates with a non-finite gradient (each one is skipped)."""

    def validate(self) -> RLConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        one_of("rl.baseline", self.baseline, options(Baseline))
        one_of("rl.ratio", self.ratio, options(Ratio), " is not an importance ratio (token: PPO, sequence: GSPO)")
        one_of("rl.normalize_by", self.normalize_by, options(NormalizeBy))
        positive("rl.micro_batch_tokens", self.micro_batch_tokens, allow_zero=True)
        positive("rl.rollout_rows", self.rollout_rows, allow_zero=True)
        for name in ("tasks_per_iteration", "group_size", "learning_rate", "epochs", "minibatches", "max_grad_norm",
                     "max_nonfinite_streak", "ptx_batch_size", "sequence_clip_eps"):
            positive(f"rl.{name}", getattr(self, name))
        require(0 <= self.gamma <= 1 and 0 <= self.gae_lambda <= 1,
                f"rl.gamma={self.gamma} and rl.gae_lambda={self.gae_lambda} must lie in [0, 1]")
        for name in ("value_coef", "ptx_coef", "kl_coef", "target_kl", "entropy_coef"):
            finite_non_negative(f"rl.{name}", getattr(self, name))
        require(0 <= self.explore < 1, f"rl.explore={self.explore} must lie in [0, 1): the share of actions (or "
                "episodes, rl.explore_unit) that explore (0 turns it off; 0.1 found a never-demonstrated tool call for "
                "one agent, and a team needs less per action: docs/algorithms.md)")
        one_of("rl.explore_unit", self.explore_unit, options(ExploreUnit))
        require(self.kl_ceiling >= 1, f"rl.kl_ceiling={self.kl_ceiling} must be >= 1 (a multiple of rl.kl_coef)")
        require(self.sequence_clip_eps < 1, f"rl.sequence_clip_eps={self.sequence_clip_eps} must be < 1 (GSPO uses ~4e-4)")
        require(self.seconds >= 0, "rl.seconds must be >= 0")
        require(0 < self.clip_eps < 1, f"rl.clip_eps={self.clip_eps} must lie in (0, 1); 0.2 is standard")
        require(self.minibatches <= self.tasks_per_iteration * self.group_size,
                "rl.minibatches exceeds the episodes per iteration; lower rl.minibatches")
        return self


@dataclass
class CriticConfig(SelfChecking):
    """The value model of critic-based algorithms (`mappo`, `ippo`); unused by `grpo`."""

    model: str = "tiny-critic"
    """Critic trunk: a preset (`tiny-critic`, `small-critic`: dense, random init), a saved critic folder, or an AutoModel folder or id (a policy checkpoint: a critic warm-started from the policy's trunk)."""
    learning_rate: float = 1e-3
    """Adam learning rate of the critic."""
    minibatches: int = 8
    """Critic steps per pass over an iteration's batch (whole teams per minibatch); the critic shares no weights with the policy, so it need not follow rl.minibatches, and a random-init critic needs many steps."""
    warmup_iterations: int = 0
    """RL iterations at the start that fit only the critic on the warm-started policy's own rollouts (the policy does not move; counted in the RL budget), so the first policy update already has a learned baseline."""
    state_view: StateView = "global"
    """What `mappo`'s critic reads: `global` (the state, then the agent's id), `own_last` / `own_team` (the state with the agent's line last / without teammates' lines), `with_own` (the agent's conversation with the state before each turn), `own_and_state` (two trunks whose values add: the agent's conversation, and the state then its id)."""

    def validate(self) -> CriticConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        positive("critic.learning_rate", self.learning_rate)
        require(self.warmup_iterations >= 0, f"critic.warmup_iterations={self.warmup_iterations} must be >= 0")
        positive("critic.minibatches", self.minibatches)
        one_of("critic.state_view", self.state_view, options(StateView))
        return self


@dataclass
class CommsConfig(SelfChecking):
    """Who shares observations with whom during rollouts (`comms.wrap`); `none` leaves the scenario as is."""

    topology: str = "none"
    """`none`, or a topology spec: full, empty, ring, line, star, grid, random:p=0.3,seed=1, small_world:k=4,p=0.1."""
    mode: CommsMode = "observation"
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
    """Characters kept per shared item (0: an even share of an observation's room, `OBSERVATION_CHARS` / agents, at least `MIN_ITEM_CHARS`)."""
    seed: int = 0
    """Seed of the channel's faults (with the episode seed: identical seeds replay exactly)."""

    def item_budget(self, agents: int) -> int:
        """Characters kept per shared item for a team of `agents`: `budget_chars`, or the even share."""
        return self.budget_chars or max(MIN_ITEM_CHARS, OBSERVATION_CHARS // max(agents, 1))

    def channel(self, agents: int) -> Any:
        """The `comms.ChannelConfig` of this section for a team of `agents` (comms checks its own fields)."""
        from comms import ChannelConfig

        try:
            return ChannelConfig(mode=self.mode, drop=self.drop, delay=self.delay, noise=self.noise,
                                 budget_chars=self.item_budget(agents), seed=self.seed,
                                 message_values=self.message_values)
        except ValueError as err:
            raise ConfigError(f"comms: {err}") from err

    def validate(self) -> CommsConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        one_of("comms.mode", self.mode, options(CommsMode), " is not a channel mode")
        require(self.topology != "none" or self.mode == "observation",
                f"comms.mode={self.mode!r} needs a graph to send on: set comms.topology (e.g. ring or full)")
        if self.topology != "none":
            from comms import Topology

            try:
                Topology.parse(self.topology)
            except ValueError as err:
                raise ConfigError(f"comms.topology: {err}") from err
            self.channel(agents=1)
        return self


@dataclass
class TrackingConfig(SelfChecking):
    """MLflow tracking."""

    tracking_uri: str | None = None
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db in the working directory)."""
    experiment: str | None = None
    """MLflow experiment name (default: $MLFLOW_EXPERIMENT_NAME, else marl)."""
    run_name: str | None = None
    """MLflow run name (default: scenario-model-seed)."""
    artifact_location: str = "mlruns"
    """Artifact folder pinned for new experiments (a local path or a URI)."""
    transcripts: int = 8
    """Episode transcripts logged as artifacts per evaluation."""
    log_model: bool = True
    """Log the final checkpoint as the run's MLflow model `policy` (pyfunc: observation text in, action text out)."""
    system_metrics: bool = False
    """Also sample CPU, memory, disk and network use into the run's `system/...` metrics (MLflow's monitor, every 10 s)."""

    def validate(self) -> TrackingConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        require(self.tracking_uri is None or bool(self.tracking_uri),
                "tracking_uri must not be empty (e.g. sqlite:///mlflow.db)")
        require(self.experiment is None or bool(self.experiment), "experiment must not be empty")
        positive("transcripts", self.transcripts, allow_zero=True)
        return self


DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "marl"


def tracking_uri_or_default(given: str | None) -> str:
    """The tracking URI a command uses: the one given, else $MLFLOW_TRACKING_URI (as MLflow reads it), else the
    local sqlite file."""
    return given or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def experiment_or_default(given: str | None) -> str:
    """The experiment a command uses: the one given, else $MLFLOW_EXPERIMENT_NAME, else `marl`."""
    return given or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_EXPERIMENT


@dataclass
class CheckpointConfig(SelfChecking):
    """Resume points (everything a killed run needs to continue exactly where it was) and evaluations during training."""

    every: int = 10
    """RL iterations between resume points (one also comes after SFT and at the end; 0: none at all)."""
    keep: int = 2
    """Resume points kept on disk, the newest (older ones are deleted once a newer one is complete)."""
    log_to_mlflow: bool = False
    """Also log every resume point as the run's artifact `resume/it-N`, so `--resume runs:/<run_id>` works where the run's folder is not (MLflow keeps every one: they are not pruned there)."""
    eval_every: int = 0
    """RL iterations between held-out evaluations during training (0: only the final one); the best keeps its checkpoint in `<run>/best/`."""
    eval_episodes: int = 20
    """Held-out episodes per evaluation split in each evaluation during training (the first seeds of the split)."""
    eval_skip_seeds: int = 0
    """Held-out seeds of each split passed over before those evaluations take theirs (seeds no earlier run played)."""

    def validate(self) -> CheckpointConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        positive("every", self.every, allow_zero=True)
        positive("eval_every", self.eval_every, allow_zero=True)
        positive("eval_episodes", self.eval_episodes)
        positive("eval_skip_seeds", self.eval_skip_seeds, allow_zero=True)
        require(self.eval_skip_seeds + self.eval_episodes <= EVAL_SEED_BLOCK,
                f"eval_skip_seeds + eval_episodes = {self.eval_skip_seeds + self.eval_episodes}: a split has "
                f"{EVAL_SEED_BLOCK:,} held-out seeds; lower --checkpoint.eval-skip-seeds")
        require(isinstance(self.keep, int) and self.keep >= 1, f"keep={self.keep}: keep at least 1 resume point")
        return self
