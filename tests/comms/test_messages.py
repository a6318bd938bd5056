"""Agent-written messages: the "say" field, its grammar, delivery to neighbours only, faults, and scenarios untouched."""

import warnings

import pytest
from comms_helpers import senders_in
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec

import comms
import scenarios
from comms import ChannelConfig, neighbours, split_message
from scenarios.base import split_turn_budget


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ('{"tool": "x", "args": {}, "say": "Paris"}', ('{"tool": "x", "args": {}}', "Paris", False)),
        ('{"tool": "x", "args": {}}', ('{"tool": "x", "args": {}}', None, False)),
        ('{"say":"Paris","tool":"x"}', ('{"tool": "x"}', "Paris", False)),  # free decoding's own spacing
        ('{"tool": "x", "say": 5}', ('{"tool": "x"}', None, True)),
        ('{"tool": "x", "say": "  "}', ('{"tool": "x"}', None, True)),
        ('not json at all, "say"', ('not json at all, "say"', None, True)),
        ('["say"]', ('["say"]', None, True)),
        ("", ("", None, False)),
        # a tool argument named "say" is the scenario's business, not a message
        ('{"tool": "t", "args": {"q": "hi", "say": "Sydney"}}', ('{"tool": "t", "args": {"q": "hi", "say": "Sydney"}}',
                                                              None, False)),
    ],
)
def test_split_message(action, expected):
    assert split_message(action) == expected


def expert_steps(env, seed, steps, say=None):
    """Play the expert (with an optional message per agent) and yield each step's outputs."""
    obs, _ = env.reset(seed=seed)
    yield obs, None
    for _ in range(steps):
        if not env.agents:
            return
        # the scenario's own protocol (a wrapper in message mode would talk by itself)
        actions = {a: env.unwrapped.expert_action(a) for a in env.agents}
        if say is not None:
            actions = {a: act[:-1] + f', "say": "{say(a)}"}}' for a, act in actions.items()}
        out = env.step(actions)
        yield out[0], out


def test_message_grammar_is_sound_and_keeps_every_plain_action():
    env = comms.wrap(scenarios.make("info_split", n_agents=3), "full", ChannelConfig(mode="message"))
    seen_messages = 0
    for seed in range(4):
        for _ in expert_steps(env, seed, 6):
            for agent in env.agents:
                base = env.env.action_grammar(agent)
                wrapped = env.action_grammar(agent)
                plain = set(base.expand())
                actions = wrapped.expand()
                assert plain <= set(actions) and env.expert_action(agent) in actions
                for action in actions:
                    inner, message, malformed = split_message(action)
                    assert not malformed and inner in plain, action
                    if message is not None:
                        seen_messages += 1
                        assert message in env.entity_vocabulary()
    assert seen_messages > 0


@pytest.mark.parametrize("name,n", [("info_split", 4), ("navigation", 3), ("bargaining", 3)])
@pytest.mark.parametrize("mode", ["message", "both"])
def test_message_wrapped_scenarios_pass_pettingzoo_api_tests(name, n, mode):
    channel = ChannelConfig(mode=mode, drop=0.2, delay=1, seed=2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(comms.wrap(scenarios.make(name, n_agents=n, seed=0), "ring", channel), num_cycles=15)
        api_test(parallel_to_aec(comms.wrap(scenarios.make(name, n_agents=n, seed=0), "ring", channel)),
                 num_cycles=15)


@pytest.mark.parametrize("topology", ["ring:directed", "line", "star:directed", "empty", "random:p=0.4,seed=3"])
def test_messages_reach_exactly_the_in_neighbours_at_the_next_step(topology):
    env = comms.wrap(scenarios.make("navigation", n_agents=5, settle=True), topology, ChannelConfig(mode="message"))
    graph = env.topology_graph
    for seed in range(3):
        senders: set[str] = set()
        for obs, _ in expert_steps(env, seed, 10, say=lambda a: f"act-{a}"):
            for agent, ob in obs.items():
                expected = {s for s in neighbours(graph, agent) if s in senders}
                assert senders_in(ob["text"]) == expected, (topology, agent, ob["text"])
            senders = set(env.agents)  # who speaks in the step that comes next


def test_dropped_and_delayed_messages():
    dropped = comms.wrap(scenarios.make("navigation", n_agents=3), "full", ChannelConfig(mode="message", drop=1.0))
    for obs, _ in expert_steps(dropped, 0, 5, say=lambda a: f"act-{a}"):
        assert all(not senders_in(ob["text"]) for ob in obs.values())
    stats = dropped.stats()
    assert stats["comms/messages"] > 0 and stats["comms/dropped"] == stats["comms/sent"] > 0

    delayed = comms.wrap(scenarios.make("navigation", n_agents=3, max_turns=12), "full",
                         ChannelConfig(mode="message", delay=2))
    obs, _ = delayed.reset(seed=1)
    step1 = {a: delayed.expert_action(a)[:-1] + f', "say": "act-{a}"}}' for a in delayed.agents}
    arrivals = []
    obs, *_ = delayed.step(step1)
    arrivals.append(any(senders_in(o["text"]) for o in obs.values()))
    for _ in range(2):
        obs, *_ = delayed.step({a: delayed.expert_action(a) for a in delayed.agents})
        arrivals.append(any(senders_in(o["text"]) for o in obs.values()))
    assert arrivals == [False, False, True]  # said at step 1, heard in the observation of step 3


def test_the_scenario_never_sees_the_say_field():
    plain = scenarios.make("info_split", n_agents=3)
    talking = comms.wrap(scenarios.make("info_split", n_agents=3), "ring", ChannelConfig(mode="message"))
    a, b = expert_steps(plain, 5, 8), expert_steps(talking, 5, 8, say=lambda agent: "Sydney")
    for (obs_p, out_p), (obs_t, out_t) in zip(a, b, strict=True):
        for agent in obs_p:
            own_t, budget_t = split_turn_budget(obs_t[agent]["text"])
            own_p, budget_p = split_turn_budget(obs_p[agent]["text"])
            assert own_t.startswith(own_p) and budget_t == budget_p  # own observation unchanged, budget last
        if out_p is not None:
            assert out_p[1:] == out_t[1:]  # rewards, terminations, truncations, infos
    assert talking.stats()["comms/messages"] > 0


def test_a_malformed_message_is_counted_and_the_action_still_played():
    env = comms.wrap(scenarios.make("info_split", n_agents=2), "full", ChannelConfig(mode="message"))
    env.reset(seed=0)
    actions = {a: '{"tool": "read_board", "args": {}, "say": 7}' for a in env.agents}
    _, _, _, _, infos = env.step(actions)
    assert not any(info["invalid_action"] for info in infos.values())
    assert env.stats()["comms/malformed_messages"] == 2 and env.stats()["comms/messages"] == 0


def test_observation_mode_offers_no_messages():
    env = comms.wrap(scenarios.make("info_split", n_agents=3), "full", ChannelConfig())
    env.reset(seed=0)
    assert all(env.action_grammar(a) == env.env.action_grammar(a) for a in env.agents)
    with pytest.raises(ValueError, match="message_values"):
        ChannelConfig(mode="message", message_values=0)


def _expert_episode(env, seed):
    """Play the (wrapped) scripted expert; returns (termination reasons, turns, actions played)."""
    env.reset(seed=seed)
    reasons, actions, turns = set(), [], 0
    while env.agents:
        acts = {a: env.expert_action(a) for a in env.agents}
        for a, act in acts.items():
            assert act in env.action_grammar(a), act  # a demonstration the constrained policy can play
        actions += acts.values()
        *_, infos = env.step(acts)
        reasons |= {i["termination_reason"] for i in infos.values() if "termination_reason" in i}
        turns += 1
    return reasons, turns, actions


def test_the_expert_talks_in_message_mode_and_posts_only_to_those_who_cannot_hear():
    """A teacher that talks: hand-offs ride on messages (free) instead of board posts (a turn each), so
    SFT demonstrations teach talking; teammates out of earshot still get a post."""
    seeds = scenarios.make("info_split", n_agents=4).eval_seeds("hard", 12)
    board = [_expert_episode(scenarios.make("info_split", n_agents=4, split="hard"), s) for s in seeds]
    full = [_expert_episode(comms.wrap(scenarios.make("info_split", n_agents=4, split="hard"), "full",
                                       ChannelConfig(mode="message")), s) for s in seeds]
    ring = [_expert_episode(comms.wrap(scenarios.make("info_split", n_agents=4, split="hard"), "ring",
                                       ChannelConfig(mode="message")), s) for s in seeds]
    for runs in (board, full, ring):
        assert all(reasons == {"success"} for reasons, _, _ in runs)
    said = [act for _, _, acts in full for act in acts if '"say"' in act]
    assert said and not any('"post"' in act for _, _, acts in full for act in acts)  # everyone hears everyone
    assert any('"post"' in act for _, _, acts in ring for act in acts)  # a ring's far side needs the board
    assert not any('"say"' in act for _, _, acts in board for act in acts)
    assert sum(t for _, t, _ in full) < sum(t for _, t, _ in ring) < sum(t for _, t, _ in board)


def test_the_expert_keeps_talking_through_dropped_messages():
    env = comms.wrap(scenarios.make("info_split", n_agents=4, split="hard"), "full",
                     ChannelConfig(mode="message", drop=0.3, seed=1))
    for seed in env.eval_seeds("hard", 12):
        reasons, _, _ = _expert_episode(env, seed)
        assert reasons == {"success"}  # what did not arrive is said again (the expert knows who heard what)
    assert env.stats()["comms/dropped"] > 0
