"""The command line: `marl scenarios`, `marl train`, `marl eval`, `marl compare`.

- `main`: dispatch, `marl scenarios` and `marl train` (flags over a YAML file over the defaults).
- `eval`: `marl eval`, a checkpoint or a baseline on held-out seeds.
- `compare`: `marl compare`, the runs of an MLflow experiment side by side.

Flags are the config dataclasses' fields (`marl.config`), read by tyro, so `--help` is their
docstrings. It leaves out building parts (`marl.run.build`) and training (`marl.run.train`).
"""

from marl.cli.main import main, parse_train_args

__all__ = ["main", "parse_train_args"]
