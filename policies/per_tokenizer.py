"""A value remembered per tokenizer object, for the compile-time tables a tokenizer determines.

Keyed by the tokenizer's identity, not its contents: two tokenizers that happen to be equal get a table
each. The tokenizer is held with its value, so while an entry lives its `id()` cannot be handed to another
object. Left out: eviction (a run holds one or two tokenizers; the caller bounds what a value grows to).
"""

from __future__ import annotations

from typing import Any, Generic, TypeVar

V = TypeVar("V")


class PerTokenizer(Generic[V]):
    """One value per tokenizer object."""

    def __init__(self) -> None:
        self._held: dict[int, tuple[Any, V]] = {}

    def get(self, tokenizer: Any) -> V | None:
        """The value remembered for this very tokenizer object, or None."""
        hit = self._held.get(id(tokenizer))
        return hit[1] if hit is not None and hit[0] is tokenizer else None

    def put(self, tokenizer: Any, value: V) -> None:
        """Remember `value` for `tokenizer` (replacing what it had)."""
        self._held[id(tokenizer)] = (tokenizer, value)
