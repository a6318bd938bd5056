"""ChatFormat: prompts and conversations are concatenations of the same pieces."""

import pytest

from policies.chat import ChatFormat


def test_prefix_property(tokenizer):
    chat = ChatFormat(tokenizer)
    obs = ["Task: weather in Paris on mon?", "Result: 21C", "Result: ok 42"]
    acts = [' {"tool": "get_weather", "args": {"city": "Paris"}}', "answer(21C)", "done"]
    ids, mask, starts = chat.conversation(obs, acts)
    pieces = chat.first(obs[0]) + chat.encode_action(acts[0]) + chat.next(obs[1]) + \
        chat.encode_action(acts[1]) + chat.next(obs[2]) + chat.encode_action(acts[2])
    assert ids == pieces
    assert len(mask) == len(ids)
    masked = [i for i, m in zip(ids, mask, strict=True) if m]
    assert masked == sum((chat.encode_action(a) for a in acts), [])
    # rollout-style: the prompt of turn 2 is a prefix of the conversation
    prompt2 = chat.first(obs[0]) + chat.encode_action(acts[0]) + chat.next(obs[1])
    assert ids[: len(prompt2)] == prompt2
    # each action starts right after its prompt's assistant marker
    assert starts[1] == len(prompt2) and all(ids[s - 1] == chat.assistant_id for s in starts)


def test_layout(tokenizer):
    chat = ChatFormat(tokenizer)
    ids = tokenizer.convert_tokens_to_ids
    assert chat.first("hi") == [ids("<|bos|>"), ids("<|user|>"), *chat.encode_text("hi"), chat.end_id, chat.assistant_id]
    assert chat.next("ok") == [ids("<|tool|>"), *chat.encode_text("ok"), chat.end_id, chat.assistant_id]
    assert chat.end_id == ids("<|end|>") and chat.assistant_id == ids("<|assistant|>")
    assert chat.pieces.observation_role == "tool"
    assert chat.encode_action("yes")[-1] == chat.end_id
    assert chat.decode_action(chat.encode_action("yes")) == "yes"
    assert chat.end_id not in chat.structural_ids
    assert set(chat.structural_ids) == {ids(t) for t in ("<|pad|>", "<|bos|>", "<|user|>", "<|assistant|>", "<|tool|>")}


def test_id_actions_and_trailing_observation(tokenizer):
    chat = ChatFormat(tokenizer)
    ids, mask, _ = chat.conversation(["a", "b"], [chat.encode_action("x")])
    assert ids == chat.first("a") + chat.encode_action("x") + chat.next("b")
    assert sum(mask) == len(chat.encode_action("x"))
    with pytest.raises(ValueError, match="observation"):
        chat.conversation(["a"], ["x", "y"])


def test_batched_encoding_matches_one_text_at_a_time(tokenizer):
    chat = ChatFormat(tokenizer)
    texts = ["Task: weather in Paris on mon?", "", "Result: 21C  twice  spaced", "x" * 300, "Result: ok 42\nturn 2"]
    assert chat.encode_texts(texts) == [chat.encode_text(t) for t in texts]
    assert chat.first_many(texts) == [chat.first(t) for t in texts]
    assert chat.next_many(texts) == [chat.next(t) for t in texts]
    assert chat.encode_texts([]) == []
    # a repeated text is encoded once, and each caller still gets a list of its own
    twice = chat.encode_texts(["Result: ok 42", "Result: ok 42"])
    assert twice[0] == twice[1] == chat.encode_text("Result: ok 42") and twice[0] is not twice[1]


def test_many_conversations_equal_each_alone(tokenizer):
    from policies.chat import Dialogue

    chat = ChatFormat(tokenizer)
    ids_action = chat.encode_action("done")
    dialogues = [
        Dialogue(["Task: weather in Paris?", "Result: 21C"], ["get_weather(Paris)", "answer(21C)"]),
        Dialogue(["Result: ok 42", "x", "trailing"], [ids_action, ""], trained=[True, False], hints=[[5, 6], []]),
        Dialogue(["only an observation"], []),
    ]
    together = chat.conversations(dialogues)
    assert together == [chat.conversation(*d) for d in dialogues]
    assert together[1].input_ids[together[1].action_starts[0]:][:len(ids_action)] == ids_action
