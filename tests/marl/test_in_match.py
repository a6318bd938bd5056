"""In-match adaptation of the opponent model (`marl/engine/in_match.py`) on real parts.

What a user relies on: within a match the shown prediction picks up a rule the head never learned
(a sequence of another period, copying the agent's own move at another lag, a frequency rule), while
a head that is right keeps the say from the first step; a random opponent makes no predictor
confident; the rollout shows the agent the mixture's class (the prompt's hint is it) and records it
on the turn, and `opponent/shown_accuracy` scores it; a scenario that does not reveal the opponents'
moves is refused, at startup and in the rollout.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from run_helpers import game_policy

import scenarios
from marl.config import ConfigError, OpponentModelConfig, TrainConfig
from marl.engine.in_match import InMatchModels, SlotModel, in_match_models
from marl.engine.opponent import build_head, prediction_metrics
from marl.engine.policy_map import PolicyMap, single
from marl.engine.rollout import RolloutWorker
from marl.run.build import attach_opponent_head
from policies.chat import ChatFormat
from policies.opponent_head import OpponentHead, hint_text
from policies.outputs import Generation

UNIFORM3 = np.full(3, 1 / 3)


def play(model: SlotModel, opp: list[int], own: list[int], head: np.ndarray = UNIFORM3) -> list[int]:
    """The mixture's argmax before each step of a match, the step then revealed."""
    shown = []
    for y, mine in zip(opp, own, strict=True):
        shown.append(int(model.predict(head).argmax()))
        model.observe(y, mine)
    return shown


@pytest.mark.parametrize("period", [3, 4])
def test_a_sequence_of_a_period_the_head_never_saw_is_predicted_after_two_periods(period):
    rng = np.random.default_rng(period)
    base = [0, 1, 1, 2][:period] if period == 4 else [0, 2, 2]
    opp = base * (20 // period + 1)
    shown = play(SlotModel(3), opp[:20], list(rng.integers(0, 3, 20)))
    assert shown[2 * period + 1 :] == opp[2 * period + 1 : 20]


def test_copying_the_agents_own_move_two_rounds_back_is_learned_in_the_match():
    rng = np.random.default_rng(7)
    own = list(rng.integers(0, 3, 20))
    opp = [0, 0] + own[:-2]
    shown = play(SlotModel(3), opp, own)
    assert np.mean(np.array(shown[10:]) == np.array(opp[10:])) >= 0.9


def test_a_right_head_keeps_the_say_from_the_first_step():
    rng = np.random.default_rng(3)
    opp = list(rng.integers(0, 3, 20))
    model = SlotModel(3)
    for y in opp:
        head = np.full(3, 0.05)
        head[y] = 0.9
        assert int(model.predict(head).argmax()) == y
        model.observe(y, int(rng.integers(0, 3)))


def test_moves_the_head_rules_out_keep_no_mass_while_a_rule_takes_over():
    # the three-move variant under five action classes: the head has learned lizard and spock never come
    head = np.array([0.33, 0.33, 0.33, 0.005, 0.005])
    model = SlotModel(5)
    shown = []
    for mine in (0, 1, 0, 2, 1):
        shown.append(model.predict(head))
        model.observe(2, mine)
    mixed = model.predict(head)
    assert [int(p.argmax()) for p in shown[2:]] == [2, 2, 2] and mixed[2] >= 0.6
    assert all(p[3:].sum() < 0.02 for p in [*shown, mixed])


def test_a_random_opponent_makes_no_predictor_confident():
    rng = np.random.default_rng(11)
    model = SlotModel(3)
    tops = []
    for _ in range(20):
        tops.append(float(model.predict(UNIFORM3).max()))
        model.observe(int(rng.integers(0, 3)), int(rng.integers(0, 3)))
    assert np.mean(tops[10:]) < 0.6


def test_a_step_without_a_valid_opponent_action_teaches_nothing():
    model = SlotModel(3)
    model.predict(UNIFORM3)
    before = model.log_weights.copy()
    model.observe(-1, 2)
    np.testing.assert_array_equal(model.log_weights, before)
    assert model.opp == [] and model.own == [] and all(not t for t in model.tables)


def test_a_forfeited_round_leaves_the_history_so_a_lag_still_counts_the_opponents_rounds():
    # repeated_game leaves a forfeited round out of the history its styles read: copying the agent's move
    # of two rounds back then skips the forfeit, and so must the lag-2 context
    rng = np.random.default_rng(5)
    own = [int(x) for x in rng.integers(0, 3, 24)]
    own[12] = -1
    kept: list[int] = []
    opp = []
    for mine in own:
        opp.append(kept[-2] if len(kept) >= 2 else 0)
        if mine >= 0:
            kept.append(mine)
    model = SlotModel(3)
    shown = play(model, opp, own)
    assert shown[13:] == opp[13:]
    assert len(model.opp) == len(model.own) == 23


def test_the_mixer_keeps_one_model_per_agent_and_slot_and_remembers_what_it_showed():
    models = InMatchModels(3)
    head = torch.tensor([[[0.1, 0.8, 0.1]], [[0.7, 0.2, 0.1]]])
    mixed = models.mix([(0, "a"), (1, "a")], head)
    assert mixed.shape == head.shape and torch.allclose(mixed.sum(-1), torch.ones(2, 1))
    assert models.take_shown((0, "a")) == (1,) and models.take_shown((1, "a")) == (0,)
    assert models.take_shown((0, "a")) == ()
    models.observe((0, "a"), (2,), 0)
    assert models.models[((0, "a"), 0)].opp == [2] and models.models[((1, "a"), 0)].opp == []


@pytest.fixture(scope="module")
def adapting(tmp_path_factory):
    """repeated_game with two agents and a tiny policy whose head feeds its prompt, mixed in-match."""
    _, make_env, tokenizer, policy = game_policy(tmp_path_factory.mktemp("runs"), tokenizer_episodes=60)
    policy.opponent_head = build_head(policy.model, make_env(), seed=3)
    policy.opponent_head.feeds_prompt = True
    policy.opponent_head.in_match = True
    return make_env, policy, ChatFormat(tokenizer)


def test_the_rollout_shows_and_records_the_mixtures_class(adapting):
    make_env, policy, chat = adapting
    batch = RolloutWorker(make_env, policy, chat).collect([1, 2], sample_seed=4)
    classes = policy.opponent_head.classes
    llm_turns = [t for t in batch.turns if t.action_ids]
    assert llm_turns and all(len(t.prediction) == 1 for t in llm_turns)
    for t in llm_turns:  # the hint in the prompt is the recorded prediction
        assert t.prompt_ids[len(t.prompt_ids) - t.hint_len :] == chat.encode_text(hint_text(classes, list(t.prediction)))
    figures = prediction_metrics(policy, batch)
    hits = [p == y for t in llm_turns for p, y in zip(t.prediction, t.opponent, strict=True) if y >= 0]
    assert figures["opponent/shown_accuracy"] == pytest.approx(np.mean(hits))
    assert "opponent/shown_accuracy/rounds_1-5" in figures and "opponent/accuracy" in figures


def test_the_shown_class_catches_a_constant_opponent_whatever_its_move(tmp_path):
    # each episode's `fixed` style opens with its own move, which one head cannot know in advance
    _, make_env, tokenizer, policy = game_policy(tmp_path, tokenizer_episodes=60, styles=["fixed"])
    policy.opponent_head = build_head(policy.model, make_env(), seed=3)
    policy.opponent_head.feeds_prompt = policy.opponent_head.in_match = True
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect(list(range(6)), sample_seed=4)
    played = {batch.turns[ep.turns[0]].opponent[0] for ep in batch.episodes}
    assert len(played - {-1}) >= 2
    late = [batch.turns[i].prediction[0] == batch.turns[i].opponent[0] for ep in batch.episodes
            for i in ep.turns[4:] if batch.turns[i].opponent[0] >= 0]
    assert late and np.mean(late) >= 0.9


class _Recorder:
    """A stand-in policy that calls `hint_mix` for each of its rows and records what it was given."""

    def __init__(self) -> None:
        self.seen: list[list[int]] = []

    def generate(self, prompts, grammars, hint_mix=None, **kwargs):
        self.seen.append([int(v) for v in hint_mix(list(range(len(prompts))), torch.zeros(len(prompts), 1, 3))])
        n = len(prompts)
        return Generation([[]] * n, [None] * n, [""] * n, [None] * n, [True] * n, [0] * n, [])


def test_each_policy_of_a_map_mixes_the_rows_the_whole_call_names():
    a, b = _Recorder(), _Recorder()
    pm = PolicyMap({"a": a, "b": b}, lambda env, agent: agent)
    pm.generate([[1]] * 4, [None] * 4, ["b", "a", "b", "a"],
                hint_mix=lambda rows, probs: torch.tensor(rows))
    assert a.seen == [[1, 3]] and b.seen == [[0, 2]]


def test_without_in_match_nothing_is_recorded_and_the_head_alone_is_shown(adapting):
    make_env, policy, chat = adapting
    policy.opponent_head.in_match = False
    try:
        batch = RolloutWorker(make_env, policy, chat).collect([1], sample_seed=4)
    finally:
        policy.opponent_head.in_match = True
    assert all(t.prediction == () for t in batch.turns)
    assert not any(k.startswith("opponent/shown_accuracy") for k in prediction_metrics(policy, batch))


def test_a_scenario_that_hides_the_opponents_moves_is_refused(adapting, tmp_path):
    _, policy, _ = adapting
    hidden = scenarios.make("bargaining", n_agents=2)
    assert not hidden.opponent_actions_revealed() and scenarios.make("repeated_game").opponent_actions_revealed()
    with pytest.raises(ValueError, match="opponent.in_match false"):
        in_match_models(single(policy), [hidden])
    cfg = TrainConfig(scenario="bargaining", agents=2, output_dir=str(tmp_path),
                      opponent=OpponentModelConfig(mode="aux+input", in_match=True))
    with pytest.raises(ConfigError, match="in_match false"):
        attach_opponent_head(cfg, copy.copy(policy), lambda: scenarios.make("bargaining", n_agents=2))


def test_in_match_needs_aux_input_and_survives_a_checkpoint(tmp_path):
    with pytest.raises(ConfigError, match="aux\\+input"):
        OpponentModelConfig(mode="aux", in_match=True).validate()
    head = OpponentHead(8, 1, ("rock", "paper", "scissors"), feeds_prompt=True, in_match=True)
    head.save(tmp_path)
    loaded = OpponentHead.load(tmp_path)
    assert loaded is not None and loaded.in_match and loaded.feeds_prompt
