"""Configuration: typed dataclasses (the one source of every default), self-validation, YAML in, flat params out.

- `choices`: the closed sets of choices as `Literal` types, and what each algorithm needs.
- `checks`: `ConfigError` and the checks every section uses.
- `sections`: policy, warm start, RL, critic, comms, resume points, tracking.
- `opponents`: the opponent model and the opponent pool.
- `guards`: alerts on a run going wrong, and the faults it tolerates.
- `lora`: LoRA adapters per policy on one frozen base.
- `curriculum`: curriculum stages and the rules that move a run between them.
- `train`: `TrainConfig`, and the checks that span sections.
- `commands`: the configs of `marl eval` and `marl compare`.
- `files`: YAML into configs (`safe_load` only), configs into flat MLflow params.

It leaves out building anything from a config (`marl.run.build`) and the command line (`marl.cli`).
"""

from marl.config.checks import ConfigError
from marl.config.commands import CompareConfig, EvalConfig
from marl.config.curriculum import CurriculumConfig
from marl.config.guards import GuardsConfig
from marl.config.lora import LoraConfig
from marl.config.opponents import OpponentModelConfig, OpponentPoolConfig
from marl.config.sections import (
    CheckpointConfig,
    CommsConfig,
    CriticConfig,
    PolicyConfig,
    RLConfig,
    TrackingConfig,
    WarmStartConfig,
)
from marl.config.train import TrainConfig

__all__ = ["CheckpointConfig", "CommsConfig", "CompareConfig", "ConfigError", "CriticConfig", "CurriculumConfig", "EvalConfig", "GuardsConfig", "LoraConfig",
           "OpponentModelConfig",
           "OpponentPoolConfig", "PolicyConfig", "RLConfig", "TrackingConfig", "TrainConfig", "WarmStartConfig"]
