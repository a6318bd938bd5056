"""Checkpoints: safetensors weights, the tokenizer and JSON metadata in one folder.

A checkpoint is written to a temporary sibling folder and renamed into place, and the previous
checkpoint is only removed once the new one is complete, so a crash mid-write never loses the last
good one. Weights that hold NaN or inf are refused. Loading reads safetensors and JSON only
(nothing is unpickled). Left out for now: optimizer and RNG state for exact resume.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch

META_FILE = "marl_checkpoint.json"
FORMAT_VERSION = 1


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message says why."""


def save_checkpoint(path: str | Path, model: Any, tokenizer: Any, meta: dict[str, Any],
                    extra_models: dict[str, Any] | None = None, critics: dict[str, Any] | None = None) -> Path:
    """Write model + tokenizer + metadata atomically to `path` and return it.

    `model` lies at the top of the folder (the shared policy, or the first of several). Further
    policies of a policy mapping go to `policies/<id>/` (listed in the metadata under
    `policies`), critics to `critics/<id>/`; all or nothing is written.
    """
    path = Path(path)
    extra_models = extra_models or {}
    labelled = {"policy": model, **{f"policy {pid}": m for pid, m in extra_models.items()},
                **{f"critic {pid}": m for pid, m in (critics or {}).items()}}
    for label, m in labelled.items():
        for name, tensor in m.state_dict().items():
            if tensor.is_floating_point() and not torch.isfinite(tensor).all():
                raise CheckpointError(f"refusing to checkpoint non-finite weights ({label}: {name}); "
                                      "the last good checkpoint is kept")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    old = path.with_name(path.name + ".old")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp, safe_serialization=True)
    tokenizer.save_pretrained(tmp)
    for pid, m in extra_models.items():
        m.save_pretrained(tmp / "policies" / pid, safe_serialization=True)
    for pid, critic in (critics or {}).items():
        critic.save(tmp / "critics" / pid)
    (tmp / META_FILE).write_text(json.dumps({"format_version": FORMAT_VERSION, **meta}, indent=2, default=str))
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def read_meta(path: str | Path) -> dict[str, Any]:
    """The JSON metadata of a checkpoint folder, with a clear error when it is not one."""
    path = Path(path)
    meta_file = path / META_FILE
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    if not meta_file.is_file():
        raise CheckpointError(f"{path} is not a marl checkpoint (no {META_FILE}); pass the folder `marl train` printed")
    return json.loads(meta_file.read_text())
