"""ChatFormat reads any tokenizer's chat template: prompts are the template's own rendering, token for token."""

import pytest
from hf_helpers import bpe_tokenizer

from policies.chat import ChatFormat

OBS = ["Task: weather in Paris on mon? Tools: get_weather(city, day)", "Result: 21C sunny", "Result: ok 42"]
ACTS = [' {"tool": "get_weather", "args": {"city": "Paris", "day": "mon"}}', "answer(21C)"]


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral"])
def family_tokenizer(request):
    return request.param, bpe_tokenizer(request.param)


def test_prompts_are_the_templates_rendering(family_tokenizer):
    family, tok = family_tokenizer
    chat = ChatFormat(tok)
    role = chat.pieces.observation_role
    assert role == ("tool" if family == "qwen3_moe" else "user")  # [INST] refuses a tool turn
    messages = [{"role": "user", "content": OBS[0]}, {"role": "assistant", "content": ACTS[0]},
                {"role": role, "content": OBS[1]}, {"role": "assistant", "content": ACTS[1]},
                {"role": role, "content": OBS[2]}]
    whole = tok.encode(tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False),
                       add_special_tokens=False)
    ids, mask, starts = chat.conversation(OBS, ACTS)
    assert ids == whole
    assert [ids[s - 1] for s in starts] == [chat.assistant_id] * 2
    actions = [i for i, m in zip(ids, mask, strict=True) if m]
    assert actions == chat.encode_action(ACTS[0]) + chat.encode_action(ACTS[1])
    assert chat.end_id == tok.convert_tokens_to_ids(tok.eos_token)
    assert chat.decode_action(chat.encode_action(ACTS[1])) == ACTS[1]
    assert chat.end_id not in chat.structural_ids and chat.assistant_id not in chat.structural_ids
    assert chat.pad_id in (tok.pad_token_id, chat.end_id)


def test_entities_span_several_tokens(family_tokenizer):
    _, tok = family_tokenizer
    chat = ChatFormat(tok)
    assert len(chat.encode_text("Rio de Janeiro")) > 1  # no entity tokens: a user's tokenizer splits names


def test_template_without_a_chat_template_is_refused():
    tok = bpe_tokenizer("qwen3_moe")
    tok.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        ChatFormat(tok)


def test_template_that_rewrites_earlier_turns_is_refused():
    tok = bpe_tokenizer("qwen3_moe")
    # drops the content of every assistant turn but the last one (as templates that hide past reasoning do)
    tok.chat_template = (
        "{%- for m in messages %}<|im_start|>{{ m.role }}\n"
        "{%- if m.role != 'assistant' or loop.index0 >= messages|length - 2 %}{{ m.content }}{%- endif %}"
        "<|im_end|>\n{%- endfor %}{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}")
    with pytest.raises(ValueError, match="prefix-stable|differently|differs"):
        ChatFormat(tok)


def test_template_that_does_not_end_a_turn_with_a_special_token_is_refused():
    tok = bpe_tokenizer("qwen3_moe")
    tok.chat_template = ("{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}"
                         "{% if add_generation_prompt %}assistant: {% endif %}")
    with pytest.raises(ValueError, match="special token"):
        ChatFormat(tok)
