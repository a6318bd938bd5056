"""The training forward's paths give the same logits and gradients: shared prefixes, body + head, full."""

from __future__ import annotations

import copy
import os

import torch

from policies.span_forward import _prefix_plan, body_and_head, decision_logits


def _batch(tokenizer):
    # Three sequences over two distinct prefixes of different lengths (two rows share one), plus a row with
    # a prefix of its own; every asked position lies at or after its row's prefix.
    a = tokenizer("Task: what is the weather in Paris on mon?", add_special_tokens=False)["input_ids"]
    b = tokenizer("Task: find flights from Oslo", add_special_tokens=False)["input_ids"]
    tail = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in
            ("get_weather(city, day)", "answer(value) Result: 21C", "find_flights(origin, destination) FL01 FL02")]
    # a fourth row shares more than the first prompt with the first one, and is much longer (its own bucket)
    sequences = [a + tail[0], a + tail[1], b + tail[2], a + tail[0] + tail[2] + tail[1] + tail[2]]
    cuts = [len(a), len(a), len(b), len(a)]
    rows = [r for r, s in enumerate(sequences) for _ in range(len(s) - cuts[r])]
    cols = [c for r, s in enumerate(sequences) for c in range(cuts[r], len(s))]
    return sequences, cuts, rows, cols


def _run(model, tokenizer, shared_until, sequences, rows, cols, full=False, monkeypatch=None):
    model = copy.deepcopy(model)
    model.train()
    if full:
        monkeypatch.setattr("policies.span_forward.body_and_head", lambda m: None)
    out = decision_logits(model, sequences, rows, cols, shared_until=shared_until, pad_id=tokenizer.pad_token_id,
                          device=torch.device("cpu"), with_router_logits=True)
    weights = torch.linspace(-1, 1, out.logits.numel()).view_as(out.logits)
    (out.logits * weights).sum().backward()
    return out, [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]


def test_shared_prefix_and_full_forward_match_one_plain_forward(model, tokenizer, monkeypatch):
    sequences, cuts, rows, cols = _batch(tokenizer)
    assert body_and_head(model) is not None  # the tiny preset takes the body + head paths
    plain, g_plain = _run(model, tokenizer, [0] * 4, sequences, rows, cols)
    shared, g_shared = _run(model, tokenizer, cuts, sequences, rows, cols)
    assert len(shared.router_masks[0]) < 4 * max(len(s) for s in sequences)  # the shared path ran (fewer rows)
    plan = _prefix_plan(sequences, cuts)
    assert len(plan.buckets) > 1 and len(plan.prefixes) == 2
    family = [sequences[0], sequences[1], sequences[3]]
    common = len(os.path.commonprefix(family))
    assert plan.cut == [common, common, len(sequences[2]) - 1, common]  # a family of one: all but its last token
    # every real token ran once, but the family's common prefix, which ran once for three rows
    assert int(shared.router_masks[0].sum()) == sum(len(s) for s in sequences) - 2 * common
    full, g_full = _run(model, tokenizer, cuts, sequences, rows, cols, full=True, monkeypatch=monkeypatch)
    for other, grads in ((shared, g_shared), (full, g_full)):
        torch.testing.assert_close(other.logits, plain.logits, atol=2e-5, rtol=1e-4)
        for a, b in zip(grads, g_plain, strict=True):
            torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-3)
    for out in (plain, shared, full):
        assert [len(layer) for layer in out.router_layers] == [len(mask) for mask in out.router_masks]
    assert len(plain.router_layers[-1]) == len(shared.router_layers[-1]) == len(rows)  # the asked positions only


def test_sharing_is_skipped_when_no_prefix_repeats(model, tokenizer):
    sequences, cuts, _, _ = _batch(tokenizer)
    distinct = [sequences[0], sequences[2]]
    out, _ = _run(model, tokenizer, [cuts[0], cuts[2]], distinct, [0, 1], [cuts[0], cuts[2]])
    assert out.router_masks[0].shape == (2 * max(len(s) for s in distinct),)  # one plain forward
