"""Presets build offline with the stated sizes; model specs fail clearly."""

import pytest
import torch

from policies.presets import PRESETS, build_model, count_parameters


@pytest.mark.parametrize(("name", "low", "high"), [("tiny-moe", 0.8e6, 2e6), ("small-moe", 5e6, 10e6)])
def test_preset_sizes(name, low, high):
    model = build_model(name, 1024, seed=0, pad_token_id=0, bos_token_id=1, eos_token_id=2)
    assert low <= count_parameters(model) <= high
    assert model.config.output_router_logits is False
    assert model.config.vocab_size == 1024


def test_seeded_and_rng_untouched():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("tiny-moe", 300, seed=7)
    after = torch.rand(1)
    b = build_model("tiny-moe", 300, seed=7)
    assert torch.equal(before, after)  # weight init does not consume the caller's RNG stream
    for pa, pb in zip(a.parameters(), b.parameters(), strict=True):
        assert torch.equal(pa, pb)


def test_aux_coef_and_overrides():
    model = build_model("tiny-moe", 300, router_aux_loss_coef=0.05, overrides={"num_hidden_layers": 1})
    assert model.config.router_aux_loss_coef == 0.05
    assert model.config.num_hidden_layers == 1
    assert "tiny-moe" in PRESETS and "small-moe" in PRESETS


def test_missing_folder_is_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such folder"):
        build_model(str(tmp_path / "nope"), 300)
    with pytest.raises(FileNotFoundError, match="preset name"):
        build_model("./runs/ckpt", 300)


def test_local_folder_round_trip(tmp_path):
    model = build_model("tiny-moe", 300, seed=1)
    model.save_pretrained(tmp_path / "m")
    loaded = build_model(str(tmp_path / "m"), 300)
    ids = torch.arange(10)[None]
    with torch.no_grad():
        assert torch.allclose(model(ids).logits, loaded(ids).logits, atol=1e-5)
