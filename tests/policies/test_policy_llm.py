"""LLMPolicy: grammar-valid constrained decoding, KV-cache correctness, logprob consistency."""

import pytest
import torch
from policy_helpers import grammars

from policies.constrained import TokenTrie
from policies.llm_policy import LLMPolicy


def _prompts(policy, n, offset=0):
    # Differing lengths (and a later-turn prompt) so left padding is exercised.
    out = []
    for k in range(n):
        first = policy.chat.first("Task: weather in Paris on mon? " * (1 + (k + offset) % 5) + str(k))
        if k % 3 == 2:
            first = first + policy.chat.encode_action("answer(21C)") + policy.chat.next(f"Result: {k * 37}")
        out.append(first)
    return out


def test_constrained_always_in_grammar(policy):
    gs = grammars()
    total = 0
    for round_ in range(4):
        prompts = _prompts(policy, 64, offset=round_)
        batch = [gs[(k + round_) % len(gs)] for k in range(64)]
        gen = policy.generate(prompts, batch, seed=round_)
        for g, text, ids, fin in zip(batch, gen.texts, gen.token_ids, gen.finished, strict=True):
            assert fin and ids[-1] == policy.end_id
            assert text in g, text
            assert TokenTrie.from_grammar(g, policy.tokenizer, policy.end_id).accepts(ids)
            total += 1
    assert total >= 200


def test_greedy_batched_equals_single(policy):
    gs = grammars()
    prompts = _prompts(policy, 6)
    batch = [gs[0], None, gs[1], None, gs[3], gs[2]]
    policy.max_new_tokens = 24
    together = policy.generate(prompts, batch, greedy=True)
    for i in range(len(prompts)):
        alone = policy.generate([prompts[i]], [batch[i]], greedy=True)
        assert alone.token_ids[0] == together.token_ids[i]
        assert alone.logprobs[0] == pytest.approx(together.logprobs[i], abs=1e-4)


@pytest.mark.parametrize("constrained", [True, False])
def test_rollout_logprobs_match_training_forward(policy, constrained):
    policy.constrained = constrained
    policy.temperature = 0.7
    policy.max_new_tokens = 30
    gs = grammars()
    prompts = _prompts(policy, 12)
    gen = policy.generate(prompts, [gs[k % len(gs)] for k in range(12)], seed=5)
    scores = policy.sequence_logprobs(prompts, gen.token_ids, gen.allowed)
    for i, lps in enumerate(gen.logprobs):
        assert scores.mask[i].sum().item() == len(lps)
        torch.testing.assert_close(scores.logprobs[i, : len(lps)], torch.tensor(lps), atol=1e-4, rtol=0)
    assert torch.isfinite(scores.entropy).all() and (scores.entropy[scores.mask] >= 0).all()
    if constrained:
        assert all(a is not None for a in gen.allowed)
    else:
        assert all(a is None for a in gen.allowed)


def test_router_aux_loss_and_grad(policy):
    prompts = _prompts(policy, 4)
    gen = policy.generate(prompts, grammars(), seed=1)
    policy.model.train()
    policy.model.zero_grad()
    scores = policy.sequence_logprobs(prompts, gen.token_ids, gen.allowed, with_router_logits=True)
    assert scores.aux_loss is not None and torch.isfinite(scores.aux_loss) and scores.aux_loss > 0
    assert len(scores.router_logits) == policy.model.config.num_hidden_layers
    load = scores.expert_load
    assert load.shape == (policy.model.config.num_hidden_layers, policy.model.config.num_experts)
    torch.testing.assert_close(load.sum(-1), torch.ones(load.shape[0]))
    assert 0 < scores.expert_load_entropy() <= torch.log(torch.tensor(8.0)) + 1e-5
    (-(scores.logprobs.sum()) + scores.aux_loss).backward()
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    policy.model.zero_grad()
    assert policy.model.training  # generate restored the mode
    policy.generate(prompts[:1], [None], seed=0)
    assert policy.model.training
    policy.model.eval()


def test_free_generation_stops_at_max_new_tokens(model, tokenizer):
    policy = LLMPolicy(model, tokenizer, constrained=False, max_new_tokens=5)
    gen = policy.generate(_prompts(policy, 8), [None] * 8, seed=0)
    assert all(len(ids) <= 5 for ids in gen.token_ids)
    assert all(f or len(ids) == 5 for f, ids in zip(gen.finished, gen.token_ids, strict=True))
    assert not all(gen.finished)
    special = set(policy.chat.structural_ids)
    assert not any(t in special for ids in gen.token_ids for t in ids)
    assert all(policy.end_id not in ids[:-1] for ids in gen.token_ids)


def test_seeded_and_errors(policy):
    prompts = _prompts(policy, 5)
    a = policy.generate(prompts, [None] * 5, seed=11)
    b = policy.generate(prompts, [None] * 5, seed=11)
    assert a.token_ids == b.token_ids
    policy.max_new_tokens = 3
    with pytest.raises(ValueError, match="raise max_new_tokens"):
        policy.generate(prompts[:1], [grammars()[0]])
    with pytest.raises(ValueError, match="one grammar"):
        policy.generate(prompts, [None])
