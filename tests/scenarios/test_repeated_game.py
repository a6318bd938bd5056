"""The repeated game: expert floors, grammar, malformed actions, options (styles: test_repeated_game_styles.py; the contract: test_contract.py)."""

import json
import re
import string

import numpy as np
import pytest
from competitive_helpers import JUNK, mixed_action, play_expert

import scenarios
from scenarios.repeated_game import HELDOUT_STYLES, STYLES, TRAIN_STYLES, RepeatedGameEnv, make_style
from scenarios.repeated_game.expert import expert_move
from scenarios.repeated_game.styles import (
    MOVES3,
    MOVES5,
    outcome,
)

# Measured over 200 evaluation seeds x 2 agents (scripted pairing): basic 0.98, hard 0.98, heldout 0.90.
FLOORS = {"basic": 0.9, "hard": 0.9, "heldout": 0.85}


def make(n=2, **options):
    return scenarios.make("repeated_game", n_agents=n, **options)


def test_thousand_random_episodes_never_raise():
    rng = np.random.default_rng(0)
    env_by = {(n, p): make(n, pairing=p, rounds=6, first_to=3) for n in (2, 3, 5, 8) for p in ("scripted", "self")}
    keys = sorted(env_by)
    for episode in range(1000):
        env = env_by[keys[episode % len(keys)]]
        split = RepeatedGameEnv.splits[episode % len(RepeatedGameEnv.splits)]
        obs, _ = env.reset(seed=episode, options={"split": split})
        while env.agents:
            obs, rew, term, trunc, infos = env.step({a: mixed_action(env, a, rng) for a in env.agents})
            for a, info in infos.items():
                assert info.get("termination_reason") != "error", obs[a]
                assert env.observation_space(a).contains(obs[a])
        assert env.state_space.contains(env.state())


def test_first_to_k_matches_end_at_different_times():
    env = make(5, split="hard")
    for seed in RepeatedGameEnv.eval_seeds("hard", 20):
        env.reset(seed=seed)
        shrank_with_others_left = False
        while env.agents:
            alive = list(env.agents)
            obs, rew, term, trunc, infos = env.step({a: env.expert_action(a) for a in alive})
            assert set(obs) == set(rew) == set(term) == set(trunc) == set(infos) == set(alive)
            done = [a for a in alive if term[a] or trunc[a]]
            assert not set(done) & set(env.agents)
            shrank_with_others_left |= bool(done) and bool(env.agents)
        if shrank_with_others_left:
            return
    raise AssertionError("first-to-K matches always ended together")


@pytest.mark.parametrize("split", ["basic", "hard", "heldout"])
def test_expert_beats_the_styles(split):
    env = make(2, split=split)
    wins = []
    for seed in RepeatedGameEnv.eval_seeds(split, 200):
        final = play_expert(env, seed)
        wins += [i["termination_reason"] == "success" for i in final.values()]
    assert len(wins) == 400
    assert np.mean(wins) >= FLOORS[split]


def test_grammar_actions_are_canonical_json():
    # That the expert's action is in the grammar and grammar actions are valid: test_contract.py.
    env = make(3, pairing="self")
    for split in RepeatedGameEnv.splits:
        env.reset(seed=0, options={"split": split})
        options = env.action_grammar("agent_0").expand()
        assert [json.loads(o)["move"] for o in options] == list(env._moves)
        assert all(o == json.dumps(json.loads(o)) for o in options)


@pytest.mark.parametrize("junk", range(len(JUNK)))
def test_malformed_action_forfeits_the_round(junk):
    env = make(2, seed=3)
    env.reset()
    action = JUNK[junk]
    obs, rew, term, trunc, infos = env.step({"agent_0": action, "agent_1": env.expert_action("agent_1")})
    assert obs["agent_0"]["text"].startswith("error: ") and "forfeited" in obs["agent_0"]["text"]
    info = infos["agent_0"]
    assert info["invalid_action"] is True
    assert info["reward_components"] == {"round": -1.0, "match": 0.0, "format": -1.0}
    assert not term["agent_0"] and not trunc["agent_0"] and env.agents == ["agent_0", "agent_1"]
    assert infos["agent_1"]["invalid_action"] is False


def test_missing_action_and_self_play_forfeits():
    env = make(2, seed=0, pairing="self")
    env.reset()
    _, _, _, _, infos = env.step({"agent_1": '{"move": "rock"}'})  # agent_0 sent nothing
    assert infos["agent_0"]["invalid_action"] and infos["agent_0"]["reward_components"]["round"] == -1.0
    assert infos["agent_1"]["reward_components"]["round"] == 1.0
    _, _, _, _, infos = env.step({"agent_0": "junk", "agent_1": "junk"})
    assert infos["agent_0"]["reward_components"]["round"] == infos["agent_1"]["reward_components"]["round"] == 0.0


def test_match_result_rewards_and_termination():
    env = make(2, seed=0, rounds=3, reward_weights={"round": 1.0, "match": 10.0, "format": 0.0})
    env.reset()
    total = dict.fromkeys(env.agents, 0.0)
    for _ in range(3):
        obs, rew, term, trunc, infos = env.step({a: env.expert_action(a) for a in env.agents})
        for a in rew:
            total[a] += rew[a]
    assert env.agents == []
    for a, info in infos.items():
        comps = info["reward_components"]
        assert term[a] and not trunc[a]
        assert info["termination_reason"] == ("success" if comps["match"] == 1.0 else "failure")
        assert "match over" in obs[a]["text"]
        wins, losses = map(int, re.search(r"score (\d+)-(\d+)", obs[a]["text"]).groups())
        assert comps["match"] == float(np.sign(wins - losses))


def test_self_pairing_is_zero_sum_and_odd_agent_plays_a_style():
    env = make(3, pairing="self", seed=5)
    _, infos = env.reset()
    assert [infos[a]["opponent"] for a in env.agents] == ["agent_1", "agent_0", "scripted"]
    assert infos["agent_0"]["opponent_style"] == "agent" and infos["agent_2"]["opponent_style"] in TRAIN_STYLES
    rng = np.random.default_rng(0)
    while env.agents:
        _, _, _, _, infos = env.step({a: mixed_action(env, a, rng) for a in env.agents})
        pair = [infos[a]["reward_components"] for a in ("agent_0", "agent_1")]
        assert pair[0]["round"] == -pair[1]["round"] and pair[0]["match"] == -pair[1]["match"]


def test_max_turns_truncates():
    env = make(2, seed=1, rounds=10, max_turns=4)
    env.reset()
    for _ in range(4):
        _, _, term, trunc, infos = env.step({a: env.expert_action(a) for a in env.agents})
    assert all(trunc.values()) and not any(term.values())
    assert {i["termination_reason"] for i in infos.values()} == {"max_turns"}


def test_styles_per_split_in_infos_and_state_not_in_observations():
    seen = {s: set() for s in RepeatedGameEnv.splits}
    for split in seen:
        env = make(8, split=split)
        for seed in range(8):
            obs, infos = env.reset(seed=seed)
            for a in env.agents:
                style = infos[a]["opponent_style"]
                seen[split].add(style)
                assert f"style={style}" in env.state()
            texts = [o["text"] for o in obs.values()]
            while env.agents:
                obs, _, _, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
                texts += [o["text"] for o in obs.values()]
                assert all(infos[a]["opponent_style"] in STYLES for a in infos)
            assert not any(name in t for name in STYLES for t in texts)
    assert seen["heldout"] == set(HELDOUT_STYLES)
    assert seen["train"] == seen["basic"] == seen["hard"] == set(TRAIN_STYLES)


def test_first_observation_says_who_and_what():
    obs, _ = make(2, seed=0).reset()
    text = obs["agent_1"]["text"]
    assert text.startswith("you are agent_1 vs a hidden opponent") and "rock paper scissors" in text
    assert len(text.split()) < 45
    obs, _ = make(2, seed=0, split="hard", pairing="self").reset()
    assert obs["agent_0"]["text"].startswith("you are agent_0 vs agent_1. first to 4")
    assert "lizard" in obs["agent_0"]["text"]


def test_options_and_registry():
    info = scenarios.info("repeated_game")
    assert (info.kind, info.agent_range, info.splits) == ("competitive", (2, 16), ("train", "basic", "heldout", "hard"))
    assert info.description and make().metadata["name"] == "repeated_game"
    for bad, match in [({"pairing": "team"}, "pairing"), ({"rounds": 0}, "rounds"),
                       ({"first_to": 0}, "first_to"), ({"hard_frac": 2}, "hard_frac"),
                       ({"split": "easy"}, "split"), ({"reward_weights": {"task": 1}}, "valid keys"),
                       ({"styles": ["nope"]}, "styles"), ({"styles": []}, "styles"),
                       ({"history": 21}, "history"), ({"history": -1}, "history"), ({"history": True}, "history")]:
        with pytest.raises(ValueError, match=match):
            make(**bad)
    with pytest.raises(ValueError, match="n_agents"):
        make(1)


def test_entities_cover_moves_and_stay_whole():
    env = make(2)
    vocab = env.entity_vocabulary()
    assert vocab == sorted(vocab) and set(MOVES5) <= set(vocab) and "agent_7" in vocab
    words = set()
    for split in RepeatedGameEnv.splits:
        for seed in range(10):
            obs, _ = env.reset(seed=seed, options={"split": split})
            texts = [o["text"] for o in obs.values()]
            while env.agents:
                actions = {a: env.expert_action(a) for a in env.agents}
                assert all(json.loads(v)["move"] in vocab for v in actions.values())
                obs, *_ = env.step(actions)
                texts += [o["text"] for o in obs.values()]
            for t in texts:
                assert set(t) <= set(string.printable)
                words |= {w for w in re.findall(r"[A-Za-z]+", t) if w not in vocab}
    long_entities = [e for e in vocab if len(e) >= 3 and not e.startswith("agent_")]
    for w in words:
        assert not any(e in w for e in long_entities), w


def test_a_style_plays_an_agent_seat_in_self_pairing():
    env = scenarios.make("repeated_game", n_agents=2, pairing="self", split="basic")
    env.reset(seed=3)
    style = make_style("cycle", np.random.default_rng(0))
    played = []
    while env.agents:
        actions = {"agent_0": env.expert_action("agent_0")}
        if "agent_1" in env.agents:
            actions["agent_1"] = env.style_action("agent_1", style)
            played.append(json.loads(actions["agent_1"])["move"])
            assert actions["agent_1"] in env.action_grammar("agent_1")
        _, _, _, _, infos = env.step(actions)
        assert not infos.get("agent_1", {}).get("invalid_action", False)
    assert len(set(played)) == 3  # the cycle style really played the seat


def test_the_styles_option_picks_the_opponents_and_stats_give_the_win_rate_per_style():
    for name in ("uniform", "copy_lag2"):
        env = make(2, styles=[name])
        for seed in range(3):
            _, infos = env.reset(seed=seed)
            assert all(info["opponent_style"] == name for info in infos.values())
            stats = {}
            while env.agents:
                assert all("match_won/" not in k for a in env.agents for k in env.episode_stats(a))
                actions = {a: env.expert_action(a) for a in env.agents}
                ended = list(env.agents)
                env.step(actions)
                stats.update({a: env.episode_stats(a) for a in ended if a not in env.agents})
            for agent, figures in stats.items():
                won = figures["rounds_won"] > figures["rounds_lost"]
                assert figures == {**figures, f"match_won/{name}": float(won)}, agent


def test_the_uniform_probe_is_in_neither_set_and_has_no_edge():
    from scenarios.repeated_game.styles import PROBE_STYLES

    assert PROBE_STYLES == ("uniform",) and not set(PROBE_STYLES) & {*TRAIN_STYLES, *HELDOUT_STYLES}
    style = make_style("uniform", np.random.default_rng(0))
    played = [style.act([]) for _ in range(3000)]
    assert {m: played.count(m) for m in MOVES3} == pytest.approx(dict.fromkeys(MOVES3, 1000), rel=0.1)
    # the expert, whose predictions all fail, neither wins nor loses much against it on average
    results = []
    for seed in range(200):
        style, history = make_style("uniform", np.random.default_rng(seed)), []
        for _ in range(10):
            mine, theirs = expert_move(history, MOVES3, "rock"), style.act([])
            results.append(outcome(mine, theirs, MOVES3))
            history.append((mine, theirs))
    assert abs(np.mean(results)) < 0.05


def test_the_history_option_lists_both_sides_recent_moves_oldest_first():
    plain, listed = make(2, history=0), make(2, history=3)
    for env in (plain, listed):
        env.reset(seed=5)
    moves = ["rock", "paper", "scissors", "paper", "rock"]
    for k, move in enumerate(moves):
        action = json.dumps({"move": move})
        obs_plain = plain.step({a: action for a in plain.agents})[0]
        obs = listed.step({a: action for a in listed.agents})[0]
        history = listed._sides["agent_0"].history
        assert history[-1][0] == move and "recent" not in obs_plain["agent_0"]["text"]
        text = obs["agent_0"]["text"]
        assert text.startswith(obs_plain["agent_0"]["text"])
        shown = history[-3:]
        assert text.endswith(f"recent opp: {' '.join(b for _, b in shown)}; you: {' '.join(a for a, _ in shown)}")
        assert len(shown) == min(k + 1, 3)
    # A forfeited round enters neither side's history, so it is not listed either.
    before = listed._sides["agent_0"].history[-3:]
    text = listed.step({a: "junk" for a in listed.agents})[0]["agent_0"]["text"]
    assert text.startswith("error:") and text.endswith(f"you: {' '.join(a for a, _ in before)}")
