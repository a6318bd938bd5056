"""Channels: how what one agent shares reaches another (size cap, drop, delay, noise) and what it cost.

``ChannelConfig`` is the typed, validated spec (one source of truth for the defaults);
``Channel`` is its run-time state: a seeded generator, the items in flight and the statistics.
Every fault is drawn from the channel's own generator, so identical seeds (config seed and
episode seed) give identical delivery streams whatever the agents do with them.

Per delivery (one sender, one receiver, one step), in this order:

1. size cap: the item is cut to ``budget_chars`` characters, ending in ``TRUNCATED_MARK``;
2. drop: with probability ``drop`` it is lost (``comms/dropped``);
3. noise: each character, independently with probability ``noise``, becomes a random
   non-whitespace printable character (per character, not per token: a corrupted entity name
   is simply not an entity any more, which is how a noisy link hurts a text agent);
4. delay: it arrives exactly ``delay`` steps after it was sent (``comms/delayed`` counts the
   items sent with a delay > 0). Items still in flight when the episode resets, or whose
   receiver has left the episode, are lost (``comms/expired``).

Left out: who talks to whom (``comms/topology.py``), formatting items into observations
(``comms/wrapper.py``) and what agents may say (``comms/messages.py``).
"""

from __future__ import annotations

import string
from dataclasses import dataclass, field

import numpy as np

MODES: tuple[str, ...] = ("observation", "message", "both")
TRUNCATED_MARK = " ...[cut]"
NOISE_CHARS = string.ascii_letters + string.digits + string.punctuation
STAT_NAMES: tuple[str, ...] = ("sent", "delivered", "dropped", "delayed", "expired", "truncated",
                               "corrupted_chars", "messages", "malformed_messages")


def _is_int(x: object) -> bool:
    return isinstance(x, int | np.integer) and not isinstance(x, bool)


def _is_prob(x: object) -> bool:
    return isinstance(x, int | float | np.floating) and not isinstance(x, bool) and 0.0 <= float(x) <= 1.0


@dataclass(frozen=True)
class ChannelConfig:
    """How shared content travels between neighbours; see the module docstring for the order of faults."""

    mode: str = "observation"
    """What is shared: "observation" (latest observation text and action), "message" (agent-written "say" fields) or "both"."""
    budget_chars: int = 512
    """Size cap in characters of one delivered item (longer items are cut and end in " ...[cut]")."""
    total_chars: int | None = None
    """Cap on the whole team section added to one observation (None: whatever room the Text space leaves)."""
    drop: float = 0.0
    """Probability in [0, 1] that a delivery (one sender, one receiver, one step) is lost."""
    delay: int = 0
    """Steps (>= 0) between sending and arrival: content shared at step t appears at step t + delay."""
    noise: float = 0.0
    """Probability in [0, 1], per character, that a delivered character becomes a random printable one."""
    seed: int = 0
    """Seed of the fault draws; mixed with the episode seed at reset(seed=...), so runs replay exactly."""
    message_values: int = 16
    """Message modes: an agent may say one of the last this-many scenario entities it has seen."""

    @property
    def shares_observations(self) -> bool:
        return self.mode in ("observation", "both")

    @property
    def carries_messages(self) -> bool:
        return self.mode in ("message", "both")

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"channel mode must be one of {list(MODES)}, got {self.mode!r}")
        if not _is_int(self.message_values) or self.message_values < 1:
            raise ValueError(f"message_values must be an int >= 1, got {self.message_values!r}")
        if not _is_int(self.budget_chars) or self.budget_chars < len(TRUNCATED_MARK) + 1:
            raise ValueError(f"budget_chars must be an int >= {len(TRUNCATED_MARK) + 1} (room for the cut marker), "
                             f"got {self.budget_chars!r}")
        object.__setattr__(self, "budget_chars", int(self.budget_chars))
        if self.total_chars is not None:
            if not _is_int(self.total_chars) or self.total_chars < 0:
                raise ValueError(f"total_chars must be None (no extra cap) or an int >= 0, got {self.total_chars!r}")
            object.__setattr__(self, "total_chars", int(self.total_chars))
        for name in ("drop", "noise"):
            value = getattr(self, name)
            if not _is_prob(value):
                raise ValueError(f"{name} must be a probability in [0, 1] (0: off), got {value!r}")
            object.__setattr__(self, name, float(value))
        if not _is_int(self.delay) or self.delay < 0:
            raise ValueError(f"delay must be a whole number of steps >= 0 (0: same step), got {self.delay!r}")
        object.__setattr__(self, "delay", int(self.delay))
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(f"seed must be a non-negative int, got {self.seed!r}")
        object.__setattr__(self, "seed", int(self.seed))


def cut(text: str, limit: int) -> str:
    """``text`` cut to at most ``limit`` characters, ending in ``TRUNCATED_MARK`` when cut."""
    if len(text) <= limit:
        return text
    if limit <= len(TRUNCATED_MARK):
        return text[:limit]
    return text[: limit - len(TRUNCATED_MARK)] + TRUNCATED_MARK


@dataclass
class Delivery:
    """One item that reached its receiver: who sent it, at which step, and the text as received."""

    sender: str
    receiver: str
    sent_step: int
    text: str


@dataclass
class Channel:
    """Run-time state of a ``ChannelConfig``: generator, items in flight, cumulative statistics."""

    config: ChannelConfig
    rng: np.random.Generator = field(init=False)
    in_flight: list[tuple[int, Delivery]] = field(default_factory=list, init=False)
    counts: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.config.seed)
        self.counts = dict.fromkeys(STAT_NAMES, 0)

    def reset(self, episode_seed: int | None = None) -> None:
        """Start an episode: items in flight expire; a given episode seed reseeds the fault draws."""
        self.counts["expired"] += len(self.in_flight)
        self.in_flight = []
        if episode_seed is not None:
            self.rng = np.random.default_rng([self.config.seed, int(episode_seed)])

    def send(self, step: int, sender: str, receivers: list[str], text: str) -> None:
        """Send ``text`` from ``sender`` to each receiver at ``step`` (cap, drop, noise; queued for its delay)."""
        cfg = self.config
        item = cut(text, cfg.budget_chars)
        for receiver in receivers:
            self.counts["sent"] += 1
            self.counts["truncated"] += len(text) > cfg.budget_chars
            if cfg.drop > 0.0 and self.rng.random() < cfg.drop:
                self.counts["dropped"] += 1
                continue
            received = self._corrupt(item) if cfg.noise > 0.0 else item
            self.counts["delayed"] += cfg.delay > 0
            self.in_flight.append((step + cfg.delay, Delivery(sender, receiver, step, received)))

    def deliver(self, step: int, live: set[str]) -> dict[str, list[Delivery]]:
        """Items due at ``step``, per receiver, in sending order; those due for agents not in ``live`` expire."""
        out: dict[str, list[Delivery]] = {}
        keep: list[tuple[int, Delivery]] = []
        for due, item in self.in_flight:
            if due > step:
                keep.append((due, item))
            elif item.receiver in live:
                out.setdefault(item.receiver, []).append(item)
                self.counts["delivered"] += 1
            else:
                self.counts["expired"] += 1
        self.in_flight = keep
        return out

    def stats(self) -> dict[str, float]:
        """Cumulative counts as metrics named ``comms/<name>`` (sent, delivered, dropped, delayed, ...)."""
        return {f"comms/{k}": float(v) for k, v in self.counts.items()}

    def _corrupt(self, text: str) -> str:
        hits = np.flatnonzero(self.rng.random(len(text)) < self.config.noise)
        if not hits.size:
            return text
        chars = list(text)
        for i, j in zip(hits, self.rng.integers(len(NOISE_CHARS), size=hits.size), strict=True):
            chars[i] = NOISE_CHARS[j]
        self.counts["corrupted_chars"] += int(hits.size)
        return "".join(chars)


__all__ = ["MODES", "NOISE_CHARS", "STAT_NAMES", "TRUNCATED_MARK", "Channel", "ChannelConfig", "Delivery", "cut"]
