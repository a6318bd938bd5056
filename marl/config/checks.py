"""`ConfigError` and the small checks every config section validates its fields with.

Each check raises `ConfigError` with the field's dotted name, the bad value and what to change, so
a message reads the same whether the value came from a flag, a YAML file or Python.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_CHECKS_DEFERRED: ContextVar[bool] = ContextVar("config_checks_deferred", default=False)


class ConfigError(ValueError):
    """A configuration value is out of range; the message names the field and what to change."""


class SelfChecking:
    """A config dataclass that checks its fields when it is built, and again on `validate()`.

    `validate()` only reads fields: it raises `ConfigError` or returns the config unchanged, so it can
    be called again after fields were changed in Python. Inside `deferred_checks()` building checks
    nothing: a YAML file may hold values that only the command-line flags on top of it make valid.
    """

    def __post_init__(self) -> None:
        if not _CHECKS_DEFERRED.get():
            self.validate()

    def validate(self) -> SelfChecking:
        raise NotImplementedError


def require(ok: bool, message: str) -> None:
    """Raise `ConfigError(message)` unless `ok`."""
    if not ok:
        raise ConfigError(message)


def positive(name: str, value: Any, allow_zero: bool = False) -> None:
    """`value` is a finite number > 0 (or >= 0 with `allow_zero`)."""
    finite = not isinstance(value, float) or math.isfinite(value)
    ok = finite and (value >= 0 if allow_zero else value > 0)
    require(ok, f"{name}={value!r} must be {'>= 0' if allow_zero else '> 0'}")


def finite_non_negative(name: str, value: float) -> None:
    """`value` is a finite number >= 0."""
    require(math.isfinite(value) and value >= 0, f"{name} must be a finite number >= 0")


def within(name: str, value: float, low: float, high: float, why: str = "") -> None:
    """`low <= value <= high`."""
    require(low <= value <= high, f"{name}={value} must lie in [{low}, {high}]{why}")


def one_of(name: str, value: Any, choices: tuple[str, ...], what: str = "") -> None:
    """`value` is one of `choices` (a config's `Literal` options)."""
    require(value in choices, f"{name}={value!r}{what or ' is unknown'}; choose one of {list(choices)}")


@contextmanager
def deferred_checks() -> Iterator[None]:
    """Configs built inside this block skip their checks (the caller validates the final config)."""
    token = _CHECKS_DEFERRED.set(True)
    try:
        yield
    finally:
        _CHECKS_DEFERRED.reset(token)
