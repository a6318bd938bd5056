"""Imitation loss through the scoring forward: the model's own causal-LM loss on the action tokens, the same
gradients, the hidden states an opponent head reads, and clear errors on a batch it cannot score."""

from __future__ import annotations

import copy

import pytest
import torch

from policies.scoring import imitation_loss


def _demos(tokenizer):
    texts = ("Task: what is the weather in Paris on mon? get_weather(city, day) Result: 21C answer(value)",
             "Task: find flights from Oslo find_flights(origin, destination)")
    sequences = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    # the actions: a few spans per demonstration, the first token included (nothing predicts it: not in the loss)
    masks = [[1 if (k == 0 or 12 <= k < 18 or k >= len(s) - 4) else 0 for k in range(len(s))] for s in sequences]
    return sequences, masks


def _padded(sequences, masks, pad_id):
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id)
    attention = torch.zeros((len(sequences), width), dtype=torch.long)
    labels = torch.full((len(sequences), width), -100)
    for r, (s, m) in enumerate(zip(sequences, masks, strict=True)):
        ids[r, :len(s)], attention[r, :len(s)] = torch.tensor(s), 1
        labels[r, :len(s)] = torch.where(torch.tensor(m, dtype=torch.bool), torch.tensor(s), -100)
    return ids, attention, labels


def test_imitation_loss_is_the_models_own_loss_with_the_same_gradients(model, tokenizer):
    sequences, masks = _demos(tokenizer)
    ours_model, theirs_model = copy.deepcopy(model).train(), copy.deepcopy(model).train()
    hidden_at = ([0, 1], [11, 5])
    ours = imitation_loss(ours_model, sequences, masks, pad_id=tokenizer.pad_token_id, device=torch.device("cpu"),
                          hidden_at=hidden_at)
    (ours.cross_entropy + ours.hidden.sum()).backward()
    ids, attention, labels = _padded(sequences, masks, tokenizer.pad_token_id)
    theirs = theirs_model(input_ids=ids, attention_mask=attention, labels=labels, use_cache=False,
                          output_hidden_states=True)
    (theirs.loss + theirs.hidden_states[-1][hidden_at].sum()).backward()
    torch.testing.assert_close(ours.cross_entropy, theirs.loss, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.hidden, theirs.hidden_states[-1][hidden_at], atol=2e-5, rtol=1e-4)
    for a, b in zip(ours_model.parameters(), theirs_model.parameters(), strict=True):
        torch.testing.assert_close(a.grad, b.grad, atol=2e-5, rtol=1e-3)
    with_router = imitation_loss(ours_model, sequences, masks, pad_id=tokenizer.pad_token_id,
                                 device=torch.device("cpu"), with_router_logits=True)
    assert with_router.aux_loss is not None and 1.5 < float(with_router.aux_loss) < 8  # about top_k (2) when even


def test_a_batch_without_action_tokens_or_with_a_misfit_mask_says_so(model, tokenizer):
    sequences, masks = _demos(tokenizer)
    with pytest.raises(ValueError, match="no action token"):
        imitation_loss(model, sequences, [[0] * len(s) for s in sequences], pad_id=0, device=torch.device("cpu"))
    with pytest.raises(ValueError, match="a mask of"):
        imitation_loss(model, sequences, [m[:-1] for m in masks], pad_id=0, device=torch.device("cpu"))
