"""Exploration (`explore`): an action's first real decision drawn uniformly among what its grammar allows."""

import torch
from policy_helpers import ActionGrammar, Slot

from policies.llm_policy import LLMPolicy
from policies.sampling import explore_first_decisions, exploring_rows


def test_a_pending_row_explores_at_its_first_open_decision_only():
    chosen = torch.tensor([7, 8, 9])
    pending = [True, True, False]
    options = {0: [5], 1: [3, 4, 6], 2: [1, 2]}  # row 0's token is forced: it waits for a real decision
    out = explore_first_decisions(chosen, [0, 1, 2], pending, options.__getitem__, torch.tensor([0.9, 0.5, 0.0]))
    assert out.tolist() == [7, 4, 9] and chosen.tolist() == [7, 8, 9]
    assert pending == [True, False, False]
    # batch positions follow `rows`, draws the call's row index
    pending = [False, False, True]
    out = explore_first_decisions(torch.tensor([0, 0]), [0, 2], pending, options.__getitem__, torch.tensor([0, 0, 0.99]))
    assert out.tolist() == [0, 2] and pending == [False, False, False]


def test_exploring_rows_draws_nothing_at_a_share_of_zero():
    g = torch.Generator().manual_seed(3)
    assert exploring_rows(0.0, [True] * 5, g) == [False] * 5
    assert torch.rand(1, generator=g).item() == torch.rand(1, generator=torch.Generator().manual_seed(3)).item()
    assert exploring_rows(0.999, [True, False, True], torch.Generator().manual_seed(0)) == [True, False, True]


def _cold(policy: LLMPolicy) -> LLMPolicy:
    # nearly greedy sampling: without exploration every row takes the model's favourite first token
    return LLMPolicy(policy.model, policy.tokenizer, constrained=True, temperature=0.02, max_new_tokens=40, seed=0)


def test_exploring_rows_reach_first_tokens_the_policy_never_samples(policy):
    policy = _cold(policy)
    grammar = ActionGrammar(tuple((f"answer({city})",) for city in ("Paris", "Tokyo", "Oslo", "New York"))
                            + (("give up",),))
    prompts = [policy.chat.first(f"Task: weather in Paris on mon? {k}") for k in range(48)]
    plain = policy.generate(prompts, [grammar] * 48, seed=1)
    explored = policy.generate(prompts, [grammar] * 48, seed=1, explore=1.0)
    assert len(set(plain.texts)) == 1 and not any(plain.explored)
    assert all(explored.explored) and len(set(explored.texts)) >= 3
    assert all(text in grammar for text in explored.texts)
    # the recorded log-probs are the policy's own (what the update's ratio starts from), not the uniform draw's
    scores = policy.sequence_logprobs(prompts, explored.token_ids, explored.allowed)
    for i, lps in enumerate(explored.logprobs):
        torch.testing.assert_close(scores.logprobs[i, : len(lps)], torch.tensor(lps), atol=1e-3, rtol=1e-4)
    assert min(min(lps) for lps in explored.logprobs) < -5  # an explored token the policy would not have sampled


def test_a_share_of_rows_explores_and_greedy_or_free_rows_never_do(policy):
    grammar = ActionGrammar(((' {"tool": "get_weather", "args": {"city": "', Slot("city", ("Paris", "Oslo", "Tokyo")),
                              '"}}'),))
    prompts = [policy.chat.first(f"Task: weather? {k}") for k in range(200)]
    some = policy.generate(prompts, [grammar] * 200, seed=2, explore=0.25)
    assert 30 <= sum(some.explored) <= 70  # 50 expected
    assert policy.generate(prompts[:8], [grammar] * 8, greedy=True, explore=1.0).texts == \
        policy.generate(prompts[:8], [grammar] * 8, greedy=True).texts
    free = policy.generate(prompts[:4], [None] * 4, seed=2, explore=1.0)
    assert not any(free.explored)
    # no exploration samples exactly what a call without the argument samples
    assert policy.generate(prompts[:16], [grammar] * 16, seed=5, explore=0.0).token_ids == \
        policy.generate(prompts[:16], [grammar] * 16, seed=5).token_ids
