"""Where a run came from, as the MLflow tags its UI reads: user, source, git commit, and the experiment's kind.

MLflow's own run context fills these in for its fluent API only (and reads git through GitPython,
which this project does not need); runs created through `MlflowClient` get them from here: the
`git` command on the package's own checkout (no commit where it is not one, e.g. an installed
wheel), `mlflow.source.type` LOCAL, or PROJECT under `mlflow run` (which set its own tags
already). It leaves out the run's own parameters and tags (the tracker and the run).
"""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from functools import cache
from pathlib import Path

EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}
"""The experiment tag that tells MLflow's UI these are model-training runs, not GenAI traces."""
KIND_TAG = "marl.kind"
"""What made a run: `train`, `eval` (a `marl eval`) or `comparison` (a `marl compare`); `marl compare` compares
training runs only."""
_KINDS = {"marl train": "train", "marl eval": "eval", "marl compare": "comparison"}


def _git(*args: str) -> str | None:
    where = Path(__file__).resolve().parent
    try:
        out = subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


@cache
def git_tags() -> dict[str, str]:
    """`mlflow.source.git.commit` and `.branch` of the checkout the code runs from, and `git.dirty` when it has
    uncommitted changes to tracked files (empty outside a git checkout)."""
    commit = _git("rev-parse", "HEAD")
    if not commit:
        return {}
    tags = {"mlflow.source.git.commit": commit}
    branch = _git("rev-parse", "--abbrev-ref", "HEAD")
    if branch and branch != "HEAD":
        tags["mlflow.source.git.branch"] = branch
    changes = _git("status", "--porcelain", "--untracked-files=no")
    tags["git.dirty"] = "true" if changes else "false"
    return tags


def source_tags(command: str) -> dict[str, str]:
    """The tags of a new run made by `command` (e.g. `marl train`)."""
    try:
        user = getpass.getuser()
    except (OSError, KeyError):
        user = "unknown"
    tags = {"mlflow.user": user, "mlflow.source.name": command, "mlflow.source.type": "LOCAL",
            KIND_TAG: _KINDS.get(command, command),
            "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])[:5000], **git_tags()}
    if os.environ.get("MLFLOW_RUN_ID"):  # under `mlflow run`: it made the run and tagged it as a PROJECT
        tags.pop("mlflow.source.type")
        tags.pop("mlflow.source.name")
    return tags
