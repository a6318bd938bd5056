"""Checkpoints: safetensors weights, the tokenizer and a typed metadata record in one folder.

The record (`CheckpointMeta`, written as JSON) says what the checkpoint is: the scenario and its
options, the agent count, the policy preset or model, the tokenizer, the policy mapping, the
algorithm and its critic's view, comms and decoding settings, and the package versions that wrote
it. `marl eval` and every other reader build from that record alone. A checkpoint is written to a temporary sibling folder and renamed into place, and the previous
checkpoint is only removed once the new one is complete, so a crash mid-write never loses the last
good one. Weights that hold NaN or inf are refused. Loading reads safetensors and JSON only
(nothing is unpickled). Left out for now: optimizer and RNG state for exact resume.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import torch

META_FILE = "marl_checkpoint.json"
CURRICULUM_FILE = "curriculum.json"
"""A curriculum's state in a checkpoint folder (`marl.engine.curriculum.Curriculum.state_dict`)."""
FORMAT_VERSION = 2
VERSIONED_PACKAGES = ("marl-llm", "torch", "transformers", "trl", "tokenizers", "pettingzoo", "mlflow")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be written or read; the message says why."""


def package_versions() -> dict[str, str]:
    """Installed versions of the packages a checkpoint depends on (`missing` where one is not installed)."""
    out = {}
    for name in VERSIONED_PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "missing"
    return out


@dataclass(frozen=True)
class TokenizerInfo:
    """How a checkpoint's tokenizer was made (its files lie in the checkpoint folder)."""

    kind: str
    """`offline-bpe` (trained on the scenario's expert text, entities as whole tokens) or `pretrained`."""
    size: int
    """Tokens in the vocabulary, entities and special tokens included."""
    merges_budget: int = 0
    """BPE merges budget it was trained with (`offline-bpe` only)."""
    entities: int = 0
    """Scenario entities added as whole tokens (`offline-bpe` only)."""


@dataclass(frozen=True)
class CheckpointMeta:
    """What a checkpoint is, enough to evaluate or continue it without the config that trained it."""

    scenario: str
    """Scenario the policies were trained on (their tokenizer knows its entities)."""
    agents: int
    """Agent count during training."""
    model: str
    """Policy preset (`tiny-moe`, ...) or the model folder / hub id the policy was built from."""
    tokenizer: TokenizerInfo
    """How the tokenizer in the folder was made."""
    policy_mapping: str
    """`shared`, `team` or `agent` (see `marl.engine.policy_map`)."""
    policies: tuple[str, ...]
    """Policy ids; the first lies at the top of the folder, the others under `policies/<id>/`."""
    algo: str
    """RL algorithm of the run."""
    critic_view: str | None
    """What the critics (under `critics/<id>/`) read: a `critic.state_view`, or None without a critic."""
    constrained: bool
    """Decoding is constrained to the scenario's action grammar."""
    temperature: float
    """Sampling temperature of the policy."""
    max_new_tokens: int
    """Longest action in tokens."""
    run_id: str
    """MLflow run that wrote the checkpoint."""
    seed: int
    """Seed of the run."""
    iteration: int
    """Last RL iteration done."""
    scenario_options: dict[str, Any] = field(default_factory=dict)
    """Options passed to `scenarios.make` during training."""
    comms: dict[str, Any] = field(default_factory=dict)
    """The run's `comms` config section (topology `none`: no sharing)."""
    versions: dict[str, str] = field(default_factory=dict)
    """Versions of the packages that wrote the checkpoint."""
    adapters: tuple[str, ...] = ()
    """Policy ids held as LoRA adapters (peft's format, under `adapters/<id>/`) on the frozen base at the top of
    the folder; empty when every policy is a whole model."""

    def to_json(self) -> str:
        return json.dumps({"format_version": FORMAT_VERSION, **dataclasses.asdict(self)}, indent=2, default=str)

    @classmethod
    def from_json(cls, data: Any, where: str = "") -> CheckpointMeta:
        """The record from its JSON form (format 1 records are upgraded), with a clear error when a field
        is missing, unknown or of the wrong kind."""
        if not isinstance(data, dict):
            raise CheckpointError(f"{where}: metadata must be a JSON object; the checkpoint is damaged")
        data = dict(data)
        version = data.pop("format_version", None)
        if version == 1:
            data = _from_format_1(data)
        elif version != FORMAT_VERSION:
            raise CheckpointError(f"{where} holds checkpoint format {version}, this version reads {FORMAT_VERSION} "
                                  "and 1: evaluate it with the version that wrote it, or retrain it")
        names = {f.name for f in dataclasses.fields(cls)}
        missing = sorted(f.name for f in dataclasses.fields(cls) if f.name not in data
                         and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
        unknown = sorted(set(data) - names)
        if missing or unknown:
            raise CheckpointError(f"{where}: metadata missing {missing} / unknown {unknown}; not a checkpoint of "
                                  "this version")
        try:
            data["tokenizer"] = TokenizerInfo(**data["tokenizer"])
            data["policies"] = tuple(data["policies"])
            data["adapters"] = tuple(data.get("adapters", ()))
            return cls(**data)
        except (TypeError, ValueError) as err:
            raise CheckpointError(f"{where}: metadata does not read as a checkpoint record ({err})") from None


def _from_format_1(old: dict[str, Any]) -> dict[str, Any]:
    """A format-1 record (untyped: the flattened `policy` section, no tokenizer, critic view or versions)
    in today's fields; what it never recorded is marked as such."""
    policy = old.get("policy") or {}
    ids = old.get("policies") or ["shared"]
    return {
        "scenario": old.get("scenario"), "agents": old.get("agents"), "model": policy.get("model", "unrecorded"),
        "tokenizer": {"kind": "offline-bpe", "size": 0, "merges_budget": int(policy.get("vocab_size", 0))},
        "policy_mapping": old.get("policy_mapping", "shared"), "policies": ids, "algo": old.get("algo", "grpo"),
        "critic_view": None if old.get("algo", "grpo") == "grpo" else "unrecorded",
        "constrained": bool(old.get("constrained", True)), "temperature": float(old.get("temperature", 1.0)),
        "max_new_tokens": int(old.get("max_new_tokens", 48)), "run_id": str(old.get("run_id", "")),
        "seed": int(old.get("seed", 0)), "iteration": int(old.get("iteration", 0)),
        "scenario_options": old.get("scenario_options") or {}, "comms": old.get("comms") or {}, "versions": {},
    }


ADAPTERS_DIR = "adapters"
"""Where a checkpoint keeps its LoRA adapters, one folder per policy id."""


def save_checkpoint(path: str | Path, model: Any, tokenizer: Any, meta: CheckpointMeta,
                    extra_models: dict[str, Any] | None = None, critics: dict[str, Any] | None = None,
                    heads: dict[str, Any] | None = None, pool: Any = None,
                    curriculum: dict[str, Any] | None = None, adapters: dict[str, Any] | None = None) -> Path:
    """Write model + tokenizer + metadata atomically to `path` and return it.

    `model` lies at the top of the folder (the shared policy, or the first of several). Further
    policies of a policy mapping go to `policies/<id>/` (listed in the metadata under
    `policies`), critics to `critics/<id>/`, opponent heads beside their policy's weights (`heads`:
    policy id, or "" for the top model, to a head), an opponent pool (its `save(folder)`) to `pool/`,
    a curriculum's state (stage, window, history) to `curriculum.json`, LoRA adapters (policy id to a view
    whose `save_pretrained` writes peft's format) to `adapters/<id>/` (then `model` is their frozen base);
    all or nothing is written.
    """
    path = Path(path)
    extra_models = extra_models or {}
    labelled = {"policy": model, **{f"policy {pid}": m for pid, m in extra_models.items()},
                **{f"critic {pid}": m for pid, m in (critics or {}).items()},
                **{f"opponent head {pid or 'policy'}": h for pid, h in (heads or {}).items()},
                **{f"adapter {pid}": a for pid, a in (adapters or {}).items()}}
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
    for pid, adapter in (adapters or {}).items():
        adapter.save_pretrained(tmp / ADAPTERS_DIR / pid)
    for pid, critic in (critics or {}).items():
        critic.save(tmp / "critics" / pid)
    for pid, head in (heads or {}).items():
        head.save(tmp / "policies" / pid if pid else tmp)
    if pool is not None:
        pool.save(tmp / "pool")
    if curriculum is not None:
        (tmp / CURRICULUM_FILE).write_text(json.dumps(curriculum, indent=1))
    (tmp / META_FILE).write_text(meta.to_json())
    if path.exists():
        shutil.rmtree(old, ignore_errors=True)
        path.rename(old)
    tmp.rename(path)
    shutil.rmtree(old, ignore_errors=True)
    return path


def read_meta(path: str | Path) -> CheckpointMeta:
    """The metadata record of a checkpoint folder, with a clear error when it is not one."""
    path = Path(path)
    meta_file = path / META_FILE
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    if not meta_file.is_file():
        raise CheckpointError(f"{path} is not a marl checkpoint (no {META_FILE}); pass the folder `marl train` printed")
    try:
        data = json.loads(meta_file.read_text())
    except json.JSONDecodeError as err:
        raise CheckpointError(f"{meta_file} is not valid JSON ({err}); the checkpoint is damaged") from None
    return CheckpointMeta.from_json(data, where=str(path))
