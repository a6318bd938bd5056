"""Policies made picklable: what a policy's model carries that a pickle cannot hold, taken off meanwhile.

transformers installs forward hooks that capture outputs (router logits, hidden states) on a model's first
forward that asks for them; they close over a context variable, which no pickle can hold. Sending a policy to
another process (a Ray rollout worker, a learner process) pickles it with them taken off; the copy installs its
own on its first forward. It leaves out anything else a model may hold (other hooks are pickled as they are).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

import torch

CAPTURE_HOOKS_FLAG = "_output_capturing_hooks_installed"
"""transformers' mark on a model whose output-capturing forward hooks are in place (it installs them lazily)."""


def root_module(model: Any) -> torch.nn.Module:
    """The torch module holding `model`'s weights: itself, or for a LoRA adapter view its shared peft model."""
    return model if isinstance(model, torch.nn.Module) else model.shared.peft


@contextlib.contextmanager
def capture_hooks_detached(policies: Iterable[Any]) -> Iterator[None]:
    """transformers' output-capturing forward hooks taken off the policies' models meanwhile: they close over a
    context variable, which cannot be pickled; a model unpickled without them installs them again on its first
    forward (its flag says none are there)."""
    roots = [root_module(policy.model) for policy in policies]
    taken: list[tuple[dict, Any, Any]] = []
    flags: list[torch.nn.Module] = []
    try:
        for module in {id(m): m for root in roots for m in root.modules()}.values():
            for handle, hook in list(module._forward_hooks.items()):
                if getattr(hook, "__module__", "") == "transformers.utils.output_capturing":
                    taken.append((module._forward_hooks, handle, module._forward_hooks.pop(handle)))
            if getattr(module, CAPTURE_HOOKS_FLAG, False):
                setattr(module, CAPTURE_HOOKS_FLAG, False)
                flags.append(module)
        yield
    finally:
        for hooks, handle, hook in taken:
            hooks[handle] = hook
        for module in flags:
            setattr(module, CAPTURE_HOOKS_FLAG, True)
