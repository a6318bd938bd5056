"""Channel config validation and the channel's fault draws and statistics."""

import pytest

from comms import STAT_NAMES, TRUNCATED_MARK, Channel, ChannelConfig
from comms.channel import NOISE_CHARS, cut


@pytest.mark.parametrize("kwargs,match", [
    ({"mode": "shout"}, "channel mode must be one of"),
    ({"mode": "telepathy"}, "mode must be one of"),
    ({"budget_chars": 3}, "budget_chars must be an int >="),
    ({"budget_chars": 10.5}, "budget_chars must be an int"),
    ({"total_chars": -1}, "total_chars must be None"),
    ({"drop": 1.5}, r"drop must be a probability in \[0, 1\]"),
    ({"drop": True}, "drop must be a probability"),
    ({"noise": -0.1}, "noise must be a probability"),
    ({"delay": -1}, "delay must be a whole number of steps >= 0"),
    ({"delay": 1.0}, "delay must be a whole number"),
    ({"seed": -2}, "seed must be a non-negative int"),
])
def test_bad_configs_say_what_to_change(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ChannelConfig(**kwargs)


def test_config_is_frozen_and_normalised():
    cfg = ChannelConfig(drop=0, noise=1)
    assert isinstance(cfg.drop, float) and cfg.noise == 1.0
    with pytest.raises(AttributeError):
        cfg.drop = 0.5  # type: ignore[misc]


def test_cut_marks_truncation():
    assert cut("short", 10) == "short"
    out = cut("x" * 50, 20)
    assert len(out) == 20 and out.endswith(TRUNCATED_MARK)


def test_noise_rate_and_charset():
    ch = Channel(ChannelConfig(noise=0.25, budget_chars=4000, seed=2))
    text = " " * 4000  # spaces never come back from noise
    ch.send(0, "a", ["b"], text)
    got = ch.deliver(0, {"b"})["b"][0].text
    changed = [c for c in got if c != " "]
    assert all(c in NOISE_CHARS for c in changed)
    assert abs(len(changed) / 4000 - 0.25) < 3 * (0.25 * 0.75 / 4000) ** 0.5
    assert ch.stats()["comms/corrupted_chars"] == len(changed)


def test_drop_one_and_zero_and_expiry():
    ch = Channel(ChannelConfig(drop=1.0))
    ch.send(0, "a", ["b", "c"], "hi")
    assert ch.deliver(0, {"b", "c"}) == {} and ch.stats()["comms/dropped"] == 2
    ch = Channel(ChannelConfig(delay=1))
    ch.send(0, "a", ["b", "c"], "hi")
    assert ch.deliver(0, {"b", "c"}) == {}
    got = ch.deliver(1, {"b"})  # c left: its item expires
    assert [d.text for d in got["b"]] == ["hi"] and got["b"][0].sent_step == 0
    assert {k: ch.stats()[f"comms/{k}"] for k in ("sent", "delivered", "delayed", "expired")} == \
        {"sent": 2, "delivered": 1, "delayed": 2, "expired": 1}
    assert set(ch.stats()) == {f"comms/{k}" for k in STAT_NAMES}
