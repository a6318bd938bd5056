"""Config validation says what to change; YAML loads with safe_load and rejects unknown keys."""

from pathlib import Path

import pytest
import yaml

from marl.config import ConfigError, TrainConfig
from marl.config.files import flatten, load_yaml


def test_defaults_validate():
    TrainConfig().validate()


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: setattr(c, "scenario", "nope"), "scenario='nope' is unknown"),
        (lambda c: setattr(c, "agents", 0), "agents=0"),
        (lambda c: setattr(c.rl, "group_size", 1), "rl.group_size"),
        (lambda c: setattr(c.rl, "clip_eps", 1.5), "rl.clip_eps"),
        (lambda c: setattr(c.rl, "learning_rate", 0.0), "rl.learning_rate"),
        (lambda c: setattr(c.policy, "temperature", -1.0), "policy.temperature"),
        (lambda c: setattr(c.sft, "seconds", -1.0), "sft.seconds"),
        (lambda c: setattr(c, "algo", "ppo"), "algo='ppo' is unknown; choose one of"),
        (lambda c: setattr(c, "policy_mapping", "pairs"), "policy_mapping='pairs'"),
        (lambda c: setattr(c.rl, "ratio", "episode"), "rl.ratio='episode'"),
        (lambda c: setattr(c.rl, "baseline", "zero"), "rl.baseline='zero'"),
        (lambda c: setattr(c.rl, "normalize_by", "team"), "rl.normalize_by='team'"),
        (lambda c: setattr(c.rl, "gae_lambda", 1.5), "rl.gae_lambda=1.5"),
        (lambda c: setattr(c.rl, "ptx_coef", -1.0), "rl.ptx_coef"),
        (lambda c: setattr(c.critic, "learning_rate", 0.0), "critic.learning_rate"),
        (lambda c: setattr(c.comms, "mode", "message"), "needs a graph"),
        (lambda c: (setattr(c.rl, "ptx_coef", 1.0), setattr(c.sft, "seconds", 0.0), setattr(c.sft, "episodes", 0)),
         "set sft.episodes > 0"),
        (lambda c: (setattr(c, "algo", "mappo"), setattr(c.rl, "value_coef", 0.0)), "never train it"),
        (lambda c: (setattr(c, "algo", "ippo"), setattr(c.rl, "baseline", "running")), "uses its critic"),
        (lambda c: setattr(c.rl, "sequence_clip_eps", 2.0), "rl.sequence_clip_eps=2.0"),
        (lambda c: setattr(c.sft, "lr_decay_fraction", 1.5), "sft.lr_decay_fraction=1.5"),
        (lambda c: (setattr(c.comms, "topology", "ring"), setattr(c.comms, "mode", "shout")), "channel mode"),
        (lambda c: setattr(c.rl, "kl_coef", float("nan")), "rl.kl_coef"),
        (lambda c: setattr(c.rl, "kl_ceiling", 0.5), "rl.kl_ceiling=0.5"),
        (lambda c: setattr(c.rl, "explore", 1.0), "rl.explore=1.0"),
        (lambda c: setattr(c.rl, "explore_unit", "team"), "rl.explore_unit"),
        (lambda c: (setattr(c, "algo", "mappo"), setattr(c.critic, "state_view", "mine")), "critic.state_view='mine'"),
        (lambda c: setattr(c.critic, "warmup_iterations", 2), "algo=grpo has none"),
        (lambda c: (setattr(c, "algo", "ippo"), setattr(c.critic, "warmup_iterations", -1)), "must be >= 0"),
        (lambda c: (setattr(c, "algo", "mappo"), setattr(c, "iterations", 3), setattr(c.critic, "warmup_iterations", 3)),
         "leaves no policy update"),
        (lambda c: (setattr(c, "algo", "ippo"), setattr(c.critic, "state_view", "with_own")), "has none"),
        (lambda c: setattr(c.critic, "minibatches", 0), "critic.minibatches=0"),
        (lambda c: setattr(c.checkpoint, "eval_skip_seeds", -1), "eval_skip_seeds"),
        (lambda c: setattr(c.checkpoint, "eval_skip_seeds", 999_990), "lower --checkpoint.eval-skip-seeds"),
    ],
)
def test_bad_values_name_the_field(mutate, message):
    cfg = TrainConfig()
    mutate(cfg)
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        cfg.validate()


def test_yaml_roundtrip_and_unknown_keys(tmp_path):
    good = tmp_path / "good.yaml"
    good.write_text("scenario: tool_use\nseed: 3\nrl:\n  group_size: 4\npolicy:\n  constrained: false\n")
    cfg = load_yaml(good)
    assert cfg.seed == 3 and cfg.rl.group_size == 4 and cfg.policy.constrained is False
    bad = tmp_path / "bad.yaml"
    bad.write_text("rl:\n  group_sise: 4\n")
    with pytest.raises(ConfigError, match="group_sise"):
        load_yaml(bad)
    evil = tmp_path / "evil.yaml"
    evil.write_text("seed: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(yaml.YAMLError):  # safe_load refuses python tags
        load_yaml(evil)


def test_flatten_names_sections():
    flat = flatten(TrainConfig().resolved())
    assert flat["rl.group_size"] == "8" and flat["tracking.tracking_uri"].startswith("sqlite")


def test_yaml_scalars_are_converted_or_rejected_by_name(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("rl:\n  learning_rate: 1e-4\n  group_size: '4'\n")  # YAML reads 1e-4 as a string
    cfg = load_yaml(path)
    assert cfg.rl.learning_rate == 1e-4 and cfg.rl.group_size == 4
    path.write_text("rl:\n  group_size: many\n")
    with pytest.raises(ConfigError, match="rl.group_size='many' must be of type int"):
        load_yaml(path)
    path.write_text("policy:\n  constrained: 1\n")
    with pytest.raises(ConfigError, match="policy.constrained"):
        load_yaml(path)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda c: setattr(c, "eval_splits", ("basic", "hrad")), "split 'hrad'"),
        (lambda c: setattr(c, "train_split", "nope"), "split 'nope'"),
        (lambda c: setattr(c, "scenario_options", {"split": "hard"}), "must not set 'split'"),
        (lambda c: setattr(c, "scenario_options", {"max_turns": 0}), "scenario_options for tool_use"),
        (lambda c: setattr(c, "scenario_options", {"colour": 1}), "scenario_options for tool_use"),
        (lambda c: setattr(c.policy, "device", "tpu"), "policy.device"),
    ],
)
def test_scenario_settings_are_checked_before_the_run(mutate, message):
    cfg = TrainConfig()
    mutate(cfg)
    with pytest.raises(ConfigError, match=message):
        cfg.validate()


def test_yaml_scenario_options_survive_the_command_line(tmp_path):
    from marl.cli import parse_train_args

    path = tmp_path / "c.yaml"
    path.write_text("scenario: navigation\nagents: 3\nscenario_options:\n  settle: true\n  max_turns: 12\n")
    cfg = parse_train_args(["--config", str(path), "--seed", "4"])
    assert cfg.scenario_options == {"settle": True, "max_turns": 12}
    assert (cfg.scenario, cfg.agents, cfg.seed) == ("navigation", 3, 4)
    cfg.validate()  # the options reach scenarios.make as a mapping


def test_critic_algorithms_need_no_groups_but_grpo_does():
    for algo in ("mappo", "ippo"):
        cfg = TrainConfig(algo=algo)
        cfg.rl.group_size = 1
        cfg.validate()
    cfg = TrainConfig(algo="grpo")
    cfg.rl.group_size = 1
    cfg.rl.baseline = "running"  # a running per-role baseline needs no groups either
    cfg.validate()


def test_flags_can_make_a_yaml_file_valid(tmp_path):
    from marl.cli import parse_train_args

    path = tmp_path / "c.yaml"
    path.write_text("rl:\n  group_size: 1\n")  # a group baseline needs 2 rollouts a seed ...
    with pytest.raises(ConfigError, match="rl.group_size=1"):
        load_yaml(path)
    cfg = parse_train_args(["--config", str(path), "--rl.baseline", "running"])  # ... a running one does not
    assert (cfg.rl.group_size, cfg.rl.baseline) == (1, "running")
    with pytest.raises(ConfigError, match="rl.group_size=1"):
        parse_train_args(["--config", str(path)])


@pytest.mark.parametrize("argv", [["--rl.no-bootstrap-truncations"], ["--rl.bootstrap-truncations"],
                                  ["--rl.no_bootstrap_truncations"], ["--rl.bootstrap_truncations=True"]])
def test_a_removed_flag_says_it_was_removed(argv):
    from marl.cli import parse_train_args

    with pytest.raises(ConfigError, match="was removed: .*turn_budget_visible"):
        parse_train_args(argv)


def test_a_removed_yaml_key_says_it_was_removed(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("rl:\n  bootstrap_truncations: false\n")
    with pytest.raises(ConfigError, match="rl.bootstrap_truncations was removed: .*turn_budget_visible"):
        load_yaml(path)


@pytest.mark.parametrize("path", sorted((Path(__file__).parents[2] / "benchmarks" / "configs").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_shipped_configs_load_and_validate(path):
    """The configs the README and the results point users at start a run (no typo'd or removed key)."""
    cfg = load_yaml(path)
    assert cfg.scenario
