"""The info_split rules: malformed actions, the board, endings, turn budget, rewards, options, comms."""

import json

import numpy as np
import pytest
from scenario_helpers import news, play_expert

import scenarios
from scenarios.info_split import InfoSplitEnv
from scenarios.info_split.actions import READ_BOARD, post_action
from scenarios.tool_use import tools


def _env_with(family: str, n_agents: int, split: str, **options):
    """An env reset on the first seed whose task is ``family``."""
    env = scenarios.make("info_split", n_agents=n_agents, split=split, **options)
    for seed in range(300):
        env.reset(seed=seed)
        if env._task.family == family:
            return env
    raise AssertionError(f"no {family} task in 300 seeds")


def _holder(env, tool: str) -> str:
    return next(a for a, m in env._members.items() if tool in m.role.tools)


def _relay():
    # book_relay with 2 agents: one holds find_flights, the other book_flight.
    env = _env_with("book_relay", 2, "basic")
    ff, bf = _holder(env, "find_flights"), _holder(env, "book_flight")
    assert ff != bf
    return env, ff, bf


MALFORMED = {
    "not_json": "post Paris",
    "unknown_tool": '{"tool": "get_stock", "args": {}}',
    "tool_not_held": "NOT_HELD",
    "missing_arg": '{"tool": "find_flights", "args": {"origin": "Paris"}}',
    "extra_arg": '{"tool": "find_flights", "args": {"origin": "Paris", "destination": "Rome", "day": "Mon", "x": "y"}}',
    "mistyped_arg": '{"tool": "find_flights", "args": {"origin": 42, "destination": "Rome", "day": "Mon"}}',
    "unknown_entity": '{"tool": "find_flights", "args": {"origin": "Atlantis", "destination": "Rome", "day": "Mon"}}',
    "empty": "",
    "whitespace_only": " \n\t ",
    "huge": "{" + "x" * 100_000 + "}",
    "non_ascii": '{"tool": "post", "args": {"value": "S\u00e3o"}}',
    "json_array": '[{"tool": "read_board", "args": {}}]',
    "json_number": "42",
    "json_null": "null",
    "json_string": '"read_board"',
    "wrong_keys": '{"tool": "read_board", "arguments": {}}',
    "extra_key_msg": '{"tool": "read_board", "args": {}, "msg": "hello"}',
    "read_with_args": '{"tool": "read_board", "args": {"value": "Paris"}}',
    "post_unknown_value": '{"tool": "post", "args": {"value": "Atlantis"}}',
    "post_number": '{"tool": "post", "args": {"value": 3}}',
    "post_two_values": '{"tool": "post", "args": {"value": "Paris", "more": "Rome"}}',
    "args_not_object": '{"tool": "post", "args": "Paris"}',
    "answer_number": '{"answer": 21}',
    "empty_answer": '{"answer": " "}',
    "both_keys": '{"tool": "read_board", "args": {}, "answer": "BK01"}',
    "truncated_json": '{"tool": "read_board", "args": {',
    "deep_nesting": "[" * 400 + "]" * 400,
    "repeated_call": "REPEAT",
}


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_action_is_an_error_observation(name):
    env, ff, bf = _relay()
    action = MALFORMED[name]
    if action == "REPEAT":
        action = env.expert_action(ff)
        env.step({ff: action, bf: READ_BOARD})
    elif action == "NOT_HELD":
        action = env._task.solution[0].json()  # find_flights, which bf does not hold
    obs, rew, term, trunc, infos = env.step({ff: READ_BOARD, bf: action} if name == "tool_not_held"
                                            else {ff: action, bf: READ_BOARD})
    who = bf if name == "tool_not_held" else ff
    assert obs[who]["text"].startswith("error: ")
    assert infos[who]["invalid_action"] is True
    assert infos[who]["reward_components"]["format"] == -1.0
    assert rew[who] == pytest.approx(-0.2)
    assert not term[who] and not trunc[who] and set(env.agents) == {ff, bf}


def test_results_are_private_and_posts_are_readable_from_the_next_turn():
    env, ff, bf = _relay()
    flight = env._task.solution[1].args[0][1]
    obs, *_ = env.step({ff: env.expert_action(ff), bf: READ_BOARD})
    assert flight in obs[ff]["text"] and flight not in obs[bf]["text"]
    assert all(flight not in o for o in env.action_grammar(bf).expand())
    assert env.expert_action(ff) == post_action(flight)
    obs, *_ = env.step({ff: post_action(flight), bf: READ_BOARD})
    assert news(obs[ff]) == f"posted {flight}" and news(obs[bf]) == "board: empty"
    obs, *_ = env.step({ff: READ_BOARD, bf: READ_BOARD})
    assert news(obs[bf]) == f"board: {flight}"
    assert env.expert_action(bf) == env._task.solution[1].json()
    obs, *_ = env.step({ff: post_action(flight), bf: env.expert_action(bf)})
    assert news(obs[ff]) == f"{flight} is already on the board"
    _, rew, term, _, infos = env.step({ff: READ_BOARD, bf: env.expert_action(bf)})
    assert all(term.values()) and env.agents == []
    assert {i["termination_reason"] for i in infos.values()} == {"success"}
    assert rew[ff] == pytest.approx(0.75) and rew[bf] == pytest.approx(0.75)


def test_wrong_answer_ends_only_that_agent_and_the_team_plays_on():
    env = _env_with("split_weather", 5, "basic")  # 3 pieces, so 2 helpers
    helper = next(a for a, m in env._members.items() if m.role.label == "helper")
    actions = {a: env.expert_action(a) for a in env.agents}
    _, rew, term, trunc, infos = env.step({**actions, helper: '{"answer": "Nowhere"}'})
    assert term[helper] and infos[helper]["termination_reason"] == "failure" and rew[helper] == 0.0
    assert helper not in env.agents and len(env.agents) == 4
    finished = {}
    while env.agents:
        _, _, _, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
        finished.update({a: i["termination_reason"] for a, i in infos.items() if "termination_reason" in i})
    assert set(finished) == set(env.possible_agents) - {helper}
    assert set(finished.values()) == {"success"}
    assert len(env.action_grammar(helper)) == 0


def test_turn_budget_is_the_expert_length_plus_slack_capped_by_max_turns():
    env = _env_with("event_booking", 8, "hard")
    assert env._plan_turns == 11 and env._budget == 13 and "budget=13" in env.state()
    capped = _env_with("event_booking", 8, "hard", max_turns=5)
    assert capped._budget == 5
    for _ in range(5):
        _, _, term, trunc, infos = capped.step({a: READ_BOARD for a in capped.agents})
    assert all(trunc.values()) and not any(term.values()) and capped.agents == []
    assert {i["termination_reason"] for i in infos.values()} == {"max_turns"}
    tight = _env_with("book_relay", 2, "basic", turn_slack=0)
    assert set(play_expert(tight, tight.episode_seed).values()) == {"success"}


def test_contributions_of_the_expert_team_sum_to_one_and_rewards_mix():
    for family, split in (("event_booking", "hard"), ("split_convert", "basic"), ("trip_booking", "hard")):
        env = _env_with(family, 4, split)
        total = dict.fromkeys(env.possible_agents, 0.0)
        contrib = 0.0
        while env.agents:
            _, rew, _, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
            for a, i in infos.items():
                total[a] += rew[a]
                contrib += i["reward_components"]["contribution"]
        assert contrib == pytest.approx(1.0)
        assert sum(total.values()) == pytest.approx(0.75 * 4 + 0.25)
    team_only = _env_with("event_booking", 4, "hard", individual_weight=0.0)
    totals = dict.fromkeys(team_only.possible_agents, 0.0)
    while team_only.agents:
        _, rew, *_ = team_only.step({a: team_only.expert_action(a) for a in team_only.agents})
        for a, r in rew.items():
            totals[a] += r
    assert set(totals.values()) == {1.0}


def test_useless_calls_and_posts_earn_no_contribution():
    env, ff, bf = _relay()  # L = 2 calls + 1 needed post (the flight id)
    first = env._task.solution[0]
    no_slot = json.dumps({"tool": "find_flights", "args": dict(first.args[:3])})
    _, _, _, _, infos = env.step({ff: no_slot, bf: post_action(first.args[0][1])})
    assert [infos[a]["reward_components"]["contribution"] for a in (ff, bf)] == [0.0, 0.0]
    _, _, _, _, infos = env.step({ff: env.expert_action(ff), bf: READ_BOARD})
    assert infos[ff]["reward_components"]["contribution"] == pytest.approx(1 / 3)


def test_reward_weights_scale_their_layer():
    env = _env_with("book_relay", 2, "basic", reward_weights={"format": 1.0, "task": 2.0})
    assert env.reward_weights == {"format": 1.0, "contribution": 0.25, "task": 1.5}
    _, rew, *_ = env.step({a: "junk" for a in env.agents})
    assert set(rew.values()) == {-1.0}


def test_crashing_backend_ends_only_the_caller_with_error(monkeypatch):
    def boom(world, args):
        raise RuntimeError("backend down")

    env, ff, bf = _relay()
    monkeypatch.setitem(tools.BACKENDS, "find_flights", boom)
    _, rew, term, _, infos = env.step({ff: env.expert_action(ff), bf: READ_BOARD})
    assert term[ff] and infos[ff]["termination_reason"] == "error" and rew[ff] == 0.0
    assert env.agents == [bf]


def test_observations_shared_by_comms_finish_faster_and_more_often():
    # note_seen stands in for the comms layer: every agent sees its teammates' observations.
    def play(env, seed, share, rng):
        obs, _ = env.reset(seed=seed)
        turns, won = 0, False
        while True:
            if share:
                for o in obs.values():
                    for b in env.agents:
                        env.note_seen(b, o["text"])
            if not env.agents:
                return won, turns
            turns += 1
            # A noisy team: 30% of actions are wasted turns.
            obs, _, _, _, infos = env.step({a: READ_BOARD if rng.random() < 0.3 else env.expert_action(a)
                                            for a in env.agents})
            won |= any(i.get("termination_reason") == "success" for i in infos.values())

    env = scenarios.make("info_split", n_agents=3, split="hard")
    seeds = InfoSplitEnv.eval_seeds("hard", 60)
    board = [play(env, s, False, np.random.default_rng(s)) for s in seeds]
    comms = [play(env, s, True, np.random.default_rng(s)) for s in seeds]
    assert np.mean([t for _, t in comms]) < np.mean([t for _, t in board]) - 3
    assert np.mean([w for w, _ in comms]) >= 0.95 > 0.8 > np.mean([w for w, _ in board])


def test_options_validation_and_registry():
    info = scenarios.info("info_split")
    assert (info.kind, info.agent_range, info.splits) == ("cooperative", (2, 16), ("train", "basic", "hard"))
    assert info.description and InfoSplitEnv.metadata["name"] == "info_split"
    bad = [({"n_agents": 1}, "n_agents"), ({"n_agents": 17}, "n_agents"), ({"turn_slack": -1}, "turn_slack"),
           ({"individual_weight": 1.5}, "individual_weight"), ({"individual_weight": True}, "individual_weight"),
           ({"train_mix": (1.0,)}, "train_mix"), ({"train_mix": (0, 0)}, "train_mix"),
           ({"tool_timeout_s": 0}, "tool_timeout_s"), ({"split": "adversarial"}, "split"),
           ({"expert_skips_conversion": 1.5}, "expert_skips_conversion"),
           ({"expert_skips_conversion": "half"}, "expert_skips_conversion"),
           ({"reward_weights": {"style": 1}}, "valid keys"), ({"colour": "red"}, "valid options")]
    for kwargs, match in bad:
        with pytest.raises(ValueError, match=match):
            scenarios.make("info_split", **{"n_agents": 2, **kwargs})


def test_state_render_and_tool_schemas():
    env = scenarios.make("info_split", n_agents=3, split="hard", seed=5, render_mode="ansi")
    env.reset()
    state = env.state()
    assert state.count("role=") == 3 and "team: family=" in state and "board=-" in state
    assert "agent_2" in env.render()
    names = [s["function"]["name"] for s in env.tool_schemas("agent_0")]
    assert names[-2:] == ["post", "read_board"] and len(names) >= 3
    json.dumps(env.tool_schemas("agent_0"))


@pytest.mark.parametrize("split", ["basic", "hard"])
def test_an_expert_that_skips_conversions_fails_exactly_the_tasks_that_need_one_within_the_same_budget(split):
    plain = scenarios.make("info_split", n_agents=3, split=split)
    flawed = scenarios.make("info_split", n_agents=3, split=split, expert_skips_conversion=1.0)
    converting = 0
    for seed in InfoSplitEnv.eval_seeds(split, 40):
        plain.reset(seed=seed)
        flawed.reset(seed=seed)
        assert (flawed._task.text, flawed._budget) == (plain._task.text, plain._budget)  # the right protocol's
        needs_conversion = any(call.tool == "convert" for call in plain._task.solution)
        converting += needs_conversion
        reasons, actions = {}, []
        while flawed.agents:
            step = {a: flawed.expert_action(a) for a in flawed.agents}
            for a, action in step.items():
                assert action in flawed.action_grammar(a).expand()  # a flawed demonstration is a valid action
            actions += step.values()
            *_, infos = flawed.step(step)
            reasons.update({a: i["termination_reason"] for a, i in infos.items() if "termination_reason" in i})
        assert ("success" in reasons.values()) is not needs_conversion
        for a in flawed.possible_agents:  # the family's success, as the team's evaluation averages it
            assert flawed.episode_stats(a)[f"success/{plain._task.family}"] == float(reasons[a] == "success")
        assert not any('"convert"' in a for a in actions)
    assert (0 < converting < 40) if split == "basic" else converting == 0  # only basic tasks convert


def test_the_conversion_skip_is_drawn_per_episode_from_the_seed():
    env = scenarios.make("info_split", n_agents=3, split="basic", expert_skips_conversion=0.5)
    draws = []
    for seed in InfoSplitEnv.eval_seeds("basic", 200):
        env.reset(seed=seed)
        draws.append(env._expert_skips)
        env.reset(seed=seed)
        assert env._expert_skips == draws[-1]
    assert 0.35 < np.mean(draws) < 0.65

