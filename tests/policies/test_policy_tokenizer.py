"""Tokenizer: exact round trip, digits split, entities whole, chat template, disk cache."""

import json

from policy_helpers import ENTITIES, corpus

from policies.chat import ChatFormat
from policies.tokenizer import SPECIAL_TOKENS, load_or_train_tokenizer, train_tokenizer


def test_round_trip(tokenizer):
    samples = corpus(50, seed=3) + ['  {"a": [1, 2.50, -3]}\n\ttabs  and  spaces ', "~!@#$%^&*()_+`|<>?", ""]
    for s in samples:
        ids = tokenizer.encode(s, add_special_tokens=False)
        assert tokenizer.decode(ids) == s
        assert tokenizer.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False) == s


def test_digits_split_individually(tokenizer):
    for number in ["529", "708", "1234567890", "x12y"]:
        toks = tokenizer.convert_ids_to_tokens(tokenizer.encode(number, add_special_tokens=False))
        digits = [t for t in toks if any(c.isdigit() for c in t)]
        assert all(len(t.lstrip("Ġ")) == 1 for t in digits), toks


def test_entities_are_single_tokens_in_context(tokenizer):
    for e in ENTITIES:
        eid = tokenizer.convert_tokens_to_ids(e)
        for text in [e, json.dumps({"city": e}), f"({e})", f"{e}.", f"in {e}, then", f'"{e}"}}']:
            ids = tokenizer.encode(text, add_special_tokens=False)
            assert ids.count(eid) == 1, (e, text, tokenizer.convert_ids_to_tokens(ids))
            assert tokenizer.decode(ids) == text


def test_special_tokens_and_template(tokenizer):
    for s in SPECIAL_TOKENS:
        assert tokenizer.convert_tokens_to_ids(s) != tokenizer.unk_token_id
    chat = ChatFormat(tokenizer)
    messages = [{"role": "user", "content": "Task: weather in Paris 12"},
                {"role": "assistant", "content": 'answer("Paris")'},
                {"role": "tool", "content": "Result: 21C"}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    ids = tokenizer.encode(rendered, add_special_tokens=False)
    expected = chat.first(messages[0]["content"]) + chat.encode_action(messages[1]["content"]) + \
        chat.next(messages[2]["content"])
    assert ids == expected


def test_cache_hit_is_identical(tmp_path):
    calls = []

    def texts():
        calls.append(1)
        return corpus(100)

    a = load_or_train_tokenizer(tmp_path, texts, ENTITIES, 400)
    b = load_or_train_tokenizer(tmp_path, texts, ENTITIES, 400)
    assert len(list(tmp_path.glob("tokenizer-*"))) == 1
    s = corpus(5, seed=9)[2] + " New York"
    assert a.encode(s) == b.encode(s) and len(a) == len(b)
    assert b.decode(b.encode(s, add_special_tokens=False)) == s
    load_or_train_tokenizer(tmp_path, texts, ENTITIES + ("Lima",), 400)
    assert len(list(tmp_path.glob("tokenizer-*"))) == 2  # entities are part of the key


def test_vocab_size_budget():
    tok = train_tokenizer(corpus(200), ENTITIES, vocab_size=300)
    assert len(tok) <= 300 + len(ENTITIES)
