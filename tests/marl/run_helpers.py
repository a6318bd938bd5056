"""A training config that exercises every stage in seconds, shared by the end-to-end run tests.

It lies beside the tests that import it: pytest puts this folder (it has no `__init__.py`) on the path.
"""

from functools import partial
from pathlib import Path

import numpy as np

import scenarios
from marl.config import TrainConfig
from marl.run.build import build_policy


def tiny(tmp_path, **fields) -> TrainConfig:
    """A run that exercises every stage in seconds.

    Budgets are in steps and the device is the CPU, so the seeded run is the same on a busy CI box and
    on a GPU machine (CUDA draws other samples: a grpo group can then come out all-failure, leaving no
    update to check). CUDA is covered by the policy-level tests and `benchmarks/gpu_smoke.sh`.
    """
    cfg = TrainConfig(iterations=1, eval_episodes=2, output_dir=str(tmp_path / "runs"), **fields)
    cfg.sft.seconds, cfg.sft.max_steps, cfg.sft.episodes, cfg.sft.batch_size = 600.0, 12, 16, 4
    cfg.policy.device = "cpu"
    cfg.policy.tokenizer_episodes = 40
    cfg.rl.tasks_per_iteration, cfg.rl.group_size = 2, 2
    cfg.tracking.tracking_uri = f"sqlite:///{tmp_path}/mlflow.db"
    cfg.tracking.artifact_location = str(tmp_path / "mlruns")
    cfg.tracking.transcripts = 1
    cfg.tracking.log_model = False  # the MLflow model costs seconds per run; tests that need it turn it on
    return cfg


def game_policy(folder, tokenizer_episodes: int = 100, split: str = "train", **options):
    """repeated_game with two agents (`options`: the scenario's): its config, env factory, tokenizer and a
    tiny CPU policy, seeded."""
    cfg = TrainConfig(scenario="repeated_game", agents=2, seed=0, scenario_options=dict(options))
    cfg.policy.tokenizer_episodes = tokenizer_episodes
    cfg.policy.device = "cpu"
    make_env = partial(scenarios.make, "repeated_game", n_agents=2, split=split, **options)
    tokenizer, _, policy = build_policy(cfg, make_env, Path(folder), np.random.default_rng(0))
    return cfg, make_env, tokenizer, policy
