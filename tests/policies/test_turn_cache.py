"""TurnCache: a later turn served from the kept KV cache gives the same actions and logprobs as re-reading."""

import pytest
import torch
from policy_helpers import grammars

from policies.turn_cache import TurnCache


def _first_turn(policy, n):
    return [policy.chat.first("Task: weather in Paris on mon? " * (1 + k % 4) + str(k)) for k in range(n)]


def _next_turn(policy, prompts, gen, k0=0):
    # prompt + generated action + a new observation of a different length per row
    return [list(p) + list(ids) + policy.chat.next(f"Result: {(k + k0) * 37} " * (1 + k % 3))
            for k, (p, ids) in enumerate(zip(prompts, gen.token_ids, strict=True))]


@pytest.mark.parametrize("greedy", [True, False])
def test_cached_turns_equal_rereading_the_whole_conversation(policy, greedy):
    gs = grammars()
    n = 7
    keys = [("env", k) for k in range(n)]
    batch = [gs[k % len(gs)] if k % 3 else None for k in range(n)]
    cache = TurnCache()
    plain_prompts = cached_prompts = _first_turn(policy, n)
    for turn in range(3):
        plain = policy.generate(plain_prompts, batch, greedy=greedy, seed=turn)
        cached = policy.generate(cached_prompts, batch, greedy=greedy, seed=turn, turn_cache=cache, keys=keys)
        assert cached.token_ids == plain.token_ids and cached.texts == plain.texts
        worst = max(abs(a - b) for x, y in zip(plain.logprobs, cached.logprobs, strict=True)
                    for a, b in zip(x, y, strict=True))
        assert worst < 1e-4
        plain_prompts = cached_prompts = _next_turn(policy, plain_prompts, plain, turn)
    assert cache.fresh_calls == 1 and cache.reused_calls == 2 and cache.reused_tokens > 0


# two rows finished their episode, the rest come in another order / in the same order (moved in place)
@pytest.mark.parametrize("order", [[4, 1, 5, 2], [1, 2, 4, 5]])
def test_rows_may_leave_or_reorder_between_turns(policy, order):
    n = 6
    keys = [("env", k) for k in range(n)]
    cache = TurnCache()
    prompts = _first_turn(policy, n)
    gen = policy.generate(prompts, [None] * n, greedy=True, turn_cache=cache, keys=keys)
    nxt = _next_turn(policy, prompts, gen)
    sub = [nxt[k] for k in order]
    cached = policy.generate(sub, [None] * len(order), greedy=True, turn_cache=cache, keys=[keys[k] for k in order])
    plain = policy.generate(sub, [None] * len(order), greedy=True)
    assert cache.reused_calls == 1 and cached.token_ids == plain.token_ids


def test_anything_but_a_continuation_prefills_from_scratch(policy):
    n = 3
    keys = [("env", k) for k in range(n)]
    cache = TurnCache()
    prompts = _first_turn(policy, n)
    policy.generate(prompts, [None] * n, greedy=True, turn_cache=cache, keys=keys)
    other = _first_turn(policy, n + 1)[1:]  # same keys, different conversations (a new episode)
    cached = policy.generate(other, [None] * n, greedy=True, turn_cache=cache, keys=keys)
    assert cache.fresh_calls == 2 and cache.reused_calls == 0
    assert cached.token_ids == policy.generate(other, [None] * n, greedy=True).token_ids
    policy.generate(prompts[:2], [None] * 2, greedy=True, turn_cache=cache, keys=[("new", 0), ("new", 1)])
    assert cache.fresh_calls == 3  # keys the cache never saw
    with pytest.raises(ValueError, match="one key per prompt"):
        policy.generate(prompts, [None] * n, turn_cache=cache, keys=keys[:2])


def test_kept_cache_holds_no_padding_of_finished_rows(policy):
    # Rows finish at different steps; what the cache keeps must be exactly their real tokens.
    gs = grammars()
    n = 5
    keys = list(range(n))
    cache = TurnCache()
    prompts = _first_turn(policy, n)
    gen = policy.generate(prompts, [gs[k % len(gs)] for k in range(n)], seed=2, turn_cache=cache, keys=keys)
    assert len({len(t) for t in gen.token_ids}) > 1  # rows really did finish at different steps
    with torch.no_grad():
        for k in range(n):
            held = cache._tokens[cache._rows[k]]
            # the tokens fed through the model: the prompt and the action up to its last forward (the last
            # token, and any the grammar forced after the row's last decision, are never fed)
            fed = len(held) - len(prompts[k])
            assert 0 <= fed < len(gen.token_ids[k])
            assert held == list(prompts[k]) + gen.token_ids[k][:fed]
            assert int(cache._mask[cache._rows[k]].sum()) == len(held)


def test_finished_rows_leave_the_batch_and_change_nothing(policy, monkeypatch):
    # Rows finish at different steps: once a quarter is done they leave the decoding batch (later forwards
    # are smaller), and every row's action, logprobs and kept cache are what it would get alone.
    gs = grammars()
    n = 8
    prompts = _first_turn(policy, n)
    batch = [gs[k % len(gs)] if k % 4 else None for k in range(n)]  # free rows run longest
    rows_per_forward = []
    forward = policy._forward  # each decoding forward, lean or the model's own

    def counting(ids, *args, **kwargs):
        rows_per_forward.append(ids.shape[0])
        return forward(ids, *args, **kwargs)

    monkeypatch.setattr(policy, "_forward", counting)
    cache = TurnCache()
    together = policy.generate(prompts, batch, greedy=True, turn_cache=cache, keys=list(range(n)))
    assert min(rows_per_forward) < n  # some forwards ran without the finished rows
    for k in range(n):
        alone = policy.generate([prompts[k]], [batch[k]], greedy=True)
        assert alone.token_ids[0] == together.token_ids[k]
        assert max(abs(a - b) for a, b in zip(alone.logprobs[0], together.logprobs[k], strict=True)) < 1e-4
    nxt = _next_turn(policy, prompts, together)
    cached = policy.generate(nxt, batch, greedy=True, turn_cache=cache, keys=list(range(n)))
    assert cache.reused_calls == 1 and cached.token_ids == policy.generate(nxt, batch, greedy=True).token_ids


def test_a_reused_cache_drops_its_padding_columns(policy):
    gs = grammars()
    n = 6
    keys = list(range(n))
    cache = TurnCache()
    prompts = _first_turn(policy, n)  # prompts of different lengths: left padding
    gen = policy.generate(prompts, [gs[k % len(gs)] for k in range(n)], greedy=True, turn_cache=cache, keys=keys)
    kept = cache._mask.clone()
    assert (kept == 0).any()  # holes: padding columns
    nxt = _next_turn(policy, prompts, gen)
    pre = cache.prefill(keys, nxt, policy.pad_id, policy.device)
    past = pre.attention[:, : pre.attention.shape[1] - pre.input_ids.shape[1]]
    assert past.shape[1] == int(kept.sum(-1).max())  # as wide as the longest row's real tokens
    assert torch.equal(past.sum(-1), kept.sum(-1))  # every real token kept
    assert all(layer.keys.shape[2] == past.shape[1] for layer in pre.cache.layers)
