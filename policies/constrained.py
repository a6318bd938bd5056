"""Constrained decoding: an action grammar compiled to a token automaton with allowed ids per node.

`TokenTrie.from_grammar` encodes every expanded action with the tokenizer (the same call as
`ChatFormat.encode_action`, so the canonical ids of each action are the only path) and stores,
per node, the children and whether the action may end there (then `end_id` is allowed).
A grammar with more than `expand_limit` actions (offers that are products of slots) is compiled
part by part instead (`policies.grammar_automaton`): a DFA whose nodes are shared by many actions
(a DAG, same interface), checked at compile time to give the canonical ids on sampled actions.
Allowed ids per node are precomputed once (lists, tensors and a boolean vocabulary table), which
is cheaper than a per-token Python callback. Compiled automata are kept in an LRU cache keyed by
the grammar (a frozen, hashable dataclass), the tokenizer, `end_id` and `expand_limit`.
A large grammar whose tokenizer merges across the boundaries of its parts (a user's BPE) is compiled
through its characters instead (`policies.char_automaton`: every tokenization of an action is a path).
Left out: regex or recursive grammars.
"""

from __future__ import annotations

import gc
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

import torch
from transformers import PreTrainedTokenizerBase

from policies.char_automaton import compile_char_dfa
from policies.grammar_automaton import Automaton, BoundaryMergeError, compile_dfa

if TYPE_CHECKING:  # the grammar type is plain data from scenarios; only expand() and its templates are used
    from scenarios.grammar import ActionGrammar

# Grammars of at most this many actions become a trie of their expansion (about one node per token
# of each action); larger ones a part-wise DFA, far smaller for products of slots (a 5-agent
# bargaining offer grammar: 36750 actions, a 166k-node trie against a 239-node DFA), and so far
# cheaper to build, since the trie tokenizes every expansion and the DFA only each slot's values.
# Every grammar of the other scenarios has at most a few dozen actions, so they keep the trie.
EXPAND_LIMIT = 1024
CACHE_SIZE = 512


@contextmanager
def _collection_paused() -> Iterator[None]:
    """Python's cycle collector off for a compile, as it was before after it. An automaton is thousands of new
    dicts and lists, and that many new containers start full collections that walk every object the process
    holds (the cached automata among them): they took about as long as the compile itself. Nothing a
    compile builds forms a cycle, so reference counting frees all it drops."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class TokenTrie:
    """Prefix tree over the token ids of every valid action, or a DFA (a DAG) for grammars too large
    to expand. Node 0 is the root; `children[node]` maps a token to the next node."""

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
        self._index()

    def _index(self) -> None:
        # Allowed ids per node, sorted for determinism; end_id where an action may stop.
        self._allowed: list[list[int]] = [
            sorted(ch) + ([self.end_id] if term else [])
            for ch, term in zip(self.children, self.terminal, strict=True)
        ]
        self._tables: dict[tuple[int, str], torch.Tensor] = {}

    @classmethod
    def from_automaton(cls, automaton: Automaton, end_id: int) -> TokenTrie:
        """Wrap a DFA from `policies.grammar_automaton`; raises if it rejects a checked action."""
        trie = cls.__new__(cls)
        trie.end_id = end_id
        trie.children, trie.terminal, trie.depth = automaton.children, automaton.terminal, automaton.depth
        trie._index()
        for ids in automaton.samples:
            if not trie.accepts([*ids, end_id]):  # a compiler bug, never the user's doing
                raise RuntimeError(f"the grammar automaton rejects the canonical ids {ids} of a valid action")
        return trie

    @classmethod
    def from_grammar(
        cls, grammar: ActionGrammar, tokenizer: PreTrainedTokenizerBase, end_id: int, cache: bool = True,
        expand_limit: int = EXPAND_LIMIT,
    ) -> TokenTrie:
        """Compile (or fetch from the LRU cache) the automaton of `grammar` for `tokenizer`.

        Grammars of at most `expand_limit` actions become a trie of their expansion; larger ones a
        DFA compiled part by part (`expand_limit=0` forces that, e.g. to compare both).
        """
        if not cache:
            with _collection_paused():
                return cls._compile(grammar, tokenizer, end_id, expand_limit)
        key = (grammar, id(tokenizer), end_id, expand_limit)
        hit = _CACHE.get(key)
        if hit is not None and hit[0] is tokenizer:
            _CACHE.move_to_end(key)
            return hit[1]
        with _collection_paused():
            trie = cls._compile(grammar, tokenizer, end_id, expand_limit)
        _CACHE[key] = (tokenizer, trie)  # the tokenizer is kept so its id() cannot be reused
        if len(_CACHE) > CACHE_SIZE:
            _CACHE.popitem(last=False)
        return trie

    @classmethod
    def _compile(
        cls, grammar: ActionGrammar, tokenizer: PreTrainedTokenizerBase, end_id: int, expand_limit: int
    ) -> TokenTrie:
        try:
            actions = grammar.expand(limit=expand_limit)
        except ValueError:  # more than expand_limit actions: the part-wise DFA is far smaller
            try:
                return cls.from_automaton(compile_dfa(grammar, tokenizer, end_id), end_id)
            except BoundaryMergeError:  # a tokenizer that merges across parts: through the characters
                return cls.from_automaton(compile_char_dfa(grammar, tokenizer, end_id), end_id)
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


_CACHE: OrderedDict[tuple[object, int, int, int], tuple[PreTrainedTokenizerBase, TokenTrie]] = OrderedDict()


def clear_cache() -> None:
    """Drop every cached automaton (e.g. after retraining a tokenizer in the same process)."""
    _CACHE.clear()
