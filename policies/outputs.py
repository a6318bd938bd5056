"""What a policy hands back: `Generation` (rollout side) and `SequenceScores` (learner side).

Plain result records shared by the LLM policy, its scorer and the random baseline, kept apart from
the code that fills them so that each of those imports only this module and none imports another.
Left out: any computation beyond summaries of the fields themselves.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from policies.router_stats import load_entropy


@dataclass
class Generation:
    """One batched generation. Lists are per sample, in prompt order."""

    token_ids: list[list[int]]  # generated ids; ends with end_id when finished
    logprobs: list[list[float]]  # per generated token, under the masked temperature-scaled distribution
    texts: list[str]  # decoded action text (no end_id, no special tokens)
    allowed: list[list[list[int]] | None]  # per token the allowed ids (shared lists: read only); None = free
    finished: list[bool]  # True when the sample emitted end_id within max_new_tokens
    num_prompt_tokens: list[int] = field(default_factory=list)
    hints: list[list[int]] = field(default_factory=list)  # ids put after each prompt (an opponent head's
    # prediction, `feeds_prompt`): part of the prompt the action answers; empty lists (or none) without
    explored: list[bool] = field(default_factory=list)  # the action's first real decision was drawn uniformly
    # (`explore`), not from the policy; empty (or none) without exploration

    @property
    def num_new_tokens(self) -> list[int]:
        return [len(t) for t in self.token_ids]

    @property
    def total_new_tokens(self) -> int:
        return sum(len(t) for t in self.token_ids)


@dataclass
class SequenceScores:
    """Scores of actions given prompts, from one training forward (carries grad if enabled)."""

    logprobs: torch.Tensor  # [B, A] float32, 0 where mask is False
    mask: torch.Tensor  # [B, A] bool, True on real action tokens
    entropy: torch.Tensor  # [B, A] entropy of the masked temperature-scaled distribution, 0 on padding
    # [decisions, vocab] log-probs of each decision token's masked distribution; a forced token (one
    # allowed id) has none: its log-prob, entropy and any KL are exactly 0
    log_dist: torch.Tensor | None = None
    slots: torch.Tensor | None = None  # [decisions] where each row of `log_dist` lies in the flattened [B, A] grid
    aux_loss: torch.Tensor | None = None  # Switch load-balancing loss (about top_k when balanced)
    router_logits: tuple[torch.Tensor, ...] | None = None  # per MoE layer [rows, num_experts], rows as `router_masks`
    router_masks: tuple[torch.Tensor, ...] | None = None  # per layer, flat: 1 on the router rows of real tokens
    expert_load: torch.Tensor | None = None  # [layers, num_experts] fraction of top-k picks, detached
    prompt_hidden: torch.Tensor | None = None  # [B, hidden] last hidden state where each span's prompt ends, if asked

    def per_token(self, values: torch.Tensor) -> torch.Tensor:
        """A per-row value of `log_dist` ([decisions]) laid out like `logprobs` ([B, A], 0 elsewhere)."""
        if self.slots is None:
            raise ValueError("these scores carry no distributions (log_dist)")
        grid = torch.zeros(self.logprobs.numel(), device=values.device, dtype=values.dtype)
        return grid.index_put((self.slots,), values).view_as(self.logprobs)

    def expert_load_entropy(self) -> torch.Tensor | None:
        """Mean over layers of the entropy of expert load (log(num_experts) when balanced)."""
        return None if self.expert_load is None else load_entropy(self.expert_load)
