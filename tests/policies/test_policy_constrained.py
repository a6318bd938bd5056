"""TokenTrie: exactly the grammar's actions, cached, with end allowed at terminals."""

from policy_helpers import ActionGrammar, grammars

from policies.chat import ChatFormat
from policies.constrained import TokenTrie


def _walk(trie, prefix, node, out):
    for tok in trie.allowed(node):
        if tok == trie.end_id:
            out.append(prefix)
        else:
            _walk(trie, prefix + [tok], trie.advance(node, tok), out)


def test_trie_enumerates_grammar(tokenizer):
    chat = ChatFormat(tokenizer)
    for g in grammars():
        trie = TokenTrie.from_grammar(g, tokenizer, chat.end_id)
        paths: list[list[int]] = []
        _walk(trie, [], 0, paths)
        assert sorted(chat.decode_action(p) for p in paths) == sorted(g.expand())
        for action in g.expand():
            assert trie.accepts(chat.encode_action(action))
        assert not trie.accepts(chat.encode_action("not an action"))


def test_prefix_action_allows_end_and_more(tokenizer):
    chat = ChatFormat(tokenizer)
    trie = TokenTrie.from_grammar(ActionGrammar((("yes",), ("yes please",))), tokenizer, chat.end_id)
    node = 0
    for tok in chat.encode_text("yes"):
        node = trie.advance(node, tok)
    assert chat.end_id in trie.allowed(node) and len(trie.allowed(node)) > 1
    table = trie.mask_table(len(tokenizer))
    assert table.shape == (trie.num_nodes, len(tokenizer))
    assert sorted(table[node].nonzero().flatten().tolist()) == sorted(trie.allowed(node))


def test_cache(tokenizer):
    chat = ChatFormat(tokenizer)
    g = grammars()[0]
    same = ActionGrammar(tuple(g.templates))  # equal value, different object
    assert TokenTrie.from_grammar(g, tokenizer, chat.end_id) is TokenTrie.from_grammar(same, tokenizer, chat.end_id)
    assert TokenTrie.from_grammar(g, tokenizer, chat.end_id, cache=False) is not \
        TokenTrie.from_grammar(g, tokenizer, chat.end_id)
