"""Run a benchmark's measurement on this tree and on a baseline checkout alternately, in fresh processes.

A measurement is the benchmark script itself run with `--child` (and the caller's arguments); it prints
one JSON line last. Pairing each run of this tree with a run of the baseline right after it keeps a ratio
honest on a machine whose speed drifts.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
"""This tree's root."""


def run_child(script: str, tree: Path, argv: Sequence[str]) -> Any:
    """The JSON `script --child argv` prints last, run with `tree`'s code (its root first on the path)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, str(Path(script).resolve()), "--child", *argv]
    out = subprocess.run(cmd, env=env, cwd=tree, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"the measurement on {tree} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def pairs(script: str, baseline: Path, argv: Sequence[str], rounds: int) -> list[tuple[Any, Any]]:
    """`rounds` pairs (this tree's figures, the baseline's), each measured one right after the other."""
    out = []
    for r in range(rounds):
        ours, theirs = run_child(script, HERE, argv), run_child(script, baseline.resolve(), argv)
        print(f"round {r}: ours {json.dumps(ours)}\n         base {json.dumps(theirs)}", flush=True)
        out.append((ours, theirs))
    return out


def add_pair_arguments(parser: argparse.ArgumentParser) -> None:
    """The arguments every side-by-side benchmark takes: `--seed`, `--vs`, `--rounds` and the hidden `--child`."""
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--vs", type=Path, help="a baseline checkout to measure alternately with this tree")
    parser.add_argument("--rounds", type=int, default=3, help="measurements of each tree with --vs")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
