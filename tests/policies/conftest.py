"""Fixtures for tests/policies: one tokenizer, one tiny-moe model and policy per session (fast, seeded)."""

from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(__file__))  # policy_helpers is importable whatever the import mode

from policy_helpers import ENTITIES, corpus  # noqa: E402

from policies.llm_policy import LLMPolicy  # noqa: E402
from policies.presets import build_model  # noqa: E402
from policies.tokenizer import train_tokenizer  # noqa: E402

# Two threads when the suite runs in one process; a worker of a parallel run keeps its one (tests/conftest.py).
torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))


@pytest.fixture(scope="session")
def tokenizer():
    return train_tokenizer(corpus(), ENTITIES, vocab_size=512)


@pytest.fixture(scope="session")
def model(tokenizer):
    return build_model("tiny-moe", len(tokenizer), seed=0, pad_token_id=tokenizer.pad_token_id,
                       bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id)


@pytest.fixture()
def policy(model, tokenizer):
    return LLMPolicy(model, tokenizer, constrained=True, temperature=1.0, max_new_tokens=40, seed=0)
