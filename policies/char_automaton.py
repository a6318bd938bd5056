"""An action grammar compiled to a token DFA through its characters, for any tokenizer.

The part-wise compiler (`policies.grammar_automaton`) needs the tokenizer to split every action at its
parts' boundaries; a user's BPE merges a quote into the word after it, a space into the next name, and
that compiler refuses. This one never tokenizes an action: the grammar becomes a character NFA (each part
a trie over its values' characters, a finished value leading into the next part), and the token DFA is its
subset construction over the vocabulary, walking a trie of every token's text jointly with the NFA so that
only tokens whose whole text the grammar can read next are tried. A token DFA node is a set of character
positions; a token is allowed there when all its characters can be read from it. Every tokenization of a
valid action is a path (the canonical one, what demonstrations use, included: checked on sampled actions),
and nothing else is.
`depth` is the longest canonical tokenization among the checked actions plus the end token: a policy that
spells an action out in smaller tokens than the tokenizer would may need more, and an action cut at
`max_new_tokens` is malformed text, as with free decoding.
Left out: minimizing the DFA, and tokens whose text is not plain (byte fragments of multi-byte characters
never match the grammar's printable text and are never allowed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase

from policies.grammar_automaton import Automaton, Trie, sampled_actions, trie_of
from policies.per_tokenizer import PerTokenizer

if TYPE_CHECKING:
    from scenarios.grammar import ActionGrammar

CState = tuple[int, int, int]  # (template, part, node of that part's character trie)
ACCEPT: CState = (-1, -1, -1)


@dataclass
class _Vocabulary:
    trie: Trie  # over every token's text, character by character
    tokens: list[list[int]]  # per node, the token ids whose text ends there


_VOCABULARIES: PerTokenizer[_Vocabulary] = PerTokenizer()


def token_texts(tokenizer: PreTrainedTokenizerBase) -> dict[int, str]:
    """The text each non-special token stands for inside a longer text (a leading word-boundary marker `▁`
    counts as the space it stands for, which decoding a lone token drops)."""
    special = set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}
    out = {}
    for i in range(len(tokenizer)):
        if i in special:
            continue
        text = tokenizer.decode([i], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        piece = tokenizer.convert_ids_to_tokens(i)
        if isinstance(piece, str) and piece.startswith("\u2581") and not text.startswith(" "):
            text = " " + text
        if text:
            out[i] = text
    return out


def vocabulary_trie(tokenizer: PreTrainedTokenizerBase) -> _Vocabulary:
    """A character trie over every token's text (built once per tokenizer object)."""
    hit = _VOCABULARIES.get(tokenizer)
    if hit is not None:
        return hit
    texts = token_texts(tokenizer)
    trie, ends = trie_of(texts.values())
    tokens: list[list[int]] = [[] for _ in trie.children]
    for token, node in zip(texts, ends, strict=True):
        tokens[node].append(token)
    vocab = _Vocabulary(trie, tokens)
    _VOCABULARIES.put(tokenizer, vocab)
    return vocab


def _closure(states: Iterable[CState], parts: list[list[Trie]]) -> frozenset[CState]:
    """Follow finished values into the next part; a finished last part adds ACCEPT."""
    stack, seen = list(states), set()
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        if state == ACCEPT:
            continue
        t, p, node = state
        if parts[t][p].ends[node]:
            stack.append(ACCEPT if p + 1 == len(parts[t]) else (t, p + 1, 0))
    # a state with nothing left to read is only there for its epsilon move
    return frozenset(s for s in seen if s == ACCEPT or parts[s[0]][s[1]].children[s[2]])


def _read(states: frozenset[CState], ch: str, parts: list[list[Trie]]) -> frozenset[CState]:
    moved = []
    for state in states:
        if state != ACCEPT:
            t, p, node = state
            nxt = parts[t][p].children[node].get(ch)
            if nxt is not None:
                moved.append((t, p, nxt))
    return _closure(moved, parts) if moved else frozenset()


def compile_char_dfa(grammar: ActionGrammar, tokenizer: PreTrainedTokenizerBase, end_id: int) -> Automaton:
    """The token DFA of `grammar` for `tokenizer` via its characters (see module docstring)."""
    parts = [[trie_of((part,) if isinstance(part, str) else part.values)[0] for part in template]
             for template in grammar.templates]
    if not parts:
        raise ValueError("the action grammar expands to no actions; give every agent at least one valid action")
    vocab = vocabulary_trie(tokenizer)
    root = _closure([(t, 0, 0) for t, chain in enumerate(parts) if chain]
                    + [ACCEPT for chain in parts if not chain], parts)
    index, queue = {root: 0}, [root]
    children: list[dict[int, int]] = [{}]
    for node, states in enumerate(queue):  # the queue grows while it is walked
        moves: dict[int, frozenset[CState]] = {}
        stack = [(0, states)]
        while stack:  # the vocabulary trie and the grammar read together; a dead end prunes its subtree
            vnode, here = stack.pop()
            for ch, vnext in vocab.trie.children[vnode].items():
                there = _read(here, ch, parts)
                if there:
                    for tok in vocab.tokens[vnext]:
                        moves[tok] = there
                    stack.append((vnext, there))
        for tok in sorted(moves):
            target = index.get(moves[tok])
            if target is None:
                target = index[moves[tok]] = len(queue)
                queue.append(moves[tok])
                children.append({})
            children[node][tok] = target
    terminal = [ACCEPT in states for states in queue]
    if end_id in {t for row in children for t in row}:
        raise ValueError("an action's text reads as the end-of-turn token; remove it from the grammar")
    samples = [list(ids) for ids in tokenizer(sampled_actions(grammar), add_special_tokens=False)["input_ids"]]
    return Automaton(children, terminal, max(len(s) for s in samples) + 1, samples)
