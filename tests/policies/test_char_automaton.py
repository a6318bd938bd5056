"""Constrained decoding for any tokenizer: the grammar through its characters, checked exhaustively against every
tokenization of every action under a real BPE (a user's tokenizer, no entity tokens)."""

from __future__ import annotations

import functools

import pytest
import torch
from hf_helpers import bpe_tokenizer
from policy_helpers import ActionGrammar, Slot, grammars

from policies.char_automaton import compile_char_dfa, token_texts
from policies.chat import ChatFormat
from policies.constrained import EXPAND_LIMIT, TokenTrie
from policies.grammar_automaton import BoundaryMergeError, compile_dfa
from policies.llm_policy import LLMPolicy
from policies.presets import build_model

# Values next to spaces and digits next to letters: a BPE merges across these boundaries.
MERGING = ActionGrammar((
    ("offer ", Slot("n", ("1", "12", "3")), " to ", Slot("who", ("agent_0", "agent_1", "Rio de Janeiro")), " now"),
    ("go to ", Slot("city", ("Paris", "New York", "Tokyo")), ""),
    ("wait",),
))


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral"])
def tok(request):
    return bpe_tokenizer(request.param)


def _all_tokenizations(text: str, texts: dict[int, str]) -> set[tuple[int, ...]]:
    """Every way to write `text` as a sequence of tokens (exhaustive, by position)."""
    by_text: dict[str, list[int]] = {}
    for i, t in texts.items():
        by_text.setdefault(t, []).append(i)

    @functools.cache
    def rest(pos: int) -> frozenset[tuple[int, ...]]:
        if pos == len(text):
            return frozenset({()})
        out = set()
        for end in range(pos + 1, len(text) + 1):
            for i in by_text.get(text[pos:end], ()):
                out.update((i, *tail) for tail in rest(end))
        return frozenset(out)

    return set(rest(0))


def _paths(trie: TokenTrie) -> set[tuple[int, ...]]:
    out, stack = set(), [(0, ())]
    while stack:
        node, path = stack.pop()
        if trie.is_terminal(node):
            out.add(path)
        stack.extend((nxt, (*path, t)) for t, nxt in trie.children[node].items())
    return out


@pytest.mark.parametrize("grammar", [MERGING, grammars()[1], grammars()[2]], ids=["merging", "answer", "prefix"])
def test_paths_are_exactly_every_tokenization_of_every_action(tok, grammar):
    # short actions: the tokenizations of a long one are exponentially many
    end = ChatFormat(tok).end_id
    trie = TokenTrie.from_automaton(compile_char_dfa(grammar, tok, end), end)
    texts = token_texts(tok)
    expected = set().union(*(_all_tokenizations(a, texts) for a in grammar.expand()))
    assert _paths(trie) == expected
    for action in grammar.expand():  # the canonical ids (what demonstrations use) are one of them
        assert trie.accepts(ChatFormat(tok).encode_action(action))


def test_a_merging_grammar_too_large_to_expand_compiles_through_characters(tok):
    end = ChatFormat(tok).end_id
    with pytest.raises(BoundaryMergeError):
        compile_dfa(MERGING, tok, end)
    trie = TokenTrie.from_grammar(MERGING, tok, end, expand_limit=0)
    assert all(trie.accepts(ChatFormat(tok).encode_action(a)) for a in MERGING.expand())
    assert not trie.accepts(ChatFormat(tok).encode_action("offer 12 to Paris now"))


def test_sampled_actions_are_valid_and_scored_as_sampled(tok):
    # too many actions to expand (a number per offer) and merging: generation runs on the character DFA
    large = ActionGrammar((("offer ", Slot("n", tuple(str(k) for k in range(EXPAND_LIMIT + 1))), " to ",
                            Slot("who", ("agent_0", "Rio de Janeiro")), " now"), ("wait",)))
    with pytest.raises(BoundaryMergeError):
        compile_dfa(large, tok, ChatFormat(tok).end_id)
    model = build_model("tiny-moe", len(tok), seed=0, pad_token_id=tok.pad_token_id)
    policy = LLMPolicy(model, tok, constrained=True, temperature=1.0, max_new_tokens=32, seed=0)
    prompts = [policy.chat.first(f"Task {k}: make an offer or wait.") for k in range(24)]
    gen = policy.generate(prompts, [large] * len(prompts), seed=1)
    trie = TokenTrie.from_grammar(large, tok, policy.end_id)
    for ids, text, fin in zip(gen.token_ids, gen.texts, gen.finished, strict=True):
        assert fin and text in large and trie.accepts(ids), text
    scores = policy.sequence_logprobs(prompts, gen.token_ids, gen.allowed)
    for i, lps in enumerate(gen.logprobs):
        torch.testing.assert_close(scores.logprobs[i, : len(lps)], torch.tensor(lps), atol=1e-4, rtol=0)
