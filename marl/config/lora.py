"""The `lora` section of a training config: low-rank adapters per policy on one frozen base model.

With `rank > 0`, RL trains a LoRA adapter (peft) per policy of the policy mapping (one for a shared policy,
one per team or agent otherwise) on a single frozen copy of the model as it left supervised fine-tuning;
the KL reference is that base with the adapters switched off, so no second copy of the model is held.
It leaves out the adapters themselves (`policies.adapters`) and LoRA during supervised fine-tuning (SFT
trains the whole model, which then becomes the frozen base).
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.config.checks import SelfChecking, positive, require, within


@dataclass
class LoraConfig(SelfChecking):
    """LoRA adapters per policy for RL on one frozen base (rank 0: RL trains every weight)."""

    rank: int = 0
    """Rank of each adapter's low-rank update (0: no adapters; RL fine-tunes the whole model)."""
    alpha: float = 16.0
    """LoRA scaling numerator: an adapter's update is scaled by alpha / rank."""
    dropout: float = 0.0
    """Dropout on the adapters' inputs during updates (rollouts run in eval mode)."""
    targets: tuple[str, ...] = ("all-linear",)
    """Module names that get adapters (peft's target_modules); `all-linear` is every linear layer but the output layer."""
    learning_rate: float = 0.0
    """Adam learning rate of the adapters (0: rl.learning_rate; adapters usually want 10x a full fine-tune's)."""

    def validate(self) -> LoraConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        positive("lora.rank", self.rank, allow_zero=True)
        positive("lora.alpha", self.alpha)
        within("lora.dropout", self.dropout, 0.0, 1.0)
        positive("lora.learning_rate", self.learning_rate, allow_zero=True)
        require(bool(self.targets) and all(isinstance(t, str) and t for t in self.targets),
                "lora.targets must name at least one module (e.g. all-linear, or q_proj v_proj)")
        return self
