"""LoRA adapters on one frozen base: each view acts as its own model, the base view as the untouched model,
nothing duplicates the base, and the checkpoint format (plain base + peft adapters) reads back exactly."""

from __future__ import annotations

import copy

import pytest
import torch
from hf_helpers import bpe_tokenizer, save_checkpoint

from policies.adapters import BaseView, SharedBase, load_adapters
from policies.chat import ChatFormat
from policies.llm_policy import LLMPolicy
from policies.presets import build_model


@pytest.fixture(scope="module", params=["qwen3_moe", "mixtral"])
def family(request, tmp_path_factory):
    tok = bpe_tokenizer(request.param)
    return request.param, tok, save_checkpoint(tmp_path_factory.mktemp(request.param) / "m", request.param, tok)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


def _nudge(view, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in view.named_parameters():
            if "lora_B" in name:
                p.add_(0.05 * torch.randn(p.shape, generator=g))


def test_views_share_one_frozen_base(family):
    _, tok, folder = family
    plain = build_model(str(folder), len(tok))
    ids = torch.tensor([tok.encode("Task: weather in Paris on mon?")])
    before = _logits(plain, ids)
    shared = SharedBase(build_model(str(folder), len(tok)), rank=4, alpha=8)
    a = shared.view(shared.names[0])
    base_params = sum(p.numel() for p in BaseView(shared).parameters())
    b = copy.deepcopy(a)  # a second policy: a new adapter, not a second model
    assert sum(p.numel() for p in BaseView(shared).parameters()) == base_params
    assert {id(p) for p in a.parameters()}.isdisjoint(id(p) for p in b.parameters())
    assert all(p.requires_grad for p in a.parameters()) and not any(p.requires_grad for p in BaseView(shared).parameters())
    _nudge(a, 0)
    assert torch.allclose(_logits(BaseView(shared), ids), before, atol=1e-5)  # the reference: adapters off
    assert torch.allclose(_logits(b, ids), before, atol=1e-5)  # LoRA starts as a zero update
    assert not torch.allclose(_logits(a, ids), before, atol=1e-3)
    assert torch.allclose(_logits(a, ids), _logits(a, ids))  # switching back and forth changes nothing
    assert BaseView(shared).state_dict() == {}


def test_checkpoint_format_reads_back_exactly(family, tmp_path):
    _, tok, folder = family
    shared = SharedBase(build_model(str(folder), len(tok)), rank=4, alpha=8, first="agent_0")
    views = {"agent_0": shared.view("agent_0"), "agent_1": shared.add("agent_1", copy_from="agent_0")}
    _nudge(views["agent_0"], 1)
    _nudge(views["agent_1"], 2)
    ids = torch.tensor([tok.encode("Result: 21C sunny, then answer")])
    expected = {name: _logits(v, ids) for name, v in views.items()}
    BaseView(shared).save_pretrained(tmp_path / "ckpt")
    for name, v in views.items():
        v.save_pretrained(tmp_path / "ckpt" / "adapters" / name)
    base = build_model(str(tmp_path / "ckpt"), len(tok))  # a plain folder: loads without peft
    assert torch.allclose(_logits(base, ids), _logits(build_model(str(folder), len(tok)), ids), atol=1e-6)
    loaded = load_adapters(base, {n: tmp_path / "ckpt" / "adapters" / n for n in views})
    for name, v in loaded.items():
        assert torch.allclose(_logits(v, ids), expected[name], atol=1e-5), name


def test_state_dict_moves_an_adapter_between_bases(family):
    _, tok, folder = family
    one = SharedBase(build_model(str(folder), len(tok)), rank=4, alpha=8).view("policy")
    _nudge(one, 3)
    two = SharedBase(build_model(str(folder), len(tok)), rank=4, alpha=8).view("policy")
    two.load_state_dict(one.state_dict())
    ids = torch.tensor([tok.encode("Task: book the cheapest flight")])
    assert torch.allclose(_logits(one, ids), _logits(two, ids), atol=1e-6)


def test_a_policy_on_an_adapter_decodes_and_scores_with_it(family):
    _, tok, folder = family
    shared = SharedBase(build_model(str(folder), len(tok)), rank=4, alpha=8)
    adapted = LLMPolicy(shared.view("policy"), tok, constrained=False, max_new_tokens=6, seed=0)
    _nudge(adapted.model, 4)
    base = LLMPolicy(BaseView(shared), tok, constrained=False, max_new_tokens=6, seed=0)
    plain = LLMPolicy(build_model(str(folder), len(tok)), tok, constrained=False, max_new_tokens=6, seed=0)
    prompt = [ChatFormat(tok).first("Task: weather in Oslo on tue?")]
    outs = {k: p.generate(prompt, [None], greedy=True) for k, p in
            {"adapted": adapted, "base": base, "plain": plain}.items()}
    assert outs["base"].token_ids == outs["plain"].token_ids
    ids = outs["adapted"].token_ids[0]
    seq, span = prompt[0] + ids, [(len(prompt[0]), len(ids))]
    scored = {k: p.span_logprobs([seq], [span], [[None]]).logprobs for k, p in
              {"adapted": adapted, "base": base, "plain": plain}.items()}
    assert torch.allclose(scored["adapted"][0, :len(ids)], torch.tensor(outs["adapted"].logprobs[0]), atol=1e-4)
    assert torch.allclose(scored["base"], scored["plain"], atol=1e-5)
    assert not torch.allclose(scored["adapted"], scored["base"], atol=1e-3)
