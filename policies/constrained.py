"""Constrained decoding: an action grammar compiled to a token trie with allowed ids per node.

`TokenTrie.from_grammar` encodes every expanded action with the tokenizer (the same call as
`ChatFormat.encode_action`, so the canonical ids of each action are the only path) and stores,
per node, the children and whether the action may end there (then `end_id` is allowed).
Allowed ids per node are precomputed once (lists, tensors and a boolean vocabulary table), which
is cheaper than a per-token Python callback. Compiled tries are kept in an LRU cache keyed by
the grammar (a frozen, hashable dataclass), the tokenizer and `end_id`.
Left out: grammars too large to expand (a regex/CFG automaton would be needed there).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedTokenizerBase

if TYPE_CHECKING:  # the grammar type is plain data from scenarios; only its expand() is used
    from scenarios.grammar import ActionGrammar

EXPAND_LIMIT = 65536
CACHE_SIZE = 512


class TokenTrie:
    """Prefix tree over the token ids of every valid action. Node 0 is the root."""

    def __init__(self, sequences: Sequence[Sequence[int]], end_id: int) -> None:
        if not sequences:
            raise ValueError("the action grammar expands to no actions; give every agent at least one valid action")
        self.end_id = end_id
        self.children: list[dict[int, int]] = [{}]
        self.terminal: list[bool] = [False]
        self.depth = 0  # longest action in tokens, end_id included
        for seq in sequences:
            node = 0
            for tok in seq:
                if tok == end_id:
                    raise ValueError("an action's text encodes to the end-of-turn token; remove it from the grammar")
                nxt = self.children[node].get(tok)
                if nxt is None:
                    nxt = len(self.children)
                    self.children[node][tok] = nxt
                    self.children.append({})
                    self.terminal.append(False)
                node = nxt
            self.terminal[node] = True
            self.depth = max(self.depth, len(seq) + 1)
        # Allowed ids per node, sorted for determinism; end_id where an action may stop.
        self._allowed: list[list[int]] = [
            sorted(ch) + ([end_id] if term else []) for ch, term in zip(self.children, self.terminal, strict=True)
        ]
        self._tables: dict[tuple[int, str], torch.Tensor] = {}

    @classmethod
    def from_grammar(
        cls, grammar: ActionGrammar, tokenizer: PreTrainedTokenizerBase, end_id: int, cache: bool = True
    ) -> TokenTrie:
        """Compile (or fetch from the LRU cache) the trie of `grammar` for `tokenizer`."""
        if not cache:
            return cls._compile(grammar, tokenizer, end_id)
        key = (grammar, id(tokenizer), end_id)
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is tokenizer:
            _CACHE.move_to_end(key)
            return hit[1]
        trie = cls._compile(grammar, tokenizer, end_id)
        _CACHE[key] = (tokenizer, trie)  # the tokenizer is kept so its id() cannot be reused
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
        return trie

    @classmethod
    def _compile(cls, grammar: ActionGrammar, tokenizer: PreTrainedTokenizerBase, end_id: int) -> TokenTrie:
        actions = grammar.expand(limit=EXPAND_LIMIT)
        if not actions:
            return cls([], end_id)
        encoded = tokenizer(list(actions), add_special_tokens=False)["input_ids"]
        return cls(encoded, end_id)

    @property
    def num_nodes(self) -> int:
        return len(self.children)

    def allowed(self, node: int) -> list[int]:
        """Ids allowed at `node` (shared list: do not mutate)."""
        return self._allowed[node]

    def advance(self, node: int, token: int) -> int | None:
        """Node after `token`; None after `end_id` (the action is complete) or an invalid token."""
        return self.children[node].get(token)

    def is_terminal(self, node: int) -> bool:
        return self.terminal[node]

    def mask_table(self, vocab_size: int, device: torch.device | str = "cpu") -> torch.Tensor:
        """Bool tensor [num_nodes, vocab_size]: row n is True where a token is allowed at node n."""
        key = (vocab_size, str(device))
        table = self._tables.get(key)
        if table is None:
            rows = [n for n, ids in enumerate(self._allowed) for _ in ids]
            cols = [i for ids in self._allowed for i in ids]
            if cols and max(cols) >= vocab_size:
                raise ValueError(f"token id {max(cols)} is outside the model's vocabulary of {vocab_size}; "
                                 "the tokenizer does not match the model")
            table = torch.zeros(self.num_nodes, vocab_size, dtype=torch.bool)
            table[rows, cols] = True
            table = table.to(device)
            self._tables[key] = table
        return table

    def accepts(self, ids: Sequence[int]) -> bool:
        """True when `ids` (ending with end_id) is exactly one valid action."""
        node = 0
        for i, tok in enumerate(ids):
            if tok == self.end_id:
                return i == len(ids) - 1 and self.terminal[node]
            nxt = self.children[node].get(tok)
            if nxt is None:
                return False
            node = nxt
        return False


_CACHE: OrderedDict[tuple[object, int, int], tuple[PreTrainedTokenizerBase, TokenTrie]] = OrderedDict()


def clear_cache() -> None:
    """Drop every cached trie (e.g. after retraining a tokenizer in the same process)."""
    _CACHE.clear()
