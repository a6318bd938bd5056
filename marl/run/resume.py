"""Resume points: a training run's whole state on disk, written atomically, and read back to continue it.

A resume point is a folder `<output_dir>/<run_id>/resume/it-<N>/` written after RL iteration N (N=0:
after SFT, before RL): the tokenizer, `trainer.pt` (every learner's state from
`marl.engine.learner_state`: weights, KL reference, optimizers, KL controller, generators; running
baselines; the run's task-seed generator and the one demonstrations were drawn from; the python,
numpy and torch global generators; a curriculum's, an opponent pool's (with its snapshots' weights)
and the alerts' state) and `resume.json` (iteration, env steps,
RL seconds spent, MLflow run id, the resolved config). The folder is written under a temporary name,
flushed to disk and renamed into place, so a kill during a save leaves the previous point as it was;
`resume.json` is the last file written, so a folder without it is never read as a point. The newest
`keep` points are kept.

`trainer.pt` is read with `torch.load(weights_only=True)`: tensors, numbers, strings and containers
only, nothing is unpickled into code.

It leaves out the training loop itself (`marl.run.train`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import shutil
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from marl.config import TrainConfig
from marl.config.files import from_dict
from marl.run.checkpoint import CheckpointError
from marl.run.runs_uri import is_runs_uri, run_folder, split_runs_uri

RESUME_DIR = "resume"
STATE_FILE = "trainer.pt"
INFO_FILE = "resume.json"
START_FILE = "run.json"
"""A run's folder holds this from its start: its run id and resolved config, so a run killed before its
first resume point (in SFT) can start over in the same MLflow run."""


@dataclass
class ResumePoint:
    """A resume point read back: where it is, its record and its state."""

    folder: Path
    info: dict[str, Any]
    state: dict[str, Any]

    @property
    def iteration(self) -> int:
        return int(self.info.get("iteration", 0))

    @property
    def restart(self) -> bool:
        """The run stopped before its first resume point: it starts over (same config, same MLflow run)."""
        return "iteration" not in self.info

    @property
    def run_id(self) -> str:
        return str(self.info["run_id"])

    def config(self) -> TrainConfig:
        """The resolved config the run was started with (never itself resuming)."""
        return dataclasses.replace(from_dict(TrainConfig, self.info["config"]), resume=None)

    def tokenizer(self) -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(self.folder))


def global_generators() -> dict[str, Any]:
    """The python, numpy and torch global generators' states, as plain data."""
    legacy = np.random.get_state()
    return {"python": random.getstate(), "numpy": [legacy[0], legacy[1].tolist(), *legacy[2:]],
            "torch": torch.get_rng_state()}


def restore_global_generators(state: dict[str, Any]) -> None:
    random.setstate(_tuples(state["python"]))
    kind, key, *rest = state["numpy"]
    np.random.set_state((kind, np.asarray(key, dtype=np.uint32), *rest))
    torch.set_rng_state(state["torch"])


def _tuples(value: Any) -> Any:
    """`random.setstate` wants the tuples it gave (a round trip may hand back lists)."""
    return tuple(_tuples(v) for v in value) if isinstance(value, list | tuple) else value


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def non_finite(state: Any, where: str = "") -> str | None:
    """The path of the first floating tensor holding NaN or inf in a nest of dicts and lists (None: all finite)."""
    if isinstance(state, torch.Tensor):
        return where if state.is_floating_point() and not torch.isfinite(state).all() else None
    items = state.items() if isinstance(state, dict) else enumerate(state) if isinstance(state, list | tuple) else ()
    for key, value in items:
        found = non_finite(value, f"{where}/{key}")
        if found is not None:
            return found
    return None


def save_resume_point(run_dir: Path, info: dict[str, Any], state: dict[str, Any], tokenizer: Any,
                      keep: int) -> Path:
    """Write the point of iteration `info["iteration"]` atomically and keep the newest `keep`; returns it.
    A state with a non-finite tensor is refused (`CheckpointError`) and the points on disk stay as they are."""
    bad = non_finite(state)
    if bad is not None:
        raise CheckpointError(f"refusing to write a resume point with non-finite values ({bad.lstrip('/')}); "
                              "the previous resume point is kept")
    root = Path(run_dir) / RESUME_DIR
    folder = root / f"it-{int(info['iteration']):06d}"
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tokenizer.save_pretrained(tmp)
    torch.save(state, tmp / STATE_FILE)
    (tmp / INFO_FILE).write_text(json.dumps(info, indent=1, default=str))  # last: marks the point complete
    for item in tmp.iterdir():
        if item.is_file():
            _fsync(item)
    _fsync(tmp)
    if folder.exists():  # the same iteration again (the end of a run that just saved it): replace it whole
        shutil.rmtree(folder)
    tmp.rename(folder)
    _fsync(root)
    for old in points(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def points(root: Path) -> list[Path]:
    """The complete resume points under a `resume` folder, oldest first."""
    if not root.is_dir():
        return []
    found = [p for p in root.iterdir() if p.is_dir() and p.name.startswith("it-") and not p.name.endswith(".tmp")
             and (p / INFO_FILE).is_file() and (p / STATE_FILE).is_file()]
    return sorted(found, key=lambda p: int(p.name.removeprefix("it-")))


def write_run_start(run_dir: Path, run_id: str, cfg: TrainConfig, past_sft: bool = False) -> None:
    """The record a run starts over from when it is stopped before its first resume point (written atomically);
    `past_sft`: the warm start is done, so starting over would repeat logged work: it is then refused."""
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = run_dir / (START_FILE + ".tmp")
    record = {"run_id": run_id, "config": dataclasses.asdict(cfg), "past_sft": past_sft}
    tmp.write_text(json.dumps(record, indent=1, default=str))
    _fsync(tmp)
    tmp.replace(run_dir / START_FILE)


def find_resume_point(path: str | Path) -> Path:
    """A resume point folder from a point, a `resume` folder or a run folder (its newest point; a run folder
    with none yet but its start record: the folder itself, to start over)."""
    path = Path(path).expanduser()
    if (path / INFO_FILE).is_file():
        return path
    for root in (path, path / RESUME_DIR):
        found = points(root)
        if found:
            return found[-1]
    if (path / START_FILE).is_file():
        return path
    raise CheckpointError(f"{path} holds no resume point (a folder with {INFO_FILE} and {STATE_FILE}, or a run folder "
                          f"with {RESUME_DIR}/it-N): pass <output_dir>/<run_id> of the run to continue")


def _runs_uri_point(uri: str, tracking_uri: str) -> Path:
    """A `runs:/<run_id>[/resume/it-N]` URI as a local folder: the run's own where it is on this machine, else the
    points it logged as artifacts (`checkpoint.log_to_mlflow`; no path: the newest), downloaded."""
    def usable(local: Path) -> bool:
        return bool(points(local) or points(local / RESUME_DIR) or (local / INFO_FILE).is_file()
                    or (local / START_FILE).is_file())

    def artifact(rest: str, folders: list[str]) -> str | None:
        if rest:
            return rest
        if RESUME_DIR not in folders:
            return None
        from mlflow.tracking import MlflowClient

        client, run_id = MlflowClient(tracking_uri), split_runs_uri(uri)[0]
        for folder in sorted((f.path for f in client.list_artifacts(run_id, RESUME_DIR) if f.is_dir), reverse=True):
            names = {Path(f.path).name for f in client.list_artifacts(run_id, folder)}
            if {INFO_FILE, STATE_FILE} <= names:  # the newest one logged whole (an upload may have been cut)
                return folder
        return None
    return run_folder(uri, tracking_uri, usable, artifact)


def load_resume_point(path: str | Path, tracking_uri: str | None = None) -> ResumePoint:
    """The resume point at `path` (a point, a run folder, or `runs:/<run_id>[/<path>]` in `tracking_uri`)."""
    if is_runs_uri(path):
        if tracking_uri is None:
            raise CheckpointError(f"{path}: a runs:/ URI needs the tracking URI of its MLflow store")
        path = _runs_uri_point(str(path), tracking_uri)
    folder = find_resume_point(path)
    if not (folder / INFO_FILE).is_file():  # a run stopped before its first point: its start record
        try:
            record = json.loads((folder / START_FILE).read_text())
        except (OSError, ValueError) as err:
            raise CheckpointError(f"{folder / START_FILE} does not read as a run's start record ({err})") from None
        if record.get("past_sft"):
            raise CheckpointError(f"{folder} holds no resume point, but its run got past SFT (checkpoint.every 0, or "
                                  "it finished): starting it over would log its work twice; start a new run")
        return ResumePoint(folder, record, {})
    try:
        info = json.loads((folder / INFO_FILE).read_text())
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    except (OSError, ValueError, RuntimeError) as err:
        raise CheckpointError(f"{folder} does not read as a resume point ({err}); pass an older one") from None
    return ResumePoint(folder, info, state)


class DeferredStop:
    """Ctrl-C or SIGTERM during RL asks the loop to stop after the iteration under way (so that a resume
    point can be written first); a second one stops at once. Outside the main thread it does nothing."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._old: dict[int, Any] = {}

    def __enter__(self) -> DeferredStop:
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGINT, signal.SIGTERM):
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum is not None:
            raise KeyboardInterrupt(f"signal {signum} again: stopping at once")
        self.signum = signum
        print(f"\nsignal {signum}: stopping after this iteration, with a resume point (again to stop at once)",
              flush=True)

    def __exit__(self, *exc: Any) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
