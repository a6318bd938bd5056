"""The info_split scenario: random play, expert, grammar, roles, entities (the contract: test_contract.py)."""

import json
import re
import string

import numpy as np
import pytest
from scenario_helpers import play_expert

import scenarios
from scenarios.info_split import InfoSplitEnv
from scenarios.info_split.actions import READ_BOARD
from scenarios.tool_use.world import KIND_OF, entity_vocabulary

COUNTS = [2, 3, 5, 8]
JUNK = ["", "garbage", "null", "42", "[1, 2]", '{"answer": 7}', '{"tool": "post", "args": {"value": "Atlantis"}}',
        '{"tool": "read_board", "args": {}, "msg": "hi"}', "{" * 300, '{"tool": "get_weather"}', None, 3.5,
        "S\u00e3o Paulo", "x" * 2000, '{"answer": "Nowhere"}']


def test_task_is_independent_of_team_size():
    tasks = set()
    for n in COUNTS:
        env = scenarios.make("info_split", n_agents=n, split="hard")
        env.reset(seed=11)
        tasks.add((env._task.text, env._task.facts, env._task.answer))
    assert len(tasks) == 1


def test_thousand_random_episodes_never_raise():
    # Expert, grammar and junk actions mixed; every grammar action is valid, every expert action is
    # in the grammar, and observations and state stay inside their spaces.
    rng = np.random.default_rng(0)
    envs = {n: scenarios.make("info_split", n_agents=n) for n in range(2, 9)}
    printable = set(string.printable)
    shrank_while_running = False
    for episode in range(1000):
        env = envs[int(rng.integers(2, 9))]
        obs, _ = env.reset(seed=episode, options={"split": InfoSplitEnv.splits[episode % 3]})
        while env.agents:
            actions, from_grammar = {}, set()
            for a in env.agents:
                grammar, expert, r = env.action_grammar(a), env.expert_action(a), rng.random()
                assert expert in grammar
                if r < 0.4:
                    actions[a] = expert
                elif r < 0.85:
                    options = grammar.expand()
                    actions[a], _ = options[int(rng.integers(len(options)))], from_grammar.add(a)
                else:
                    actions[a] = JUNK[int(rng.integers(len(JUNK)))]
            before = len(env.agents)
            obs, rew, term, trunc, infos = env.step(actions)
            shrank_while_running |= 0 < len(env.agents) < before
            for a in actions:
                assert set(obs[a]["text"]) <= printable and 0 < len(obs[a]["text"]) <= env.max_obs_length
                assert np.isfinite(rew[a])
                assert infos[a]["invalid_action"] is (obs[a]["text"].startswith("error:"))
                if a in from_grammar:
                    assert infos[a]["invalid_action"] is False, (actions[a], obs[a])
                assert infos[a].get("termination_reason") != "error"
            if episode % 20 == 0:  # Text.contains checks char by char: sampled to keep the test fast
                assert env.state_space.contains(env.state())
                assert all(env.observation_space(a).contains(o) for a, o in obs.items())
    assert shrank_while_running


@pytest.mark.parametrize("split", ["basic", "hard"])
def test_expert_solves_every_task_at_every_team_size(split):
    env_by_n = {n: scenarios.make("info_split", n_agents=n, split=split) for n in range(2, 9)}
    seeds = InfoSplitEnv.eval_seeds(split, 140)
    wins = 0
    for i, seed in enumerate(seeds):
        reasons = play_expert(env_by_n[2 + i % 7], seed)
        wins += set(reasons.values()) == {"success"}
    assert wins / len(seeds) >= 1.0  # stated floor: the protocol solves every task within its budget


def test_expert_solves_train_mixture_with_one_success_per_agent():
    env = scenarios.make("info_split", n_agents=4)
    for seed in range(60):
        reasons = play_expert(env, seed)
        assert reasons == dict.fromkeys(env.possible_agents, "success")


@pytest.mark.parametrize("split", ["basic", "hard"])
def test_grammar_is_canonical_and_empty_for_departed_agents(split):
    env = scenarios.make("info_split", n_agents=3, split=split)
    for seed in range(6):
        env.reset(seed=seed)
        while env.agents:
            for a in env.agents:
                options = env.action_grammar(a).expand()
                assert READ_BOARD in options and 0 < len(options) <= 500
                for action in options:
                    assert action == json.dumps(json.loads(action))
            env.step({a: env.expert_action(a) for a in env.agents})
        for a in env.possible_agents:
            assert len(env.action_grammar(a)) == 0


def test_answers_in_grammar_are_seen_entities_of_the_answer_kind():
    env = scenarios.make("info_split", n_agents=3, split="train")
    for seed in range(20):
        env.reset(seed=seed)
        for a in env.agents:
            m = env._members[a]
            offered = {json.loads(o)["answer"] for o in env.action_grammar(a).expand() if o.startswith('{"answer"')}
            assert offered == {e for e in m.seen if KIND_OF[e] == env._task.answer_kind}
            assert env._task.answer not in offered  # nobody knows the answer before the team works for it


def test_no_agent_holds_every_piece():
    for split in ("basic", "hard"):
        for n in range(2, 9):
            env = scenarios.make("info_split", n_agents=n, split=split)
            for seed in range(15):
                env.reset(seed=seed)
                task = env._task
                tools = {c.tool for c in task.solution}
                held = [(set(m.role.facts), set(m.role.useful_tools())) for m in env._members.values()]
                assert all(f != set(task.facts) or t != tools for f, t in held)
                assert set().union(*(f for f, _ in held)) == set(task.facts)
                assert set().union(*(t for _, t in held)) == tools
                helpers = [m for m in env._members.values() if m.role.label == "helper"]
                pieces = len(task.facts) + len(tools)
                assert len(helpers) == max(0, n - pieces)


def test_entity_vocabulary_constant_and_covers_expert_values():
    vocab = entity_vocabulary()
    env = scenarios.make("info_split", n_agents=3, split="hard")
    assert env.entity_vocabulary() == vocab == sorted(vocab)
    for seed in range(20):
        env.reset(seed=seed)
        while env.agents:
            actions = {a: env.expert_action(a) for a in env.agents}
            for text in actions.values():
                obj = json.loads(text)
                values = [obj["answer"]] if "answer" in obj else list(obj["args"].values())
                assert set(values) <= set(vocab)
            env.step(actions)


def test_entities_never_inside_ordinary_words():
    long_entities = [e for e in KIND_OF if len(e) >= 3]
    words = set()
    for split in ("basic", "hard"):
        env = scenarios.make("info_split", n_agents=5, split=split)
        for seed in range(30):
            obs, _ = env.reset(seed=seed)
            texts = [o["text"] for o in obs.values()]
            while env.agents:
                actions = {a: env.expert_action(a) for a in env.agents}
                obs, *_ = env.step({**actions, env.agents[0]: "junk"})
                texts += [o["text"] for o in obs.values()]
            words |= {w for t in texts for w in re.findall(r"[A-Za-z0-9]+", t) if w not in KIND_OF}
    for w in words:
        assert not any(e in w for e in long_entities), w


def test_first_observation_is_short_and_says_who_and_what():
    env = scenarios.make("info_split", n_agents=8, split="hard", seed=2)
    obs, _ = env.reset()
    for a, o in obs.items():
        text = o["text"]
        assert text.startswith(f"you are {a} (") and "team task:" in text and "read_board()" in text
        assert len(text) <= 300  # about 60-80 tokens with entities kept whole
