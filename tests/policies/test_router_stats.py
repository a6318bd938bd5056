"""Routing agreement between two routings of the same tokens."""

import torch

from policies.router_stats import routing_agreement


def test_agreement_counts_tokens_whose_top_k_set_is_unchanged():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(6, 4, generator=g)
    b = a.clone()
    b[0] = b[0].flip(0)  # another top-2 set (a strict order reversed)
    b[1, a[1].topk(2).indices] += torch.tensor([-0.01, 0.01])  # same set, maybe another order: agrees
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])  # the last two tokens are padding
    b[4] = -a[4]  # a changed padding token counts for nothing
    agree = routing_agreement((a, a), (b, a), (mask, mask), top_k=2)
    assert torch.allclose(agree, torch.tensor([0.75, 1.0]))
