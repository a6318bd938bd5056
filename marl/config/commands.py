"""The configs of `marl eval` and `marl compare`: fields with defaults and docstrings, checked when built.

Defaults that `marl train` also has (the model preset, the output folder, the tracking store) are
read from `marl train`'s own fields, so each default lives in one place.
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.config.checks import SelfChecking, one_of, positive, require, within
from marl.config.choices import EvalPolicy, options
from marl.config.sections import PolicyConfig, TrackingConfig
from marl.config.train import TrainConfig


@dataclass
class EvalConfig(SelfChecking):
    """`marl eval`: held-out evaluation of a checkpoint or a baseline policy."""

    checkpoint: str | None = None
    """Checkpoint folder printed by `marl train`, or `runs:/<run_id>[/checkpoint|/best]` (needed unless --policy is a baseline)."""
    policy: EvalPolicy = "checkpoint"
    """`checkpoint`, or a baseline: `expert` (scripted), `random` (uniform valid action), `untrained` (random-init LLM)."""
    scenario: str | None = None
    """Scenario name (default: the checkpoint's, else tool_use)."""
    other_scenario: bool = False
    """Evaluate a checkpoint on a scenario other than the one it was trained on (its tokenizer may split that scenario's entities)."""
    split: str = "basic"
    """Evaluation split (held-out seeds)."""
    episodes: int = 200
    """Episodes to play: N consecutive held-out seeds of the split, from `skip_seeds` on."""
    skip_seeds: int = 0
    """Held-out seeds of the split to skip before the first one played. Development evaluations (and `marl train`'s own) use the first ones; an acceptance evaluation skips past them to seeds nobody tuned on."""
    seed: int = 0
    """Sampling seed (only used with --no-greedy) and seed of the untrained model."""
    agents: int | None = None
    """Agent count (default: the checkpoint's, else the scenario's smallest)."""
    greedy: bool = True
    """Greedy decoding (sampled at the policy temperature otherwise)."""
    comms_topology: str | None = None
    """Observation sharing during evaluation (default: the checkpoint's; `none` turns it off)."""
    comms_drop: float | None = None
    """Message drop probability during evaluation (default: the checkpoint's)."""
    comms_delay: int | None = None
    """Message delay in steps during evaluation (default: the checkpoint's)."""
    comms_noise: float | None = None
    """Per-character corruption probability during evaluation (default: the checkpoint's)."""
    scripted_team: str | None = None
    """A team the scripted expert plays while the policy plays the rest (e.g. `prey`: trained predators against expert prey)."""
    transcripts: str | None = None
    """Also write every played agent-episode (seed, agent, outcome, return, transcript) to this JSON-lines file."""
    model: str = PolicyConfig.model
    """Model preset for `--policy untrained`."""
    output_dir: str = TrainConfig.output_dir
    """Folder of the tokenizer cache for `--policy untrained`."""
    device: str = PolicyConfig.device
    """Torch device of the evaluated policy: `auto` (cuda when available, else cpu), `cpu`, `cuda`, `cuda:1`, ..."""
    track: bool = True
    """Log the evaluation as its own MLflow run (a child of the training run where that run is in the same store)."""
    tracking_uri: str | None = TrackingConfig.tracking_uri
    """MLflow tracking URI of the evaluation run and of `runs:/` checkpoints (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)."""
    experiment: str | None = None
    """MLflow experiment of the evaluation run (default: the training run's, else $MLFLOW_EXPERIMENT_NAME, else marl)."""

    def validate(self) -> EvalConfig:
        """Check the flags that need no scenario; raise ConfigError naming the flag and the fix."""
        require(self.episodes > 0, "--episodes must be > 0")
        require(self.skip_seeds >= 0, f"--skip-seeds {self.skip_seeds} must be >= 0")
        one_of("--policy", self.policy, options(EvalPolicy))
        require(self.policy != "checkpoint" or bool(self.checkpoint),
                "pass --checkpoint PATH (printed by `marl train`) or a baseline with --policy")
        require(self.agents is None or self.agents > 0, f"--agents {self.agents} must be > 0")
        for name in ("comms_drop", "comms_noise"):
            value = getattr(self, name)
            if value is not None:
                within(f"--{name.replace('_', '-')}", value, 0.0, 1.0)
        if self.comms_delay is not None:
            positive("--comms-delay", self.comms_delay, allow_zero=True)
        PolicyConfig(model=self.model, device=self.device)  # the same checks as training's
        return self


@dataclass
class CompareConfig(SelfChecking):
    """`marl compare`: runs side by side: the parameters that differ, final and best figures, groups over seeds, curves."""

    experiment: str | None = TrackingConfig.experiment
    """MLflow experiment whose runs to compare (default: $MLFLOW_EXPERIMENT_NAME, else marl)."""
    tracking_uri: str | None = TrackingConfig.tracking_uri
    """MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db)."""
    filter: str = ""
    """MLflow search filter on the experiment's runs, e.g. "params.algo = 'mappo' and attributes.status = 'FINISHED'"."""
    run_ids: tuple[str, ...] = ()
    """Compare exactly these runs (any experiment) instead of searching one."""
    metrics: tuple[str, ...] = ()
    """Metrics to tabulate (default: every eval/.../success_rate the runs logged, else rollout/success_rate)."""
    group_by: tuple[str, ...] | None = None
    """Parameters whose values make a group, e.g. `algo rl.learning_rate` (default: every parameter that differs but the seed and run-specific ones)."""
    curves: tuple[str, ...] = ("rollout/success_rate", "rollout/return_mean", "train/kl", "train/entropy")
    """Metrics drawn as overlaid learning curves, one PNG each (groups' means over their runs)."""
    format: str = "md"
    """Table format on stdout: `md`, `csv` (one row per run) or `json`."""
    output: str | None = None
    """Also write the tables (md, csv, json) and the curve PNGs into this folder."""
    log_run: bool = True
    """Keep the comparison as an MLflow run of the experiment (tables and curves as artifacts, tag marl.comparison)."""
    max_runs: int = 200
    """Most runs to search."""

    def validate(self) -> CompareConfig:
        """Check the flags; raise ConfigError naming the flag and the fix."""
        positive("--max-runs", self.max_runs)
        one_of("--format", self.format, ("md", "csv", "json"))
        return self
