"""The comms wrapper: PettingZoo API on real scenarios, delegation, and what each observation may hold."""

import json
import re
import warnings

import networkx as nx
import numpy as np
import pytest
from comms_helpers import Echo, run, senders_in
from gymnasium.spaces import Discrete
from pettingzoo import ParallelEnv
from pettingzoo.test import api_test, parallel_api_test
from pettingzoo.utils.conversions import parallel_to_aec

import comms
import scenarios
from comms import ChannelConfig, CommsWrapper, Topology, neighbours, with_message
from scenarios import OpponentStyles
from scenarios.base import CAPABILITIES
from scenarios.info_split import InfoSplitEnv
from scenarios.repeated_game import HELDOUT_STYLES, TRAIN_STYLES

CASES = [("tool_use", 3), ("navigation", 3), ("navigation", 5), ("info_split", 4), ("repeated_game", 2),
         ("predator_prey", 4)]
FAULTY = ChannelConfig(budget_chars=64, drop=0.3, delay=1, noise=0.05, seed=3)


@pytest.mark.parametrize("name,n", CASES)
@pytest.mark.parametrize("topology,channel", [("full", None), ("ring", FAULTY)])
def test_wrapped_scenarios_pass_pettingzoo_api_tests(name, n, topology, channel):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(comms.wrap(scenarios.make(name, n_agents=n, seed=0), topology, channel), num_cycles=15)
        api_test(parallel_to_aec(comms.wrap(scenarios.make(name, n_agents=n, seed=0), topology, channel)),
                 num_cycles=15)


def test_delegates_spaces_state_and_scenario_extras():
    env = scenarios.make("info_split", n_agents=3, seed=0)
    wrapped = comms.wrap(env, "ring")
    wrapped.reset(seed=4)
    assert wrapped.possible_agents == env.possible_agents and wrapped.agents == env.agents
    for a in env.possible_agents:
        assert wrapped.observation_space(a) is env.observation_space(a)
        assert wrapped.action_space(a) is env.action_space(a)
        assert wrapped.action_grammar(a) == env.action_grammar(a)
        assert wrapped.expert_action(a) == env.expert_action(a)
    assert wrapped.state() == env.state() and wrapped.state_space is env.state_space
    assert wrapped.entity_vocabulary() == env.entity_vocabulary()
    assert wrapped.tool_schemas("agent_0") == env.tool_schemas("agent_0")  # other attributes pass through
    assert wrapped.unwrapped is env and wrapped.metadata["name"] == "info_split"
    assert isinstance(wrapped.topology_graph, nx.Graph) and wrapped.topology_graph.number_of_edges() == 3
    assert set(wrapped.stats()) >= {"comms/sent", "comms/delivered", "comms/dropped", "comms/delayed"}


@pytest.mark.parametrize("topology", ["empty", "line", "star:directed", "ring:directed", "random:p=0.4,seed=3",
                                      "grid", "user:edges=0-3;4-1,directed=true"])
@pytest.mark.parametrize("channel", [ChannelConfig(), ChannelConfig(drop=0.2, delay=2, seed=1)])
def test_observation_never_holds_a_non_neighbours_text(topology, channel):
    for leave in (False, True):
        env = comms.wrap(Echo(n_agents=5, leave=leave), topology, channel)
        graph = env.topology_graph
        for seed in range(3):
            for obs in run(env, seed, 8):
                for agent, text in obs.items():
                    allowed = {agent, *neighbours(graph, agent)}
                    assert senders_in(text) <= allowed, (topology, agent, text)


def test_full_lossless_sharing_shows_every_neighbour_and_empty_changes_nothing():
    full = comms.wrap(Echo(n_agents=4), "full")
    for t, obs in enumerate(run(full, 0, 4)):
        for agent, text in obs.items():
            assert all(f"<<{b}:{t}>>" in text for b in full.possible_agents)
            assert t == 0 or all(f"act-{b}" in text for b in full.possible_agents if b != agent)
            assert "(t=" not in text  # nothing arrived late, so no send step is shown
    assert run(comms.wrap(Echo(n_agents=4), "empty"), 0, 4) == run(Echo(n_agents=4), 0, 4)


def test_agents_that_left_stop_sending():
    env = comms.wrap(Echo(n_agents=4, leave=True), "full")  # agent_i leaves after its turn i + 1
    for t, obs in enumerate(run(env, 0, 6)):
        for agent, text in obs.items():
            for b in env.possible_agents:
                if b != agent and t >= int(b.split("_")[1]) + 1:
                    assert f"<<{b}:{t}>>" not in text


def test_delay_shows_content_exactly_d_steps_later():
    d = 3
    env = comms.wrap(Echo(n_agents=2), "full", ChannelConfig(delay=d))
    stream = run(env, 0, 10)
    for t, obs in enumerate(stream):
        got = [m for m in senders_in(obs["agent_0"]) if m != "agent_0"]
        if t < d:
            assert got == []
        else:
            assert f"<<agent_1:{t - d}>>" in obs["agent_0"] and f"(t={t - d})" in obs["agent_0"]
            assert f"<<agent_1:{t}>>" not in obs["agent_0"]
    s = env.stats()
    assert s["comms/delayed"] == s["comms/sent"] == 2 * len(stream)
    assert s["comms/delivered"] == 2 * (len(stream) - d)
    env.reset(seed=1)  # what was in flight expires
    assert env.stats()["comms/expired"] == 2 * d


def test_drop_rate_matches_setting_within_three_sigma():
    p = 0.3
    env = comms.wrap(Echo(n_agents=5, max_turns=200), "full", ChannelConfig(drop=p, seed=11))
    run(env, 0, 99)  # 100 rounds x 20 directed pairs = 2,000 deliveries
    s = env.stats()
    n = s["comms/sent"]
    assert n == 2000 and s["comms/delivered"] + s["comms/dropped"] == n
    assert abs(s["comms/dropped"] / n - p) < 3 * np.sqrt(p * (1 - p) / n)


def test_identical_seeds_replay_and_different_seeds_differ():
    def stream(channel_seed, episode_seed):
        env = comms.wrap(Echo(n_agents=4, pad=30), "ring", ChannelConfig(drop=0.3, delay=1, noise=0.1,
                                                                          seed=channel_seed))
        return run(env, episode_seed, 12) + run(env, episode_seed + 1, 12)

    assert stream(0, 5) == stream(0, 5)
    assert stream(0, 5) != stream(1, 5)
    assert stream(0, 5)[1:] != stream(0, 6)[1:]


def test_size_caps_and_text_space_respected():
    env = comms.wrap(Echo(n_agents=4, pad=60), "full", ChannelConfig(budget_chars=40))
    space = env.observation_space("agent_0")
    for obs in run(env, 0, 3):
        for text in obs.values():
            assert space.contains({"text": text})
            for line in text.split("\n")[2:]:
                item = line.split(" ", 1)[1]  # after the sender id (nothing is late here)
                assert len(item) <= 40 and item.endswith(comms.TRUNCATED_MARK)
    assert env.stats()["comms/truncated"] == env.stats()["comms/sent"]
    capped = comms.wrap(Echo(n_agents=4), "full", ChannelConfig(total_chars=50))
    for obs in run(capped, 0, 3):
        for text in obs.values():
            assert len(text) - len(text.split("\n")[0]) <= 50
    # own text near the space's limit: the section gets only the room left, the own text stays whole
    tight = comms.wrap(Echo(n_agents=3, pad=270), "full", ChannelConfig(noise=0.2))
    for obs in run(tight, 0, 3):
        for agent, text in obs.items():
            assert space.contains({"text": text}) and len(text) <= Echo.max_obs_length
            assert text.startswith(f"<<{agent}:")


def test_note_seen_gets_what_was_delivered():
    env = comms.wrap(Echo(n_agents=3), "line", ChannelConfig())
    run(env, 0, 2)
    noted = env.unwrapped.noted
    assert noted["agent_0"] and all("agent_1" in t and "agent_2" not in t for t in noted["agent_0"])
    assert {s for t in noted["agent_1"] for s in senders_in(t)} == {"agent_0", "agent_2"}


def test_graph_is_rebuilt_for_the_agents_at_reset():
    inner = Echo(n_agents=3)
    env = comms.wrap(inner, Topology("ring"))
    env.reset(seed=0)
    assert sorted(env.topology_graph) == ["agent_0", "agent_1", "agent_2"]
    inner.possible_agents = [f"agent_{i}" for i in range(5)]  # a bigger team on the same wrapper
    obs, _ = env.reset(seed=0)
    assert env.topology_graph.number_of_nodes() == 5 and env.topology_graph.number_of_edges() == 5
    assert senders_in(obs["agent_4"]["text"]) == {"agent_3", "agent_4", "agent_0"}


def test_topology_given_as_graph_or_string():
    g = nx.Graph([(0, 1)])
    env = comms.wrap(Echo(n_agents=3), g)
    assert set(env.topology_graph.edges) == {("agent_0", "agent_1")}
    assert comms.wrap(Echo(n_agents=3), "line:directed").topology_graph.is_directed()
    with pytest.raises(ValueError, match="topology must be"):
        comms.wrap(Echo(n_agents=2), 3)
    with pytest.raises(ValueError, match="ChannelConfig"):
        comms.wrap(Echo(n_agents=2), "full", {"drop": 0.1})
    with pytest.raises(ValueError, match="ParallelEnv"):
        comms.wrap(object())


def test_every_declared_capability_is_forwarded_by_a_method_of_its_own():
    assert all(name in vars(CommsWrapper) for name in CAPABILITIES)  # never reached through __getattr__
    pp = scenarios.make("predator_prey", n_agents=4, seed=0)
    wrapped = comms.wrap(pp, "full")
    wrapped.reset(seed=1)
    wrapped.step({a: wrapped.expert_action(a) for a in wrapped.agents})
    assert [wrapped.team_of(a) for a in wrapped.possible_agents] == ["predator"] * 2 + ["prey"] * 2
    assert wrapped.action_classes() == pp.action_classes() and wrapped.turn_budget_visible is pp.turn_budget_visible is True
    assert [wrapped.episode_stats(a) for a in pp.possible_agents] == [pp.episode_stats(a) for a in pp.possible_agents]
    assert comms.wrap(scenarios.make("repeated_game", n_agents=2)).opponent_styles() == OpponentStyles(
        TRAIN_STYLES, HELDOUT_STYLES)
    team = comms.wrap(scenarios.make("info_split", n_agents=3, seed=0), "ring", ChannelConfig(mode="message"))
    team.reset(seed=2)
    inner, a = team.unwrapped, team.agents[0]
    act = inner.expert_action(a)
    assert team.action_class(a, with_message(act, "Paris")) == inner.action_class(a, act) is not None
    assert team.expert_turn(a, team.agents[1:]) == inner.expert_turn(a, team.agents[1:])
    assert team.action_summary(a, act) == inner.action_summary(a, act)
    assert team.shared_view(a, "you are x\nyou know: event Gala") == "you know: event Gala"
    echo = Echo(n_agents=2)
    plain = comms.wrap(echo, "full")
    plain.reset(seed=0)
    plain.note_seen("agent_0", "hello")
    assert echo.noted["agent_0"][-1] == "hello" and plain.turn_budget_visible is False  # the base default
    assert plain.team_of("agent_0") == "" and plain.action_classes() == () and plain.episode_stats("agent_0") == {}


def test_a_parallel_env_that_is_not_a_text_scenario_is_refused():
    class Texty(ParallelEnv):
        possible_agents = ["agent_0"]

        def observation_space(self, agent):
            from gymnasium.spaces import Dict, Text
            return Dict({"text": Text(10)})

    with pytest.raises(ValueError, match="not a scenarios.base.TextScenario"):
        comms.wrap(Texty())


def test_non_text_env_is_refused_with_a_hint():
    class Boxy(ParallelEnv):
        possible_agents = ["agent_0"]

        def observation_space(self, agent):
            return Discrete(3)

    with pytest.raises(ValueError, match=r"needs observations \{'text': Text\}"):
        comms.wrap(Boxy())


def test_info_split_team_with_full_sharing_solves_with_the_expert():
    def play(env, seed):
        env.reset(seed=seed)
        turns, reasons = 0, set()
        while env.agents:
            turns += 1
            _, _, _, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
            reasons |= {i["termination_reason"] for i in infos.values() if "termination_reason" in i}
        return reasons, turns

    seeds = InfoSplitEnv.eval_seeds("hard", 8)
    shared = [play(comms.wrap(scenarios.make("info_split", n_agents=4, split="hard"), "full"), s) for s in seeds]
    board = [play(scenarios.make("info_split", n_agents=4, split="hard"), s) for s in seeds]
    assert all(r == {"success"} for r, _ in shared)
    assert np.mean([t for _, t in shared]) < np.mean([t for _, t in board])


def test_a_shown_turn_budget_stays_last_and_is_never_shared():
    env = comms.wrap(scenarios.make("predator_prey", n_agents=4, seed=0), "full")
    obs, _ = env.reset(seed=1)
    steps = 0
    while obs:
        for ob in obs.values():
            text = ob["text"]
            assert "team:" in text and re.fullmatch(r"turn \d+ of \d+", text.splitlines()[-1])
            assert len(re.findall(r"turn \d+ of \d+", text)) == 1  # a teammate's budget never arrives
        obs, *_ = env.step({a: env.expert_action(a) for a in env.agents})
        obs = {a: o for a, o in obs.items() if a in env.agents}  # an ended agent's last text has no budget
        steps += 1
    assert steps > 2


def test_skipped_eval_seeds_pass_through_the_wrapper():
    env = comms.wrap(scenarios.make("info_split", n_agents=3, seed=0), "ring")
    assert env.eval_seeds("hard", 3, skip=7) == InfoSplitEnv.eval_seeds("hard", 3, skip=7)


def test_a_line_every_agent_already_has_is_not_repeated_per_neighbour():
    env = comms.wrap(scenarios.make("info_split", n_agents=4, seed=0), "full")
    obs, _ = env.reset(seed=2)
    own = {a: scenarios.make("info_split", n_agents=4, seed=0).reset(seed=2)[0][a]["text"] for a in obs}
    for agent, ob in obs.items():
        text = ob["text"]
        assert text.count("team task:") == 1  # the broadcast question once, not once per teammate
        for b in env.possible_agents:  # what is private to each teammate still arrives
            if b != agent:
                private = [line for line in own[b].splitlines() if line.startswith("you know:")][0]
                if private != "you know: nothing":
                    assert private in text


def test_teammates_get_news_not_self_descriptions():
    """The scenario's shared_view: a teammate's facts and results arrive, its role, tool list and
    empty reads do not; an idle teammate shows only what it did."""
    env = comms.wrap(scenarios.make("info_split", n_agents=4, split="hard"), "full")
    obs, _ = env.reset(seed=5)
    own = scenarios.make("info_split", n_agents=4, split="hard").reset(seed=5)[0]
    for agent, ob in obs.items():
        team = ob["text"].split("\nteam:\n", 1)[-1] if "\nteam:\n" in ob["text"] else ""
        assert "tools:" not in team and "you are" not in team and "nothing" not in team
        for b in env.possible_agents:
            facts = [line for line in own[b]["text"].splitlines() if line.startswith("you know:")][0]
            if b != agent and facts != "you know: nothing":
                assert f"{b} saw: {facts}" in team
            elif b != agent:
                assert b not in team  # nothing to share and no action yet: no line at all
    reader = next(a for a in env.agents if json.loads(env.expert_action(a)).get("tool") == "read_board")
    obs, *_ = env.step({a: env.expert_action(a) for a in env.agents})
    for agent, ob in obs.items():
        if agent != reader:
            assert f"{reader} did: read_board()" in ob["text"]  # "board: empty" is no news
            assert "board: empty" not in ob["text"].split("team:", 1)[1]


def test_teammates_see_actions_as_the_scenario_summarizes_them():
    env = comms.wrap(scenarios.make("info_split", n_agents=3, seed=0), "full")
    env.reset(seed=1)
    acts = {a: env.expert_action(a) for a in env.agents}
    obs, *_ = env.step(acts)
    for agent, ob in obs.items():
        for b, act in acts.items():
            if b != agent:
                assert f"did: {env.unwrapped.action_summary(b, act)}" in ob["text"]
                assert act not in ob["text"]  # not the raw JSON
