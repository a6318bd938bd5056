"""The predator-prey scenario: teams, catching, rewards, expert (the contract: test_contract.py)."""

import re

import numpy as np
import pytest
from grid_helpers import JUNK, canonical, random_episodes
from scenario_helpers import play_expert

import scenarios
from scenarios.grid import PredatorPreyEnv

COUNTS = [2, 4, 6, 8]


def _env(n: int = 4, **options) -> PredatorPreyEnv:
    return scenarios.make("predator_prey", n_agents=n, **options)


def _place(env: PredatorPreyEnv, cells: dict[str, str]) -> None:
    for agent, token in cells.items():
        env.pos[agent] = int(token[1]) * env.board.size + int(token[2])


def test_thousand_random_episodes_never_raise():
    reasons = random_episodes(lambda n: _env(n, max_turns=6), COUNTS, 1000)
    assert reasons["success"] > 0 and reasons["failure"] > 0 and reasons["max_turns"] > 0
    assert set(reasons) <= {"success", "failure", "max_turns"}


@pytest.mark.parametrize("split, floor", [("basic", 0.95), ("hard", 0.8)])
def test_predator_expert_beats_prey_expert(split, floor):
    # Stated floors: basic 95%, hard 80% of seeds; measured basic 100% (n = 2..16), hard 88-100%.
    for n in (2, 4, 16):
        env = _env(n, split=split)
        seeds = PredatorPreyEnv.eval_seeds(split, 200)
        wins = sum(play_expert(env, s)["agent_0"] == "success" for s in seeds)
        assert wins / len(seeds) >= floor, (n, wins)


def test_agents_finish_at_different_times():
    env = _env(8, split="basic")
    for seed in range(20):
        env.reset(seed=seed)
        finish = {}
        while env.agents:
            live = list(env.agents)
            _, _, term, trunc, infos = env.step({a: env.expert_action(a) for a in live})
            for a in live:
                if term[a] or trunc[a]:
                    finish[a] = env._turns[a]
                    assert a not in env.agents
                    if env.team_of(a) == "prey" and term[a]:
                        assert infos[a]["termination_reason"] == "failure"
                        assert infos[a]["reward_components"]["outcome"] == -1.0
        assert len(finish) == 8
        if len(set(finish.values())) > 1:
            return
    raise AssertionError("agents always finished together")


def test_teams_and_first_observation():
    env = _env(6, split="hard", seed=1)
    obs, _ = env.reset()
    assert [env.team_of(a) for a in env.possible_agents] == ["predator"] * 3 + ["prey"] * 3
    for agent, o in obs.items():
        team = env.team_of(agent)
        assert o["text"].startswith(f"you are {agent}, {team}; team ")
        assert len(o["text"].split()) < 60
    with pytest.raises(ValueError, match="unknown agent"):
        env.team_of("agent_9")
    dist = env.board.dist
    assert all(dist[env.pos[p], env.pos[q]] >= 3 for p in env.predators for q in env.prey)


def test_catch_rule_credit_and_team_rewards():
    env = _env(4, split="basic", seed=0, individual_weight=0.5)
    env.reset()
    # agent_0 steps next to agent_2; agent_1 stays far from agent_3 (5x5 board).
    _place(env, {"agent_0": "c00", "agent_1": "c44", "agent_2": "c02", "agent_3": "c40"})
    obs, rew, term, _, infos = env.step({"agent_0": canonical("right"), "agent_1": canonical("stay"),
                                         "agent_2": canonical("stay"), "agent_3": canonical("stay")})
    assert term["agent_2"] and infos["agent_2"]["termination_reason"] == "failure"
    assert env.agents == ["agent_0", "agent_1", "agent_3"] and env.caught == {"agent_2": 1}
    c0, c1 = infos["agent_0"]["reward_components"], infos["agent_1"]["reward_components"]
    assert c0["team"] == c1["team"] == pytest.approx(0.5 * 1 / 2)  # one of two prey, mixed 50/50
    assert c0["individual"] == pytest.approx(0.5) and c1["individual"] == 0.0
    assert "caught: agent_2" in obs["agent_3"]["text"] and obs["agent_2"]["text"].startswith("caught at c02")
    assert infos["agent_3"]["reward_components"]["team"] == pytest.approx(0.5 * (1 / 2) / 20)
    # Two predators reaching the last prey share the credit; the predators succeed together.
    _place(env, {"agent_0": "c30", "agent_1": "c41"})
    _, _, term, _, infos = env.step(dict.fromkeys(env.agents, canonical("stay")))
    assert term == {"agent_0": True, "agent_1": True, "agent_3": True} and env.agents == []
    assert infos["agent_0"]["termination_reason"] == infos["agent_1"]["termination_reason"] == "success"
    assert infos["agent_0"]["reward_components"]["individual"] == pytest.approx(0.25)
    assert infos["agent_0"]["reward_components"]["outcome"] == 1.0


def test_swap_catches_and_walls_block_reach():
    env = _env(2, split="basic", seed=0)
    env.reset()
    _place(env, {"agent_0": "c11", "agent_1": "c12"})
    _, _, term, *_ = env.step({"agent_0": canonical("right"), "agent_1": canonical("left")})
    assert term["agent_1"]
    env = _env(2, split="hard", seed=0)
    env.reset()
    b = env.board
    # Two cells on either side of a wall are two apart on the grid but not within reach.
    r, c = next(divmod(w, b.size) for w in sorted(b.walls)
                if 0 < w % b.size < b.size - 1 and not {w - 1, w + 1} & b.walls)
    env.pos["agent_0"], env.pos["agent_1"] = r * b.size + c - 1, r * b.size + c + 1
    assert b.dist[env.pos["agent_0"], env.pos["agent_1"]] > 2
    _, _, term, *_ = env.step(dict.fromkeys(env.agents, canonical("stay")))
    assert not term["agent_1"]


def test_surviving_prey_win_at_max_turns():
    env = _env(2, split="hard", seed=0, max_turns=3)
    env.reset()
    for _ in range(3):
        _, rew, term, trunc, infos = env.step(dict.fromkeys(env.agents, canonical("stay")))
    assert trunc == {"agent_0": True, "agent_1": True} and not any(term.values())
    assert infos["agent_1"]["reward_components"]["outcome"] == 1.0
    assert infos["agent_0"]["reward_components"]["outcome"] == 0.0


def test_teammates_bump_but_teams_do_not_block():
    env = _env(4, split="basic", seed=0)
    env.reset()
    _place(env, {"agent_0": "c00", "agent_1": "c02", "agent_2": "c40", "agent_3": "c44"})
    _, _, _, _, infos = env.step({"agent_0": canonical("right"), "agent_1": canonical("left"),
                                  "agent_2": canonical("stay"), "agent_3": canonical("stay")})
    assert infos["agent_0"]["reward_components"]["collision"] == -1.0
    assert infos["agent_1"]["reward_components"]["collision"] == -1.0


@pytest.mark.parametrize("action", JUNK)
def test_malformed_action_is_an_error_observation(action):
    env = _env(2, split="basic", seed=4)
    env.reset()
    obs, _, term, trunc, infos = env.step({"agent_0": action, "agent_1": canonical("stay")})
    assert obs["agent_0"]["text"].startswith("error: ")
    assert infos["agent_0"]["invalid_action"] is True
    assert infos["agent_0"]["reward_components"]["format"] == -1.0
    assert not trunc["agent_0"]


def test_individual_weight_mixes_team_and_individual():
    for w in (0.0, 1.0):
        env = _env(2, split="basic", seed=0, individual_weight=w)
        env.reset()
        _, _, _, _, infos = env.step(dict.fromkeys(env.agents, canonical("stay")))
        comps = infos["agent_1"]["reward_components"]
        assert (comps["team"] == 0.0) == (w == 1.0) and (comps["individual"] == 0.0) == (w == 0.0)


def test_state_entities_and_options():
    env = _env(8, split="hard", seed=6)
    env.reset()
    state = env.state()
    assert "caught=none" in state and state.count("team=prey") == 4 and env.state_space.contains(state)
    vocab = env.entity_vocabulary()
    assert vocab == sorted(vocab) and {"predator", "prey", "c77", "agent_7"} <= set(vocab)
    rng = np.random.default_rng(0)
    words: set[str] = set()
    for seed in range(15):
        obs, _ = env.reset(seed=seed)
        while True:
            for o in obs.values():
                words |= set(re.findall(r"[A-Za-z0-9_]+", o["text"]))
            if not env.agents:
                break
            obs, *_ = env.step({a: env.expert_action(a) if rng.random() < 0.8 else "x" for a in env.agents})
    long_entities = [e for e in vocab if len(e) >= 3]
    for w in words - set(vocab):
        assert not any(e in w for e in long_entities), w
    info = scenarios.info("predator_prey")
    assert (info.kind, info.agent_range) == ("mixed", (2, 16))
    with pytest.raises(ValueError, match="even n_agents"):
        _env(3)
    with pytest.raises(ValueError, match="n_agents"):
        _env(18)
    with pytest.raises(ValueError, match="individual_weight"):
        _env(individual_weight=2)
