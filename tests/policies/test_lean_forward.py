"""LeanForward: the decoding forward computes the model's own function, through the same KV cache."""

import copy

import pytest
import torch
from policy_helpers import grammars
from test_policy_llm import _prompts
from transformers import AutoConfig, AutoModelForCausalLM

import policies.lean_forward as lean_forward
from policies.lean_forward import LeanForward, query_groups, supports
from policies.llm_policy import LLMPolicy
from policies.turn_cache import TurnCache


def _padded_batch(vocab: int, rows: int = 5, width: int = 9, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (rows, width), generator=g)
    attention = torch.ones(rows, width, dtype=torch.long)
    attention[0, :4] = 0  # left padding of several lengths
    attention[2, :1] = 0
    return ids, attention, (attention.cumsum(-1) - 1).clamp_min(0)


def _chunk(vocab: int, attention: torch.Tensor, positions: torch.Tensor, width: int = 3, seed: int = 1):
    """A later chunk with a padding hole in row 1, continuing each row's positions."""
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab, (attention.shape[0], width), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0
    return ids, torch.cat([attention, mask], 1), positions[:, -1:] + 1 + (mask.cumsum(-1) - 1).clamp_min(0)


@torch.inference_mode()
def _model_step(model, ids, attention, positions, cache):
    out = model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True, cache=cache)
    return out.logits[:, -1], out.cache


# one matmul per chosen expert / padded to the busiest expert in one batched matmul (the small chunks still loop);
# each row querying from its own first real column / every row from the batch's first
@pytest.mark.parametrize("grouped_rows,call_cells", [(0, 0), (1 << 40, 1 << 60)])
def test_logits_and_cache_match_the_model(model, monkeypatch, grouped_rows, call_cells):
    monkeypatch.setattr(lean_forward, "GROUPED_ROWS_PER_EXPERT", grouped_rows)
    monkeypatch.setattr(lean_forward, "GROUP_CALL_CELLS", call_cells)
    monkeypatch.setattr(lean_forward, "MAX_PADDING", 1 << 40)  # however skewed the routing
    model.eval()
    vocab = model.config.vocab_size
    lean = LeanForward(model)
    ids, attention, positions = _padded_batch(vocab)
    want, model_cache = _model_step(model, ids, attention, positions, None)
    got, lean_cache = lean(ids, attention, positions, None)
    torch.testing.assert_close(got, want, atol=2e-5, rtol=1e-4)
    # the next chunk, each side on its own cache, then each side continuing the other's cache
    ids2, attention2, positions2 = _chunk(vocab, attention, positions)
    model_cache_copy, lean_cache_copy = copy.deepcopy(model_cache), copy.deepcopy(lean_cache)
    want2, _ = _model_step(model, ids2, attention2, positions2, model_cache)
    torch.testing.assert_close(lean(ids2, attention2, positions2, lean_cache)[0], want2, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(lean(ids2, attention2, positions2, model_cache_copy)[0], want2, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(_model_step(model, ids2, attention2, positions2, lean_cache_copy)[0], want2,
                               atol=2e-5, rtol=1e-4)
    # a third chunk, all real, after the hole of the second: holes in the past, real columns after them
    g = torch.Generator().manual_seed(2)
    ids3 = torch.randint(5, vocab, (ids.shape[0], 2), generator=g)
    attention3 = torch.cat([attention2, torch.ones_like(ids3)], 1)
    positions3 = positions2[:, -1:] + 1 + torch.arange(2)[None]
    want3, _ = _model_step(model, ids3, attention3, positions3, model_cache)
    torch.testing.assert_close(lean(ids3, attention3, positions3, lean_cache)[0], want3, atol=2e-5, rtol=1e-4)


def test_rows_query_from_their_first_real_column_in_contiguous_runs(monkeypatch):
    chunk = torch.tensor([[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 0, 0], [0, 0, 0, 1]])
    monkeypatch.setattr(lean_forward, "GROUP_CALL_CELLS", 0)  # another attention call costs nothing
    # equal starts share a run; a row that feeds nothing (finished, still in the batch) queries nothing
    assert query_groups(chunk, keys=100) == [(0, 2, 2), (2, 3, 0), (3, 4, 4), (4, 5, 3)]
    monkeypatch.setattr(lean_forward, "GROUP_CALL_CELLS", 10**9)  # a call costs more than any padding
    assert query_groups(chunk, keys=100) == [(0, 5, 0)]
    assert query_groups(torch.ones(3, 1), keys=100) == [(0, 3, 0)]
    # a decoding step of one token: rows that finished (still in the batch) feed padding and query nothing
    monkeypatch.setattr(lean_forward, "GROUP_CALL_CELLS", 0)
    assert query_groups(torch.tensor([[1], [0], [0], [1]]), keys=100) == [(0, 1, 0), (1, 3, 1), (3, 4, 0)]


def test_follows_in_place_weight_updates(model):
    model = copy.deepcopy(model).eval()
    lean = LeanForward(model)
    ids, attention, positions = _padded_batch(model.config.vocab_size)
    before = lean(ids, attention, positions, None)[0]
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    after = lean(ids, attention, positions, None)[0]
    assert not torch.allclose(before, after, atol=1e-3)
    torch.testing.assert_close(after, _model_step(model, ids, attention, positions, None)[0], atol=2e-5, rtol=1e-4)


def test_a_real_query_sees_the_real_columns_up_to_its_own_and_nothing_is_nan(model):
    ids, attention, positions = _padded_batch(model.config.vocab_size)
    _, attention2, _ = _chunk(model.config.vocab_size, attention, positions)
    width = attention2.shape[1] - attention.shape[1]
    mask = LeanForward._mask(attention2, width, torch.float32)[:, 0]  # [n, W, past + W]
    assert torch.isfinite(mask).all()  # a query that sees nothing averages finite values: no NaN in the cache
    past = attention.shape[1]
    for r in range(attention2.shape[0]):
        for j in range(width):
            if attention2[r, past + j]:
                want = [bool(attention2[r, c]) and c <= past + j for c in range(attention2.shape[1])]
                assert (mask[r, j] == 0).tolist() == want
                assert (mask[r, j][~torch.tensor(want)] < -1e30).all()  # hidden columns weigh exactly 0
    _, cache = LeanForward(model.eval())(ids, attention, positions, None)
    assert all(torch.isfinite(layer.keys).all() and torch.isfinite(layer.values).all() for layer in cache.layers)


@pytest.mark.parametrize("constrained", [True, False])
def test_generation_is_the_same_with_the_models_forward(policy, constrained, monkeypatch):
    policy.constrained, policy.max_new_tokens = constrained, 30
    gs = grammars()
    prompts = _prompts(policy, 12)
    batch = [gs[k % len(gs)] for k in range(12)]
    runs = []
    calls = []
    lean_call = LeanForward.__call__

    def counted(self, *args):
        calls.append(policy.lean)
        return lean_call(self, *args)

    monkeypatch.setattr(LeanForward, "__call__", counted)
    for lean in (True, False):
        policy.lean = lean
        cache = TurnCache()
        keys = list(range(12))
        first = policy.generate(prompts, batch, greedy=True, turn_cache=cache, keys=keys)
        # a second turn reusing the cache: prompt + action + a new observation
        later = [p + ids + policy.chat.next(f"Result: {k}")
                 for k, (p, ids) in enumerate(zip(prompts, first.token_ids, strict=True))]
        second = policy.generate(later, batch, greedy=True, turn_cache=cache, keys=keys)
        assert cache.reused_calls == 1
        runs.append((first, second))
    policy.lean = False
    assert calls and all(calls)  # the lean run went through LeanForward, the other never did
    for a, b in zip(*runs, strict=True):
        assert a.token_ids == b.token_ids
        for x, y in zip(a.logprobs, b.logprobs, strict=True):
            assert x == pytest.approx(y, abs=1e-4)


def test_other_families_keep_their_own_forward(tokenizer):
    config = AutoConfig.for_model("llama", vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128,
                                  num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                  pad_token_id=tokenizer.pad_token_id)
    model = AutoModelForCausalLM.from_config(config)
    assert not supports(model)
    with pytest.raises(ValueError, match="model's own forward"):
        LeanForward(model)
    policy = LLMPolicy(model, tokenizer, constrained=True, max_new_tokens=30, seed=0)
    gen = policy.generate(_prompts(policy, 3), grammars()[:3], seed=0)
    assert all(gen.finished)


def test_models_it_would_compute_wrongly_are_refused(model):
    # transformers' output-capturing hooks, left behind by a forward that records router logits, change nothing:
    # the choice must not flip once the learner has run (a resumed run would then decode differently)
    recorded = copy.deepcopy(model)
    recorded(input_ids=torch.tensor([[5, 6, 7]]), output_router_logits=True)
    assert any(m._forward_hooks for m in recorded.modules()) and supports(recorded)
    hooked = copy.deepcopy(model)
    hooked.model.layers[0].mlp.register_forward_hook(lambda *_: None)  # a hook changes what the module computes
    assert supports(model) and not supports(hooked)
    sliding = copy.deepcopy(model)
    sliding.config.use_sliding_window, sliding.config.sliding_window = True, 4
    assert not supports(sliding)
