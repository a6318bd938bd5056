"""Configs in and out of files: YAML into `TrainConfig` and back, and a config flattened into MLflow params.

YAML is read with `safe_load` only and every key is checked against the dataclass fields, so a typo
fails at startup with the valid keys listed; nothing is ever imported by a dotted path from a config.
Validation of values stays with the dataclasses (each checks itself when built).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from marl.config.checks import ConfigError, deferred_checks
from marl.config.train import TrainConfig

REMOVED_KEYS: dict[str, str] = {
    "rl.bootstrap_truncations": "each scenario now declares whether the agent sees its turn budget "
                                "(turn_budget_visible): a budget it sees ends the task (value 0), a cut it "
                                "cannot see bootstraps from the critic; drop it",
}
"""Config keys earlier versions took, with what replaced them (a clear error instead of 'unknown key')."""


def from_dict(cls: type, data: dict[str, Any], where: str = "") -> Any:
    """Build a config dataclass from nested plain data (YAML), rejecting unknown keys by name."""
    names = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls, include_extras=False)
    kwargs: dict[str, Any] = {}
    for key, value in data.items():
        if key not in names:
            if f"{where}{key}" in REMOVED_KEYS:
                raise ConfigError(f"config key {where}{key} was removed: {REMOVED_KEYS[where + key]}")
            raise ConfigError(f"unknown config key {where}{key!r}; valid keys: {sorted(names)}")
        default = names[key].default_factory() if names[key].default_factory is not dataclasses.MISSING else None
        if dataclasses.is_dataclass(default):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}{key} must be a mapping of its fields")
            kwargs[key] = from_dict(type(default), value, where=f"{where}{key}.")
        elif isinstance(value, list):
            kwargs[key] = tuple(value)
        else:
            kwargs[key] = _coerce(value, hints.get(key), f"{where}{key}")
    return cls(**kwargs)


def _coerce(value: Any, hint: Any, name: str) -> Any:
    """YAML reads `1e-4` as a string (it wants `1.0e-4`): convert scalars to the field's type."""
    scalars = (int, float, bool, str)
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)  # `float | None`, not `dict[str, Any]`
    kinds = [hint] if hint in scalars else [t for t in typing.get_args(hint) if t in scalars] if union else []
    if value is None or not kinds or type(value) in kinds:
        return value
    kind = kinds[0]
    try:
        if isinstance(value, bool) or kind is bool:
            raise ValueError  # no silent truthiness: true/false only for booleans
        return kind(value)
    except (TypeError, ValueError):
        raise ConfigError(f"{name}={value!r} must be of type {kind.__name__}") from None


def to_yaml(cfg: TrainConfig) -> str:
    """A config as the YAML `marl train --config` reads back into the same config (`resume` and `config` left out:
    they say how a run started, not what it is)."""
    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return [plain(v) for v in value] if isinstance(value, list | tuple) else value
    data = plain(dataclasses.asdict(cfg))
    data.pop("resume", None)
    data.pop("config", None)
    return yaml.safe_dump(data, sort_keys=False)


def load_yaml(path: str | Path, check: bool = True) -> TrainConfig:
    """Read a YAML config (safe_load only) into a TrainConfig; `check=False` leaves the checks to the caller
    (command-line flags go on top of the file first)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"config file {path} does not exist")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of config fields at the top level")
    with deferred_checks():
        cfg = from_dict(TrainConfig, data)
    return cfg.validate() if check else cfg


def flatten(cfg: Any, prefix: str = "") -> dict[str, str]:
    """Config as flat `section.field -> str` pairs, for MLflow params."""
    out: dict[str, str] = {}
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        if dataclasses.is_dataclass(value):
            out.update(flatten(value, prefix=f"{prefix}{f.name}."))
        else:
            out[f"{prefix}{f.name}"] = str(value)[:500]
    return out
