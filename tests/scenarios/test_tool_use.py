"""The tool-use scenario: malformed actions, expert, grammar, faults, multi-agent, entities (the contract: test_contract.py)."""

import json
import re
import threading
import time

import pytest
from scenario_helpers import play_expert

import scenarios
from scenarios.tool_use import ToolUseEnv, tools
from scenarios.tool_use.world import KIND_OF, entity_vocabulary

MALFORMED = {
    "not_json": "get_weather Paris",
    "unknown_tool": '{"tool": "get_stock", "args": {"city": "{city}"}}',
    "missing_arg": '{"tool": "get_weather", "args": {"city": "{city}"}}',
    "extra_arg": '{"tool": "get_weather", "args": {"city": "{city}", "day": "{day}", "unit": "C"}}',
    "mistyped_arg": '{"tool": "get_weather", "args": {"city": 42, "day": "{day}"}}',
    "unknown_entity": '{"tool": "get_weather", "args": {"city": "Atlantis", "day": "{day}"}}',
    "empty": "",
    "huge": "{" + "x" * 100_000 + "}",
    "non_ascii": '{"tool": "get_weather", "args": {"city": "S\u00e3o", "day": "{day}"}}',
    "json_array": '[{"tool": "get_weather"}]',
    "repeated_call": "REPEAT",
    "answer_number": '{"answer": 21}',
    "wrong_keys": '{"tool": "get_weather", "arguments": {"city": "{city}", "day": "{day}"}}',
    "nested_garbage": '{"tool": {"tool": {"tool": []}}, "args": [[{}]]}',
    "whitespace_only": "   \n\t ",
    "truncated_json": '{"tool": "get_weather", "args": {"city": "{city}"',
    "json_string": '"get_weather"',
    "args_not_object": '{"tool": "get_weather", "args": "Paris"}',
    "empty_answer": '{"answer": ""}',
    "both_keys": '{"tool": "get_weather", "args": {}, "answer": "21C"}',
    "null": "null",
    "deep_nesting": "[" * 400 + "]" * 400,
}


def _weather_env():
    # A basic weather task whose first useful call is get_weather(city, day).
    for seed in range(200):
        env = scenarios.make("tool_use", split="basic")
        env.reset(seed=seed)
        task = env._tasks["agent_0"].task
        if task.family == "weather_temp":
            return env, dict(task.solution[0].args)
    raise AssertionError("no weather task in 200 seeds")


@pytest.mark.parametrize("name", sorted(MALFORMED))
def test_malformed_action_is_an_error_observation(name):
    env, args = _weather_env()
    action = MALFORMED[name]
    if action == "REPEAT":
        action = env.expert_action("agent_0")
        env.step({"agent_0": action})
    else:
        action = action.replace("{city}", args["city"]).replace("{day}", args["day"])
    obs, _, term, trunc, infos = env.step({"agent_0": action})
    assert obs["agent_0"]["text"].startswith("error: ")
    assert infos["agent_0"]["invalid_action"] is True
    assert infos["agent_0"]["reward_components"]["format"] == -1.0
    assert not term["agent_0"] and not trunc["agent_0"]
    assert env.agents == ["agent_0"]  # the episode continues


def test_whitespace_variants_accepted():
    env, args = _weather_env()
    action = json.dumps({"args": {"day": args["day"], "city": args["city"]}, "tool": "get_weather"}, indent=2)
    obs, _, _, _, infos = env.step({"agent_0": action})
    assert obs["agent_0"]["text"].startswith("weather ")
    assert infos["agent_0"]["reward_components"]["arguments"] == 1.0


@pytest.mark.parametrize("split", ToolUseEnv.splits)
def test_expert_solves_every_task(split):
    env = scenarios.make("tool_use", split=split)
    seeds = list(range(100)) if split == "train" else ToolUseEnv.eval_seeds(split, 100)
    reasons = [play_expert(env, s)["agent_0"] for s in seeds]
    assert reasons.count("success") == 100


@pytest.mark.parametrize("split", ToolUseEnv.splits)
def test_grammar_actions_are_few_and_canonical(split):
    # That the expert's action is in the grammar and grammar actions are valid: test_contract.py.
    env = scenarios.make("tool_use", split=split)
    for seed in range(12):
        env.reset(seed=seed)
        while env.agents:
            options = env.action_grammar("agent_0").expand()
            assert 0 < len(options) <= 500
            for action in options:
                assert action == json.dumps(json.loads(action))  # canonical json.dumps form
            env.step({"agent_0": env.expert_action("agent_0")})


def test_families_per_split():
    fams = {s: set() for s in ToolUseEnv.splits}
    for split in fams:
        env = scenarios.make("tool_use", split=split)
        for seed in range(60):
            env.reset(seed=seed)
            fams[split].add(env._tasks["agent_0"].task.family)
    assert fams["basic"] == {"weather_temp", "weather_condition", "convert", "book_slot"}
    assert fams["hard"] == {"cheapest", "event_weather", "flight_convert", "event_booking"}
    assert fams["adversarial"] == fams["basic"] | fams["hard"] == fams["train"]


@pytest.mark.parametrize("split", ["basic", "hard", "adversarial"])
def test_an_expert_that_skips_conversions_fails_exactly_the_tasks_that_need_one(split):
    seeds = ToolUseEnv.eval_seeds(split, 80)
    plain, flawed = scenarios.make("tool_use", split=split), scenarios.make("tool_use", split=split,
                                                                            expert_skips_conversion=1.0)
    converting = 0
    for seed in seeds:
        plain.reset(seed=seed)
        task = plain._tasks["agent_0"].task
        flawed.reset(seed=seed)
        assert flawed._tasks["agent_0"].task.text == task.text  # the same tasks as without the option
        needs_conversion = any(call.tool == "convert" for call in task.solution)
        converting += needs_conversion
        actions = []
        while flawed.agents:
            action = flawed.expert_action("agent_0")
            assert action in flawed.action_grammar("agent_0").expand()  # a flawed demo is still a valid action
            actions.append(action)
            *_, infos = flawed.step({"agent_0": action})
        assert infos["agent_0"]["termination_reason"] == ("failure" if needs_conversion else "success")
        assert not any('"convert"' in a for a in actions)
    assert 0 < converting < len(seeds)


def test_the_share_of_tasks_whose_expert_skips_conversion_follows_the_option():
    seeds = ToolUseEnv.eval_seeds("basic", 400)
    env = scenarios.make("tool_use", split="basic", expert_skips_conversion=0.6)
    convert_tasks = []
    for seed in seeds:
        env.reset(seed=seed)
        if env._tasks["agent_0"].task.family == "convert":
            convert_tasks.append(seed)
    failed = [s for s in convert_tasks if play_expert(env, s)["agent_0"] == "failure"]
    assert 0.45 < len(failed) / len(convert_tasks) < 0.75
    assert play_expert(env, convert_tasks[0]) == play_expert(env, convert_tasks[0])  # drawn from the seed


@pytest.mark.parametrize("share", [-0.1, 1.5, True, "half"])
def test_a_bad_conversion_skip_share_names_the_option(share):
    with pytest.raises(ValueError, match="expert_skips_conversion"):
        scenarios.make("tool_use", expert_skips_conversion=share)


def test_adversarial_transient_failure_then_success():
    env = scenarios.make("tool_use", split="adversarial", seed=0)
    env.reset()
    texts = []
    while env.agents:
        obs, *_ = env.step({"agent_0": env.expert_action("agent_0")})
        texts.append(obs["agent_0"]["text"])
    assert any(t.startswith("tool failed:") and "retry" in t for t in texts)
    assert texts[-1].startswith("answer received: correct")


def test_wrong_answer_fails_and_max_turns_truncates():
    env = scenarios.make("tool_use", split="basic", seed=5, max_turns=3)
    env.reset()
    env.step({"agent_0": env.expert_action("agent_0")})
    _, _, term, trunc, infos = env.step({"agent_0": '{"answer": "Nowhere"}'})
    assert term["agent_0"] and not trunc["agent_0"]
    assert infos["agent_0"]["termination_reason"] == "failure"
    env.reset(seed=5)
    for _ in range(3):
        _, _, term, trunc, infos = env.step({"agent_0": "junk"})
    assert trunc["agent_0"] and not term["agent_0"]
    assert infos["agent_0"]["termination_reason"] == "max_turns"
    assert env.agents == []


@pytest.mark.parametrize("answer_right", [True, False])
def test_the_family_success_stat_follows_the_answer(answer_right):
    env = scenarios.make("tool_use", split="hard", seed=11)
    env.reset()
    family = env._tasks["agent_0"].task.family
    assert env.episode_stats("agent_0")[f"success/{family}"] == 0.0
    while env.agents:
        action = env.expert_action("agent_0")
        if not answer_right and '"answer"' in action:
            action = '{"answer": "Nowhere"}'
        *_, infos = env.step({"agent_0": action})
    assert infos["agent_0"]["termination_reason"] == ("success" if answer_right else "failure")
    stats = env.episode_stats("agent_0")
    assert stats[f"success/{family}"] == float(answer_right)
    assert [k for k in stats if k.startswith("success/")] == [f"success/{family}"]


def test_crashing_backend_ends_with_error(monkeypatch):
    def boom(world, args):
        raise RuntimeError("backend down")

    env, _ = _weather_env()
    monkeypatch.setitem(tools.BACKENDS, "get_weather", boom)
    _, rew, term, _, infos = env.step({"agent_0": env.expert_action("agent_0")})
    assert term["agent_0"] and infos["agent_0"]["termination_reason"] == "error"
    assert rew["agent_0"] == 0.0 and env.agents == []


def test_slow_backend_ends_with_timeout(monkeypatch):
    slow_original = tools.BACKENDS["get_weather"]

    def slow(world, args):
        time.sleep(0.05)
        return slow_original(world, args)

    env, _ = _weather_env()
    env.opts = type(env.opts)(split="basic", tool_timeout_s=0.01)
    monkeypatch.setitem(tools.BACKENDS, "get_weather", slow)
    _, _, term, _, infos = env.step({"agent_0": env.expert_action("agent_0")})
    assert term["agent_0"] and infos["agent_0"]["termination_reason"] == "timeout"


def test_hanging_backend_times_out_at_its_limit_and_the_next_call_works(monkeypatch):
    """A backend that never answers ends the caller's episode as `timeout` at the limit, not when it returns."""
    release = threading.Event()
    original = tools.BACKENDS["get_weather"]

    def hang(world, args):
        release.wait(60)  # a service that never answers (released at the end so the thread ends)
        return original(world, args)

    env, _ = _weather_env()
    env.opts = type(env.opts)(split="basic", tool_timeout_s=0.2)
    monkeypatch.setitem(tools.BACKENDS, "get_weather", hang)
    start = time.perf_counter()
    _, rew, term, _, infos = env.step({"agent_0": env.expert_action("agent_0")})
    waited = time.perf_counter() - start
    release.set()
    assert term["agent_0"] and infos["agent_0"]["termination_reason"] == "timeout" and rew["agent_0"] == 0.0
    assert 0.2 <= waited < 1.0, waited
    monkeypatch.setitem(tools.BACKENDS, "get_weather", original)
    env, _ = _weather_env()  # a fresh worker serves the next call
    _, _, term, _, infos = env.step({"agent_0": env.expert_action("agent_0")})
    assert not term["agent_0"]


def test_agents_finish_at_different_times():
    env = scenarios.make("tool_use", n_agents=3, split="hard")
    for seed in range(20):
        env.reset(seed=seed)
        finish_turn, turn = {}, 0
        while env.agents:
            turn += 1
            alive = list(env.agents)
            obs, rew, term, trunc, infos = env.step({a: env.expert_action(a) for a in alive})
            assert set(obs) == set(rew) == set(term) == set(trunc) == set(infos) == set(alive)
            for a in alive:
                if term[a] or trunc[a]:
                    finish_turn[a] = turn
                    assert a not in env.agents
        assert len(finish_turn) == 3
        if len(set(finish_turn.values())) > 1:
            return
    raise AssertionError("agents always finished together")


def test_agents_have_independent_tasks():
    env = scenarios.make("tool_use", n_agents=8, seed=3)
    obs, _ = env.reset()
    assert len({o["text"] for o in obs.values()}) > 1


def test_entity_vocabulary_constant_and_covers_expert_values():
    vocab = entity_vocabulary()
    assert 300 <= len(vocab) <= 600 and vocab == sorted(vocab)
    assert scenarios.make("tool_use", seed=1, split="hard").entity_vocabulary() == vocab
    assert scenarios.make("tool_use", seed=99).entity_vocabulary() == vocab
    vocab_set = set(vocab)
    for split in ToolUseEnv.splits:
        env = scenarios.make("tool_use", split=split)
        for seed in range(30):
            env.reset(seed=seed)
            while env.agents:
                action = json.loads(env.expert_action("agent_0"))
                values = [action["answer"]] if "answer" in action else list(action["args"].values())
                assert set(values) <= vocab_set
                env.step({"agent_0": env.expert_action("agent_0")})


def test_entities_never_inside_ordinary_words():
    # Template words (anything that is not itself an entity) must not contain an entity.
    env = scenarios.make("tool_use")
    long_entities = [e for e in KIND_OF if len(e) >= 3]
    words = set()
    for split in ToolUseEnv.splits:
        for seed in range(40):
            obs, _ = env.reset(seed=seed, options={"split": split})
            texts = [obs["agent_0"]["text"]]
            while env.agents:
                obs, *_ = env.step({"agent_0": env.expert_action("agent_0")})
                texts.append(obs["agent_0"]["text"])
            for t in texts:
                words |= {w for w in re.findall(r"[A-Za-z0-9]+", t) if w not in KIND_OF}
    for w in words:
        assert not any(e in w for e in long_entities), w


def test_only_replaced_backends_run_under_the_deadline(monkeypatch):
    """The built-in backends cannot block and run inline; a backend put in their place gets the time limit."""
    handed_off = []
    real = tools.call_with_deadline

    def counting(fn, timeout_s):
        handed_off.append(timeout_s)
        return real(fn, timeout_s)

    monkeypatch.setattr(tools, "call_with_deadline", counting)
    env, _ = _weather_env()
    _, _, term, _, _ = env.step({"agent_0": env.expert_action("agent_0")})
    assert not term["agent_0"] and handed_off == []
    original = tools.BACKENDS["get_weather"]
    monkeypatch.setitem(tools.BACKENDS, "get_weather", lambda world, args: original(world, args))
    env, _ = _weather_env()
    _, _, term, _, _ = env.step({"agent_0": env.expert_action("agent_0")})
    assert not term["agent_0"] and len(handed_off) == 1
