"""Messages on plain-text actions: the `` say: <value>`` form, its grammar, delivery, faults and the talking expert."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from pettingzoo.test import parallel_api_test

import comms
from comms import SAY_MARK, ChannelConfig, split_message, with_message, with_messages
from scenarios.base import ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar, Slot

ITEMS = ("apple", "pear", "plum")
WORDS = ("north", "south", "wait")


class Words(TextScenario):
    """Plain-word actions (``north``, ``take apple``); agent_i is shown ITEMS[i % 3] and may take what it saw."""

    metadata = {"render_modes": ["ansi"], "name": "words", "is_parallelizable": True}
    agent_range = (1, 4)
    max_obs_length = 300
    default_reward_weights = {"task": 1.0, "format": 0.2}

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.received: list[dict[str, object]] = []
        self.seen: dict[str, set[str]] = {}

    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        self.received = []
        self.seen = {a: {ITEMS[i % 3]} for i, a in enumerate(self.possible_agents)}
        return {a: f"{a} sees {ITEMS[i % 3]}" for i, a in enumerate(self.possible_agents)}

    def _step_agents(self, actions: dict[str, Any]) -> dict[str, StepOutcome]:
        self.received.append(dict(actions))
        out = {}
        for agent, action in actions.items():
            if action in self.action_grammar(agent):
                out[agent] = StepOutcome(f"you did {action}", {"task": 0.0})
            else:
                out[agent] = StepOutcome("error: write north, south, wait or take <item>", {"format": -1.0},
                                         invalid=True)
        return out

    def note_seen(self, agent: str, text: str) -> None:
        self.seen[agent] |= {w for w in text.split() if w in ITEMS}

    def action_grammar(self, agent: str) -> ActionGrammar:
        if agent not in self.agents:
            return ActionGrammar(())
        items = tuple(i for i in ITEMS if i in self.seen[agent])
        return ActionGrammar((*((w,) for w in WORDS), ("take ", Slot("item", items))))

    def entity_vocabulary(self) -> list[str]:
        return list(ITEMS)

    def expert_action(self, agent: str) -> str:
        return "wait"

    def expert_turn(self, agent: str, audience=()) -> tuple[str, str | None]:
        own = ITEMS[self.possible_agents.index(agent) % 3]
        return "wait", (own if audience else None)

    def action_classes(self) -> tuple[str, ...]:
        return (*WORDS, "take")

    def action_class(self, agent: str, action: object) -> str | None:
        if action in WORDS:
            return str(action)
        take = isinstance(action, str) and action.startswith("take ") and action[5:] in ITEMS
        return "take" if take else None


def _talking(n: int = 3, topology: str = "full", **channel: Any) -> comms.CommsWrapper:
    return comms.wrap(Words(n_agents=n, seed=0), topology, ChannelConfig(mode="message", **channel))


@pytest.mark.parametrize(("action", "expected"), [
    ("north say: apple", ("north", "apple", False)),
    ("take pear say: apple", ("take pear", "apple", False)),
    ("north say:apple", ("north", "apple", False)),  # free decoding's own spacing
    ("north say: apple say: pear", ("north say: apple", "pear", False)),  # the last mark is the message
    ("north", ("north", None, False)),
    ("north say:", ("north", None, True)),
    ("north say:   ", ("north", None, True)),
    (" say: apple", ("", "apple", False)),
    ('{"answer": "x say: y"}', ('{"answer": "x say: y"}', None, False)),  # a JSON object has only the field form
    ("", ("", None, False)),
])
def test_split_plain_message(action, expected):
    assert split_message(action) == expected


@pytest.mark.parametrize("action", ["north", "take apple", '{"tool": "x", "args": {}}', '{"move": "up"}'])
def test_with_message_round_trips_both_forms(action):
    said = with_message(action, "pear")
    assert split_message(said) == (action, "pear", False)
    if action.startswith("{"):
        assert said == action[:-1] + ', "say": "pear"}'  # the JSON form, byte for byte as before
    else:
        assert said == f"{action}{SAY_MARK}pear" == f"{action} say: pear"


def test_grammar_gives_each_template_its_form():
    grammar = ActionGrammar((("north",), ("take ", Slot("item", ("apple",))), ('{"move": "', Slot("m", ("up",)), '"}'),
                             ('{"open": ', Slot("n", ("1", "2")))))
    offered = set(with_messages(grammar, ["pear", 'bad"quote', "bad\nline"]).expand())
    assert offered == {"north", "take apple", '{"move": "up"}', '{"open": 1', '{"open": 2',
                       "north say: pear", "take apple say: pear", '{"move": "up", "say": "pear"}'}
    assert with_messages(grammar, []) == grammar


def test_wrapped_grammar_offers_every_action_with_and_without_a_message():
    env = _talking()
    obs, _ = env.reset(seed=1)
    for agent in env.agents:
        plain = set(env.unwrapped.action_grammar(agent).expand())
        offered = set(env.action_grammar(agent).expand())
        said = {f"{p} say: {v}" for p in plain for v in ITEMS if v in obs[agent]["text"]}
        assert said and offered == plain | said
        for action in offered:
            inner, message, malformed = split_message(action)
            assert inner in plain and not malformed and (message is None or message in ITEMS)


def test_the_scenario_gets_the_action_without_the_message_and_neighbours_hear_it():
    env = _talking(topology="line")  # agent_0 - agent_1 - agent_2
    env.reset(seed=1)
    obs, _, _, _, infos = env.step({"agent_0": "take apple say: apple", "agent_1": "north", "agent_2": "wait"})
    assert env.unwrapped.received[-1] == {"agent_0": "take apple", "agent_1": "north", "agent_2": "wait"}
    assert not any(i["invalid_action"] for i in infos.values())
    assert "agent_0 says: apple" in obs["agent_1"]["text"]
    assert "says" not in obs["agent_2"]["text"] and "says" not in obs["agent_0"]["text"]
    assert "apple" in env.unwrapped.seen["agent_1"]  # note_seen reached the scenario
    assert "take apple" in env.action_grammar("agent_1").expand()
    assert env.stats()["comms/messages"] == 1 and env.stats()["comms/malformed_messages"] == 0


@pytest.mark.parametrize("action", ["north say:", "north say:  \t", 'north say: "apple"', "say: say: say:",
                                    "\x00 say: \x07", "x" * 5000 + " say: " + "y" * 5000, 7, None, ["north"]])
def test_a_malformed_message_is_counted_and_never_raises(action):
    env = _talking()
    env.reset(seed=0)
    obs, _, _, _, infos = env.step({"agent_0": action, "agent_1": "north", "agent_2": "wait"})
    sent = env.unwrapped.received[-1]["agent_0"]
    assert sent == (split_message(action)[0] if isinstance(action, str) else action)
    counts = env.stats()
    if isinstance(action, str):
        assert counts["comms/malformed_messages"] + counts["comms/messages"] == 1
    assert all(env.observation_space(a).contains(o) for a, o in obs.items())
    assert infos["agent_1"]["invalid_action"] is False
    assert env.action_class("agent_0", action) in (*env.action_classes(), None)


def test_the_talking_expert_says_what_it_saw_in_the_plain_form():
    env = _talking(n=2)
    env.reset(seed=0)
    assert env.expert_action("agent_0") == "wait say: apple" and env.expert_action("agent_1") == "wait say: pear"
    assert all(env.expert_action(a) in env.action_grammar(a) for a in env.agents)
    obs, *_ = env.step({a: env.expert_action(a) for a in env.agents})
    assert env.unwrapped.received[-1] == {"agent_0": "wait", "agent_1": "wait"}
    assert "agent_1 says: pear" in obs["agent_0"]["text"]
    silent = comms.wrap(Words(n_agents=2, seed=0), "empty", ChannelConfig(mode="message"))
    silent.reset(seed=0)
    assert silent.expert_action("agent_0") == "wait"  # nobody hears it: nothing to say


def test_action_class_reads_the_action_without_its_message():
    env = _talking()
    env.reset(seed=0)
    assert env.action_class("agent_0", "take apple say: pear") == "take"
    assert env.action_class("agent_0", "north say: pear") == "north"
    assert comms.wrap(Words(n_agents=2), "full").action_class("agent_0", "north say: pear") is None  # no messages


def test_plain_word_scenario_passes_the_api_test_in_message_mode():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        parallel_api_test(_talking(drop=0.2, delay=1, seed=3), num_cycles=15)


def test_words_is_a_minimal_text_scenario():
    assert Words.options_cls is ScenarioOptions and Words(n_agents=1).turn_budget_visible is False
