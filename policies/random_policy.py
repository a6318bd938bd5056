"""A uniform random baseline: picks one grammar expansion per sample, or random printable text.

It needs no model or tokenizer and returns a `Generation` with texts only (no token ids or
logprobs), so it can stand in wherever actions are needed but never where they are learned from.
The "untrained" reference of evaluations is the real `LLMPolicy` on a random-init model, not this.
"""

from __future__ import annotations

import random
import string
from collections.abc import Sequence
from typing import TYPE_CHECKING

from policies.outputs import Generation

if TYPE_CHECKING:
    from scenarios.grammar import ActionGrammar

_PRINTABLE = string.ascii_letters + string.digits + string.punctuation + " "


class RandomPolicy:
    """Uniform over the valid actions (grammar expansions); free text when there is no grammar."""

    def __init__(self, seed: int | None = None, max_chars: int = 32) -> None:
        self._rng = random.Random(seed)
        self.max_chars = max_chars

    def act(self, grammar: ActionGrammar | None, rng: random.Random | None = None) -> str:
        rng = rng or self._rng
        if grammar is None:
            return "".join(rng.choice(_PRINTABLE) for _ in range(rng.randint(1, self.max_chars)))
        actions = grammar.expand()
        if not actions:
            raise ValueError("the action grammar expands to no actions; give every agent at least one valid action")
        return rng.choice(actions)

    def generate(
        self,
        prompts: Sequence[Sequence[int]] | None,
        grammars: Sequence[ActionGrammar | None],
        greedy: bool = False,
        seed: int | None = None,
        turn_cache: object | None = None,
        keys: object | None = None,
        hint_mix: object | None = None,
        explore: float = 0.0,
    ) -> Generation:
        """Same call shape as `LLMPolicy.generate`; prompts, `greedy`, the turn cache, `hint_mix` and `explore` (every
        draw here is uniform already) are ignored."""
        rng = random.Random(seed) if seed is not None else self._rng
        texts = [self.act(g, rng) for g in grammars]
        n = len(texts)
        return Generation(token_ids=[[] for _ in range(n)], logprobs=[[] for _ in range(n)], texts=texts,
                          allowed=[None] * n, finished=[True] * n,
                          num_prompt_tokens=[len(p) for p in prompts] if prompts is not None else [0] * n)
