"""Name -> scenario class registry: ``make``, ``names``, ``info`` and ``register``.

It leaves out discovery by dotted import paths from config (a principle of the design):
scenarios register themselves by name when ``scenarios`` is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scenarios.base import TextScenario

_REGISTRY: dict[str, type[TextScenario]] = {}


@dataclass(frozen=True)
class ScenarioInfo:
    """What a scenario is, without building it."""

    name: str
    description: str
    kind: str
    agent_range: tuple[int, int]
    splits: tuple[str, ...]


def register(name: str, cls: type[TextScenario]) -> None:
    """Make ``cls`` available as ``make(name)``; a name can be registered only once."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"scenario name must be an identifier like 'tool_use', got {name!r}")
    if not (isinstance(cls, type) and issubclass(cls, TextScenario)):
        raise ValueError(f"register({name!r}, ...) needs a TextScenario subclass, got {cls!r}")
    if name in _REGISTRY and _REGISTRY[name] is not cls:
        raise ValueError(f"scenario {name!r} is already registered to {_REGISTRY[name].__name__}; pick another name")
    _REGISTRY[name] = cls


def _lookup(name: str) -> type[TextScenario]:
    if name not in _REGISTRY:
        raise ValueError(f"unknown scenario {name!r}; registered scenarios: {names()}")
    return _REGISTRY[name]


def make(name: str, n_agents: int | None = None, seed: int | None = None, **options: Any) -> TextScenario:
    """Build the scenario registered as ``name`` (a PettingZoo ``ParallelEnv``).

    ``n_agents=None`` takes the smallest count the scenario supports (1 for ``tool_use``, 2 for a game).
    """
    return _lookup(name)(n_agents=n_agents, seed=seed, **options)


def names() -> list[str]:
    """Registered scenario names, sorted."""
    return sorted(_REGISTRY)


def info(name: str) -> ScenarioInfo:
    """Description, kind, agent range and splits of a registered scenario."""
    cls = _lookup(name)
    return ScenarioInfo(name, cls.description, cls.kind, tuple(cls.agent_range), tuple(cls.splits))
