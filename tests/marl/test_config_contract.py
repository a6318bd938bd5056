"""Configs check themselves, name every choice once, document every field, and never change a field when checked."""

import ast
import copy
import dataclasses
import inspect
import textwrap

import pytest
import tyro

import comms
from marl.config import (
    CommsConfig,
    CompareConfig,
    ConfigError,
    CriticConfig,
    EvalConfig,
    PolicyConfig,
    RLConfig,
    TrackingConfig,
    TrainConfig,
    WarmStartConfig,
)
from marl.config.choices import Algo, CommsMode, PolicyMapping, StateView, options
from marl.engine.algorithms import ALGORITHMS
from marl.engine.critic import STATE_VIEWS
from marl.engine.policy_map import MAPPING_MODES

CONFIGS = [PolicyConfig, WarmStartConfig, RLConfig, CriticConfig, CommsConfig, TrackingConfig, TrainConfig, EvalConfig,
           CompareConfig]


def _documented_fields(cls: type) -> set[str]:
    """Fields followed by a string literal in the class body (what tyro shows as their help)."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0].body
    return {node.target.id for node, nxt in zip(body, body[1:], strict=False)
            if isinstance(node, ast.AnnAssign) and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
            and isinstance(nxt.value.value, str)}


@pytest.mark.parametrize("cls", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_has_a_docstring(cls):
    undocumented = {f.name for f in dataclasses.fields(cls)} - _documented_fields(cls)
    assert not undocumented, f"{cls.__name__} fields without a docstring: {sorted(undocumented)}"


def test_help_is_the_field_docstrings(capsys):
    with pytest.raises(SystemExit):
        tyro.cli(TrainConfig, args=["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for phrase in ("Which agents share a model", "Importance ratio", "Probability that a shared item is lost"):
        assert phrase in text
    assert "{grpo,mappo,ippo}" in text  # a Literal field lists its choices


def test_each_choice_is_named_once_for_config_and_engine():
    assert set(options(Algo)) == set(ALGORITHMS)
    assert options(PolicyMapping) == MAPPING_MODES
    assert set(options(StateView)) == {"global", *STATE_VIEWS}
    assert set(options(CommsMode)) == set(comms.MODES)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: TrainConfig(algo="ppo"), "algo='ppo' is unknown"),
        (lambda: TrainConfig(scenario="info_split", agents=1), "agents=1 is outside info_split's range"),
        (lambda: RLConfig(clip_eps=2.0), "rl.clip_eps=2.0"),
        (lambda: PolicyConfig(device="tpu"), "policy.device"),
        (lambda: CommsConfig(mode="message"), "needs a graph"),
        (lambda: CommsConfig(topology="ring:k=banana"), "comms.topology"),
        (lambda: CriticConfig(state_view="mine"), "critic.state_view='mine'"),
        (lambda: EvalConfig(policy="checkpoint"), "pass --checkpoint"),
        (lambda: EvalConfig(policy="expert", comms_drop=2.0), "--comms-drop"),
        (lambda: CompareConfig(max_runs=0), "--max-runs"),
    ],
)
def test_a_config_checks_itself_when_built(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_checking_never_changes_a_field_and_resolving_returns_a_copy():
    cfg = TrainConfig(scenario="info_split")
    before = copy.deepcopy(cfg)
    cfg.validate()
    assert cfg == before and cfg.agents is None and cfg.eval_splits is None
    resolved = cfg.resolved()
    assert resolved.agents == 2 and resolved.eval_splits == ("basic", "hard")
    assert cfg == before


def test_defaults_shared_by_commands_live_in_one_field():
    assert EvalConfig.model == PolicyConfig.model and EvalConfig.output_dir == TrainConfig.output_dir
    assert CompareConfig.tracking_uri == TrackingConfig.tracking_uri


def test_mlflow_environment_variables_fill_in_the_store_and_experiment_but_an_explicit_value_wins(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)
    plain = TrainConfig().resolved().tracking
    assert (plain.tracking_uri, plain.experiment) == ("sqlite:///mlflow.db", "marl")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///elsewhere.db")
    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "team-a")
    from_env = TrainConfig().resolved().tracking
    assert (from_env.tracking_uri, from_env.experiment) == ("sqlite:///elsewhere.db", "team-a")
    cfg = TrainConfig()
    cfg.tracking.tracking_uri, cfg.tracking.experiment = "sqlite:///mine.db", "mine"
    assert (cfg.resolved().tracking.tracking_uri, cfg.resolved().tracking.experiment) == ("sqlite:///mine.db", "mine")
