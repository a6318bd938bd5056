"""A checkpoint's typed metadata record: written and read back whole, refused with a reason when it is not one."""

import json

import pytest

from marl.cli.eval import target_scenario
from marl.config import ConfigError, EvalConfig
from marl.run.checkpoint import (
    META_FILE,
    CheckpointError,
    CheckpointMeta,
    TokenizerInfo,
    package_versions,
    read_meta,
)


def _meta(**changes) -> CheckpointMeta:
    fields = dict(scenario="info_split", agents=3, model="tiny-moe", tokenizer=TokenizerInfo("offline-bpe", 900, 1024, 120),
                  policy_mapping="team", policies=("team", "agent_1"), algo="mappo", critic_view="own_and_state",
                  constrained=True, temperature=1.0, max_new_tokens=48, run_id="r1", seed=2, iteration=7,
                  scenario_options={"max_turns": 12}, comms={"topology": "ring"}, versions=package_versions())
    return CheckpointMeta(**{**fields, **changes})


def test_the_record_round_trips_through_its_json(tmp_path):
    meta = _meta()
    (tmp_path / META_FILE).write_text(meta.to_json())
    back = read_meta(tmp_path)
    assert back == meta and isinstance(back.tokenizer, TokenizerInfo) and back.policies == ("team", "agent_1")
    assert {"torch", "transformers", "marl-llm"} <= set(back.versions)


@pytest.mark.parametrize(
    ("write", "message"),
    [
        (lambda d: d.pop("format_version"), "checkpoint format None"),
        (lambda d: d.pop("scenario"), "missing \\['scenario'\\]"),
        (lambda d: d.update(colour="red"), "unknown \\['colour'\\]"),
    ],
)
def test_a_record_of_another_format_is_refused_by_name(tmp_path, write, message):
    data = json.loads(_meta().to_json())
    write(data)
    (tmp_path / META_FILE).write_text(json.dumps(data))
    with pytest.raises(CheckpointError, match=message):
        read_meta(tmp_path)


def test_damaged_or_missing_metadata_says_so(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        read_meta(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="not a marl checkpoint"):
        read_meta(tmp_path)
    (tmp_path / META_FILE).write_text("{not json")
    with pytest.raises(CheckpointError, match="damaged"):
        read_meta(tmp_path)


def test_eval_on_another_scenario_is_refused_unless_asked_for(capsys):
    meta = _meta()
    assert target_scenario(EvalConfig(checkpoint="c"), meta) == "info_split"
    with pytest.raises(ConfigError, match="trained on info_split, not navigation"):
        target_scenario(EvalConfig(checkpoint="c", scenario="navigation"), meta)
    assert target_scenario(EvalConfig(checkpoint="c", scenario="navigation", other_scenario=True), meta) == "navigation"
    assert "warning" in capsys.readouterr().err


def test_a_format_1_record_is_upgraded(tmp_path):
    old = {"format_version": 1, "scenario": "navigation", "agents": 3, "run_id": "r0", "seed": 1, "iteration": 4,
           "scenario_options": {"settle": True}, "comms": {"topology": "none"}, "algo": "ippo",
           "policy_mapping": "shared", "policies": ["shared"], "policy": {"model": "tiny-moe", "vocab_size": "1024"},
           "constrained": True, "max_new_tokens": 48, "temperature": 1.0}
    (tmp_path / META_FILE).write_text(json.dumps(old))
    meta = read_meta(tmp_path)
    assert (meta.scenario, meta.agents, meta.model, meta.iteration) == ("navigation", 3, "tiny-moe", 4)
    assert meta.scenario_options == {"settle": True} and meta.critic_view == "unrecorded" and meta.versions == {}


@pytest.mark.parametrize("data", [[1, 2], {"format_version": 2, "tokenizer": {"kind": "x", "colour": 1}}])
def test_a_record_of_the_wrong_kind_is_refused_not_crashed_on(tmp_path, data):
    full = json.loads(_meta().to_json())
    if isinstance(data, dict):
        full.update(data)
        data = full
    (tmp_path / META_FILE).write_text(json.dumps(data))
    with pytest.raises(CheckpointError):
        read_meta(tmp_path)
