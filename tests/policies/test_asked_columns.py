"""The learner's last layer on the asked positions only: the same logits, hidden states and gradients as the whole
layer on every path, the last layer's router rows exactly the asked positions', and the model left as it was."""

from __future__ import annotations

import copy
import sys

import pytest
import torch

from policies.asked_columns import asked_columns_only, supports
from policies.router_stats import aux_loss, expert_load, switch_loss
from policies.span_forward import decision_logits


def _batch(tokenizer):
    """Two rows sharing a first prompt and one of their own, asked at a few positions each (one position asked twice:
    a decision and where an opponent head reads), and the opponent head's positions."""
    a = tokenizer("Task: what is the weather in Paris on mon?", add_special_tokens=False)["input_ids"]
    b = tokenizer("Task: find flights from Oslo", add_special_tokens=False)["input_ids"]
    tail = tokenizer("get_weather(city, day) answer(value) Result: 21C", add_special_tokens=False)["input_ids"]
    sequences = [a + tail, a + tail[:5], b + tail[3:]]
    cuts = [len(a), len(a), len(b)]
    rows = [0, 0, 0, 1, 2, 2]
    cols = [cuts[0], cuts[0] + 3, len(sequences[0]) - 1, cuts[1] + 2, cuts[2], cuts[2] + 4]
    hidden_at = ([0, 1, 2], [cuts[0], cuts[1] - 1, cuts[2] - 1])
    return sequences, cuts, rows, cols, hidden_at


def _run(model, tokenizer, shared_until, asked_only: bool):
    sequences, _, rows, cols, hidden_at = _batch(tokenizer)
    model = copy.deepcopy(model)
    model.train()
    out = decision_logits(model, sequences, rows, cols, shared_until=shared_until, pad_id=tokenizer.pad_token_id,
                          device=torch.device("cpu"), with_router_logits=True, hidden_at=hidden_at,
                          last_layer_asked_only=asked_only)
    loss = (out.logits * torch.linspace(-1, 1, out.logits.numel()).view_as(out.logits)).sum() + out.hidden.pow(2).sum()
    loss.backward()
    grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    return out, grads


@pytest.mark.parametrize("shared", [False, True], ids=["plain", "shared-prefix"])
def test_asked_positions_only_match_the_whole_layer(model, tokenizer, shared):
    sequences, cuts, rows, cols, hidden_at = _batch(tokenizer)
    assert supports(model.get_decoder())
    until = cuts if shared else [0] * len(sequences)
    whole, g_whole = _run(model, tokenizer, until, asked_only=False)
    asked, g_asked = _run(model, tokenizer, until, asked_only=True)
    torch.testing.assert_close(asked.logits, whole.logits, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(asked.hidden, whole.hidden, atol=2e-5, rtol=1e-4)
    for a, b in zip(g_asked, g_whole, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-3)
    # every layer but the last routes the same rows; the last routes one row per distinct asked position
    for a, b in zip(asked.router_layers[:-1], whole.router_layers[:-1], strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-4)
    distinct = sorted(set(zip(rows + hidden_at[0], cols + hidden_at[1], strict=True)))
    assert asked.router_layers[-1].shape[0] == len(distinct) == len(asked.router_masks[-1])
    assert bool(asked.router_masks[-1].all())
    if not shared:  # one forward of [rows, width]: the whole layer's rows at those positions, row-major
        width = max(len(s) for s in sequences)
        picked = whole.router_layers[-1][torch.tensor([r * width + c for r, c in distinct])]
        torch.testing.assert_close(asked.router_layers[-1], picked, atol=2e-5, rtol=1e-4)


def test_the_last_layer_comes_back_and_a_wrong_layout_says_so(model, tokenizer):
    body = model.get_decoder()
    last = body.layers[-1]
    ids = torch.tensor([tokenizer("Task: find flights", add_special_tokens=False)["input_ids"]])
    with pytest.raises(ValueError, match="asked columns laid out as"):
        with asked_columns_only(body, torch.ones(2, 3, dtype=torch.bool)):
            body(input_ids=ids)
    assert body.layers[-1] is last
    body.gradient_checkpointing = True  # the whole layer then, as checkpointing expects
    try:
        assert not supports(body)
    finally:
        body.gradient_checkpointing = False


def test_switch_loss_is_the_models_own_where_every_layer_routes_the_same_rows(model):
    g = torch.Generator().manual_seed(0)
    layers = tuple(torch.randn(10, 8, generator=g) for _ in range(2))
    mask = torch.tensor([1, 1, 1, 0, 1, 1, 1, 1, 0, 0])
    fn = sys.modules[type(model).__module__].load_balancing_loss_func
    torch.testing.assert_close(switch_loss(layers, (mask, mask.clone()), 8, 2), fn(layers, 8, 2, mask))
    torch.testing.assert_close(aux_loss(model, None, layers, (mask, mask)), fn(layers, 8, 2, mask))
    # a last layer routing fewer rows: its rows count as real, the loss pools both layers' rows
    short = (layers[0], layers[1][:4])
    pooled = switch_loss((torch.cat([layers[0][mask.bool()], layers[1][:4]]),), (torch.ones(11),), 8, 2)
    torch.testing.assert_close(aux_loss(model, None, short, (mask, torch.ones(4))), pooled)
    load = expert_load(short, (mask, torch.ones(4)), 2)
    assert load.shape == (2, 8) and torch.allclose(load.sum(-1), torch.ones(2))


def test_a_critic_reads_the_same_values_and_gradients_through_its_asked_positions(monkeypatch):
    from policies import value_model

    critic = value_model.build_value_model("tiny-critic", 300, pad_id=0, seed=0)
    torch.nn.init.normal_(critic.head.weight)  # a zero head would hide the trunk's gradients
    assert supports(critic.trunk)
    g = torch.Generator().manual_seed(1)
    sequences = [torch.randint(1, 300, (n,), generator=g).tolist() for n in (23, 9, 31)]
    positions = [[0, 7, 22], [8], [3, 4, 30]]

    def run():
        critic.zero_grad()
        values = critic.values(sequences, positions)
        (values * torch.linspace(-1, 1, len(values))).sum().backward()
        return values.detach(), [p.grad.clone() for p in critic.parameters()]

    asked, g_asked = run()
    monkeypatch.setattr(value_model.asked_columns, "supports", lambda trunk: False)
    whole, g_whole = run()
    torch.testing.assert_close(asked, whole, atol=2e-5, rtol=1e-4)
    for a, b in zip(g_asked, g_whole, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-3)


def test_a_lora_adapter_on_the_last_layer_still_applies(model, tokenizer):
    from peft import LoraConfig, get_peft_model

    sequences, _, rows, cols, _ = _batch(tokenizer)
    lora = get_peft_model(copy.deepcopy(model), LoraConfig(r=4, lora_alpha=8, target_modules="all-linear"))
    with torch.no_grad():  # peft starts B at zero (no effect); a random B makes the adapter count
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5, generator=torch.Generator().manual_seed(len(name)))
    assert supports(lora.get_decoder())

    def run(asked_only):
        lora.zero_grad()
        out = decision_logits(lora, sequences, rows, cols, shared_until=[0] * len(sequences),
                              pad_id=tokenizer.pad_token_id, device=torch.device("cpu"), with_router_logits=False,
                              last_layer_asked_only=asked_only)
        out.logits.pow(2).mean().backward()
        return out.logits.detach(), [p.grad.clone() for p in lora.parameters() if p.requires_grad]

    asked, g_asked = run(True)
    whole, g_whole = run(False)
    plain = decision_logits(model, sequences, rows, cols, shared_until=[0] * len(sequences),
                            pad_id=tokenizer.pad_token_id, device=torch.device("cpu"), with_router_logits=False)
    assert (asked - plain.logits.detach()).abs().max() > 1e-3  # the adapter changes the logits
    torch.testing.assert_close(asked, whole, atol=2e-5, rtol=1e-4)
    for a, b in zip(g_asked, g_whole, strict=True):
        torch.testing.assert_close(a, b, atol=2e-5, rtol=1e-3)
