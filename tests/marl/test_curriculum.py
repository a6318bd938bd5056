"""The curriculum: stage specs, the promotion / step-back machine, replay draws, its state, and a batch
that mixes team sizes in one collection."""

import json

import numpy as np
import pytest

from marl.config import ConfigError, CurriculumConfig, TrainConfig
from marl.config.curriculum import Stage, parse_stage
from marl.config.files import from_dict
from marl.engine.curriculum import Curriculum
from marl.engine.rollout import RolloutWorker, expert_actor
from marl.run.build import env_factory


def machine(**rules) -> Curriculum:
    rules = {"window": 4, "min_episodes": 4, **rules}
    return Curriculum([Stage(2), Stage(4), Stage(8)], CurriculumConfig(stages=("agents=2", "agents=4", "agents=8"),
                                                                       **rules))


# ----- stage specs and config -----
def test_a_stage_spec_reads_agents_split_and_typed_options():
    stage = parse_stage("agents=4 split=hard size=7 noisy=true")
    assert stage == Stage(4, "hard", (("noisy", True), ("size", 7)))
    assert parse_stage(stage.spec()) == stage
    assert parse_stage({"agents": 4, "split": "hard", "size": 7, "noisy": True}) == stage
    assert stage.name == "n4-hard-noisy=True-size=7"


@pytest.mark.parametrize("spec, words", [("agnts=2", "needs agents"), ("agents=0", "needs agents"),
                                         ("agents=2 split", "not key=value"), ("agents=two", "needs agents")])
def test_a_bad_stage_spec_says_what_is_wrong(spec, words):
    with pytest.raises(ConfigError, match=words):
        CurriculumConfig(stages=(spec,))


def test_yaml_stages_may_be_mappings_and_are_kept_as_spec_lines():
    cfg = from_dict(TrainConfig, {"scenario": "info_split",
                                  "curriculum": {"stages": [{"agents": 2}, {"agents": 4, "split": "train"}]}})
    assert cfg.curriculum.stages == ("agents=2", "agents=4 split=train")
    assert cfg.resolved().agents == 2  # the first stage sets the team size


@pytest.mark.parametrize("fields, words", [
    ({"stages": ("agents=2", "agents=99")}, "outside info_split's range"),
    ({"stages": ("agents=2", "agents=3 split=nope")}, "not a split of info_split"),
    ({"stages": ("agents=2", "agents=3 bogus_option=1")}, r"stages\[1\]"),
    ({"stages": ("agents=2", "agents=2")}, "a stage twice"),
    ({"stages": ("agents=2",), "demote_at": 0.9}, "must be below promote_at"),
    ({"stages": ("agents=2",), "replay_share": 1.0}, "replay_share"),
    ({"stages": ("agents=2",), "hysteresis": 0.3}, "stay reachable"),
])
def test_a_bad_curriculum_is_refused_at_startup_naming_the_field(fields, words):
    with pytest.raises(ConfigError, match=words):
        TrainConfig(scenario="info_split", curriculum=CurriculumConfig(**fields))


def test_agents_must_agree_with_the_first_stage():
    with pytest.raises(ConfigError, match="curriculum starts at agents=2"):
        TrainConfig(scenario="info_split", agents=4, curriculum=CurriculumConfig(stages=("agents=2", "agents=4")))


# ----- the machine -----
def test_promotes_at_the_bar_only_after_the_minimum_episodes():
    cur = machine()
    cur.record(0, [1.0, 1.0, 1.0])
    assert cur.step(1) is None  # 3 < min_episodes
    cur.record(0, [0.2])  # window mean 0.8: exactly the bar
    move = cur.step(2)
    assert (move.source, move.target, cur.stage, cur.promotions) == (0, 1, 1, 1)
    assert cur.window_success() is None and cur.episodes_at_stage == 0  # a move starts a fresh window
    assert cur.metrics()["curriculum/n_agents"] == 4.0


def test_steps_back_at_or_below_the_floor_and_then_needs_the_raised_bar():
    cur = machine(hysteresis=0.1)
    cur.record(0, [1.0] * 4)
    cur.step(1)
    cur.record(1, [0.2, 0.2, 0.2, 0.2])
    assert cur.step(2).target == 0 and cur.demotions == 1
    cur.record(0, [0.8] * 4)
    assert cur.step(3) is None  # 0.8 no longer suffices to return to stage 1 ...
    cur.record(0, [1.0] * 4)
    assert cur.step(4).target == 1  # ... 0.9 does (the window holds the last four)
    assert cur.raised == {}


def test_stays_between_the_thresholds_and_never_moves_past_either_end():
    cur = machine()
    cur.record(0, [0.0] * 8)
    assert cur.step(1) is None  # no stage below the first
    cur.record(0, [0.5] * 4)
    assert cur.step(2) is None
    cur.stage = 2
    cur.record(2, [1.0] * 4)
    assert cur.step(3) is None  # no stage above the last


def test_replayed_stages_feed_their_own_figure_but_not_the_deciding_window():
    cur = machine()
    cur.stage = 1
    cur.record(0, [1.0] * 10)
    assert cur.window_success() is None and cur.stage_success(0) == 1.0
    assert cur.step(1) is None


def test_replay_draws_earlier_stages_at_the_configured_share():
    cur = machine(replay_share=0.3)
    rng = np.random.default_rng(0)
    assert set(cur.draw_stages(200, rng)) == {0}  # nothing to replay at the first stage
    cur.stage = 2
    drawn = np.array(cur.draw_stages(4000, rng))
    assert abs(np.mean(drawn < 2) - 0.3) < 0.03
    assert abs(np.mean(drawn == 0) - np.mean(drawn == 1)) < 0.04  # earlier stages drawn uniformly


def test_state_survives_json_and_refuses_other_stages():
    cur = machine()
    cur.record(0, [1.0] * 4)
    cur.step(5)
    cur.record(1, [0.5, 0.25])
    state = json.loads(json.dumps(cur.state_dict()))
    back = machine()
    back.load_state_dict(state)
    assert back.state_dict() == cur.state_dict()
    assert back.history[0].iteration == 5 and back.window_success() == 0.375
    other = Curriculum([Stage(2), Stage(3)], CurriculumConfig(stages=("agents=2", "agents=3")))
    with pytest.raises(ValueError, match="stages"):
        other.load_state_dict(state)


# ----- one batch, several team sizes -----
def test_one_collection_mixes_team_sizes_and_records_each_episode_s_variant():
    factories = {"n2": env_factory("info_split", 2, "train", {}), "n4": env_factory("info_split", 4, "train", {})}
    worker = RolloutWorker(factories["n2"], policy=None, chat=None, variants=factories)
    batch = worker.collect([1, 1, 2, 3], actor=expert_actor, variants=["n2", "n4", "n4", "n2"])
    sizes = {}
    for ep in batch.episodes:
        sizes.setdefault((ep.env, ep.variant), set()).add(ep.agent)
    assert sorted((env, variant, len(agents)) for (env, variant), agents in sizes.items()) == [
        (0, "n2", 2), (1, "n4", 4), (2, "n4", 4), (3, "n2", 2)]
    assert len(worker.envs) == 4  # two of each variant, reused by later collections
    worker.collect([5, 6], actor=expert_actor, variants=["n4", "n4"])
    assert len(worker.envs) == 4
    with pytest.raises(KeyError, match="unknown"):
        worker.collect([1], actor=expert_actor, variants=["n8"])


def test_a_bounded_collection_sizes_its_parts_by_the_widest_team_it_mixes():
    factories = {"n2": env_factory("info_split", 2, "train", {}), "n4": env_factory("info_split", 4, "train", {})}
    worker = RolloutWorker(factories["n2"], policy=None, chat=None, variants=factories, max_rows=4)
    batch = worker.collect([1, 2, 3], actor=expert_actor, variants=["n2", "n4", "n2"])
    per_env = {}
    for ep in batch.episodes:
        per_env.setdefault(ep.env, (ep.variant, set()))[1].add(ep.agent)
    # one env per part (4 rows / a team of 4), three distinct envs, each of its own size
    assert [(v, len(a)) for _, (v, a) in sorted(per_env.items())] == [("n2", 2), ("n4", 4), ("n2", 2)]
