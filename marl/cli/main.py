"""The `marl` command line: `scenarios`, `train`, `eval`, `compare`.

Flags come from the config dataclasses through tyro, so `--help` shows each field's docstring.
`marl train --config FILE.yaml` reads defaults from YAML (safe_load), and flags override them.
Errors in configs or inputs exit with status 2 and a message that says what to change.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys

import tyro

from marl.config import CompareConfig, ConfigError, EvalConfig, TrainConfig
from marl.config.checks import deferred_checks
from marl.config.files import REMOVED_KEYS, load_yaml
from marl.engine.errors import NonFiniteError
from marl.run.checkpoint import CheckpointError

USAGE = """usage: marl {scenarios,train,eval,compare} [--help]

  scenarios   list the scenarios with their kind, agent range and description
  train       SFT warm start + RL on a scenario, tracked in MLflow
  eval        evaluate a checkpoint (or a baseline) on held-out seeds; prints one JSON line
  compare     table of the runs of an MLflow experiment
"""


def _scenarios() -> int:
    import scenarios

    for name in scenarios.names():
        info = scenarios.info(name)
        low, high = info.agent_range
        print(f"{name:<16} {info.kind:<12} agents {low}-{high:<4} {info.description}")
    return 0


def parse_train_args(argv: list[str]) -> TrainConfig:
    """`marl train` flags over the YAML file of `--config` (if any) over the dataclass defaults."""
    finder = argparse.ArgumentParser(add_help=False)
    finder.add_argument("--config")
    known, _ = finder.parse_known_args(argv)  # both `--config FILE` and `--config=FILE`
    _refuse_removed_flags(argv)
    # Checked once, whole: flags may make a file's values valid, and a value's message names its field.
    with deferred_checks():
        default = load_yaml(known.config, check=False) if known.config else TrainConfig()
        cfg = tyro.cli(TrainConfig, default=default, args=argv, prog="marl train")
    return cfg.validate()


def _refuse_removed_flags(argv: list[str]) -> None:
    """A flag of a removed config key (`--rl.x`, `--rl.no-x`) fails saying what replaced it."""
    for key, why in REMOVED_KEYS.items():
        section, _, name = key.rpartition(".")
        dashed = name.replace("_", "-")
        flags = {f"--{section}.{dashed}", f"--{section}.no-{dashed}"}
        if any(arg.split("=", 1)[0].replace("_", "-") in flags for arg in argv):  # tyro takes both spellings
            raise ConfigError(f"--{section}.{dashed} was removed: {why}")


def _train(argv: list[str]) -> int:
    cfg = parse_train_args(argv)
    from marl.run.train import train

    train(cfg)
    return 0


def _eval(argv: list[str]) -> int:
    from marl.cli.eval import run_eval, track_eval

    args = tyro.cli(EvalConfig, args=argv, prog="marl eval")
    report = run_eval(args)
    if args.track:
        report["run_id"] = track_eval(args, report)
    print(json.dumps(report, sort_keys=True))
    return 0


def _compare(argv: list[str]) -> int:
    from marl.cli.compare import run_compare

    args = tyro.cli(CompareConfig, args=argv, prog="marl compare")
    text, run_id = run_compare(args)
    print(text, end="")
    if run_id is not None:
        print(f"comparison logged as run {run_id} (artifacts: comparison/)", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    command, rest = argv[0], argv[1:]
    handlers = {"scenarios": lambda: _scenarios(), "train": lambda: _train(rest), "eval": lambda: _eval(rest),
                "compare": lambda: _compare(rest)}
    if command not in handlers:
        print(f"marl: unknown command {command!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    # A job scheduler's SIGTERM becomes SystemExit, so the MLflow run is ended (KILLED), not left RUNNING.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        return handlers[command]()
    except ConfigError as err:
        print(f"marl {command}: config error: {err}", file=sys.stderr)
        return 2
    except CheckpointError as err:
        print(f"marl {command}: {err}", file=sys.stderr)
        return 2
    except NonFiniteError as err:
        print(f"marl {command}: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as err:  # Ctrl-C, or SIGTERM during RL (a resume point was written first)
        print(f"marl {command}: {err or 'interrupted'}", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
