"""Bargaining: turn protocol, deals, leaving, expert floors, grammar (the contract: test_contract.py)."""

import json
import re
import string

import numpy as np
import pytest
from competitive_helpers import JUNK, mixed_action, play_expert, sample_grammar
from scenario_helpers import news

import scenarios
from scenarios.bargaining import BargainingEnv
from scenarios.bargaining.deals import ITEMS, compositions, offer_text, parse_offer

COUNTS = [2, 3, 5, 8]
# Measured over 200 evaluation seeds (all agents scripted): deal rate basic 1.0 at 2-8 agents;
# hard 1.0 / 0.99 / 0.97 / 0.74 at 2 / 3 / 5 / 8; mean normalized value about 0.67 / 0.46 / 0.29 / 0.19.
DEAL_FLOORS = {("basic", 2): 0.95, ("basic", 3): 0.95, ("basic", 5): 0.95, ("basic", 8): 0.95,
               ("hard", 2): 0.95, ("hard", 3): 0.9, ("hard", 5): 0.85, ("hard", 8): 0.6}
VALUE_FLOORS = {2: 0.6, 3: 0.4, 5: 0.25, 8: 0.13}


def make(n=2, **options):
    return scenarios.make("bargaining", n_agents=n, **options)


def test_thousand_random_episodes_never_raise():
    rng = np.random.default_rng(0)
    envs = {n: make(n, max_turns=8) for n in (2, 3, 5, 8)}
    for episode in range(1000):
        env = envs[(2, 3, 5, 8)[episode % 4]]
        obs, _ = env.reset(seed=episode, options={"split": BargainingEnv.splits[episode % 3]})
        while env.agents:
            obs, rew, term, trunc, infos = env.step({a: mixed_action(env, a, rng) for a in env.agents})
            for a, info in infos.items():
                assert info.get("termination_reason") != "error", obs[a]
                assert env.observation_space(a).contains(obs[a])
                assert 0.0 <= info["reward_components"]["value"] <= 1.0
        assert env.state_space.contains(env.state())


def test_leaving_agents_finish_while_others_bargain():
    env = make(4, split="hard", seed=2)
    env.reset()
    obs, rew, term, trunc, infos = env.step({a: '{"leave": ""}' if a == "agent_1" else env.expert_action(a)
                                             for a in env.agents})
    assert term["agent_1"] and infos["agent_1"]["termination_reason"] == "failure"
    assert env.agents == ["agent_0", "agent_2", "agent_3"]
    pool = env.pool
    assert infos["agent_1"]["reward_components"]["value"] == pool.outside[1] / pool.max_worth(1) > 0
    assert rew["agent_1"] == pytest.approx(pool.outside[1] / pool.max_worth(1))
    assert all("agent_1 left." in obs[a]["text"] for a in env.agents)
    # Offers now give the leaver nothing; the rest still reach a deal.
    final = {}
    while env.agents:
        grammar = {a: env.action_grammar(a) for a in env.agents}
        for g in grammar.values():
            for t in g.templates:
                for p in t:
                    if not isinstance(p, str):
                        assert all(v[1] == "0" for v in p.values)
        _, _, _, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
        final.update({a: i for a, i in infos.items() if "termination_reason" in i})
    assert {a: i["termination_reason"] for a, i in final.items()} == dict.fromkeys(
        ["agent_0", "agent_2", "agent_3"], "success")


def test_last_agent_standing_ends_with_outside_option():
    env = make(2, split="hard", seed=3)
    env.reset()
    _, _, term, _, infos = env.step({"agent_0": '{"leave": ""}', "agent_1": env.expert_action("agent_1")})
    assert all(term.values()) and env.agents == []
    assert infos["agent_1"]["termination_reason"] == "failure"
    assert infos["agent_1"]["reward_components"]["value"] > 0


@pytest.mark.parametrize("split", ["basic", "hard"])
@pytest.mark.parametrize("n", COUNTS)
def test_expert_deal_rate_and_value(split, n):
    env = make(n, split=split)
    deals, values = [], []
    for seed in BargainingEnv.eval_seeds(split, 200 if n <= 3 else 60):
        for info in play_expert(env, seed).values():
            deals.append(info["reward_components"]["deal"])
            values.append(info["reward_components"]["value"])
    assert np.mean(deals) >= DEAL_FLOORS[(split, n)]
    if split == "basic":
        assert np.mean(values) >= VALUE_FLOORS[n]


def test_deal_rewards_are_normalized_values():
    env = make(2, split="basic", seed=11, reward_weights={"deal": 0.5})
    obs, _ = env.reset()
    final = {}
    while env.agents:
        obs, rew, term, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
        final.update({a: (rew[a], infos[a]) for a in infos if term[a]})
    pool = env.pool
    alloc_text = re.search(r"deal on ([\d ]+):", obs["agent_0"]["text"]).group(1)
    alloc, _ = parse_offer(alloc_text, pool, (True, True))
    for i, a in enumerate(env.possible_agents):
        reward, info = final[a]
        value = pool.worth(i, alloc) / pool.max_worth(i)
        assert info["termination_reason"] == "success"
        assert info["reward_components"] == {"value": pytest.approx(value), "deal": 1.0, "format": 0.0}
        assert reward == pytest.approx(value + 0.5)


def test_turn_protocol_two_agents():
    env = make(2, split="basic", seed=0)
    obs, _ = env.reset()
    proposer = env._proposer
    p, q = f"agent_{proposer}", f"agent_{1 - proposer}"
    assert news(obs[p]).endswith("now: offer") and news(obs[q]).endswith("now: wait")
    keep_all = offer_text(tuple(tuple(c if i == proposer else 0 for i in range(2)) for c in env.pool.counts))
    obs, _, _, _, infos = env.step({p: json.dumps({"offer": keep_all}), q: '{"wait": ""}'})
    assert not any(i["invalid_action"] for i in infos.values())
    assert obs[q]["text"].startswith(f"{p} offers {keep_all}: you get") and news(obs[q]).endswith("offer or accept")
    assert news(obs[p]) == f"you offer {keep_all}. now: wait"
    # The responder counters (a rejection); then the first proposer accepts the counter: a deal.
    give_all = offer_text(tuple(tuple(c if i != proposer else 0 for i in range(2)) for c in env.pool.counts))
    obs, *_ = env.step({p: '{"wait": ""}', q: json.dumps({"offer": give_all})})
    assert obs[p]["text"].startswith(f"rejected by {q}. {q} offers {give_all}")
    obs, rew, term, _, infos = env.step({p: '{"accept": ""}', q: '{"wait": ""}'})
    assert all(term.values()) and env.agents == []
    assert infos[q]["reward_components"]["value"] == 1.0 and infos[p]["reward_components"]["value"] == 0.0


def test_no_deal_truncates_with_zero_value():
    env = make(3, split="basic", seed=1, max_turns=5)
    env.reset()
    for _ in range(5):
        _, rew, term, trunc, infos = env.step(dict.fromkeys(env.agents, "junk"))
    assert all(trunc.values()) and not any(term.values()) and env.agents == []
    assert all(i["termination_reason"] == "max_turns" and i["reward_components"]["value"] == 0.0
               for i in infos.values())


@pytest.mark.parametrize("junk", range(len(JUNK)))
def test_malformed_action_is_an_error_observation(junk):
    env = make(3, split="basic", seed=5)
    env.reset()
    agent = f"agent_{env._proposer}"
    actions = {a: env.expert_action(a) for a in env.agents}
    actions[agent] = JUNK[junk]
    obs, rew, term, trunc, infos = env.step(actions)
    assert obs[agent]["text"].startswith("error: ")
    assert infos[agent]["invalid_action"] is True and infos[agent]["reward_components"]["format"] == -1.0
    assert rew[agent] == pytest.approx(-0.1)
    assert not any(term.values()) and not any(trunc.values()) and len(env.agents) == 3


@pytest.mark.parametrize("bad", ["21 01", "21 01 1x", "211 01 11", "99 01 11", "", " 21 01 11"])
def test_bad_offers_say_what_is_valid(bad):
    env = make(2, split="basic", seed=0)
    env.reset()
    p = f"agent_{env._proposer}"
    obs, _, _, _, infos = env.step({p: json.dumps({"offer": bad})})
    assert infos[p]["invalid_action"] and obs[p]["text"].startswith("error: ")
    assert "groups of 2 digits" in obs[p]["text"] or "add up to" in obs[p]["text"]


def test_out_of_role_actions_are_invalid():
    env = make(3, split="basic", seed=0)
    env.reset()
    waiter = next(a for a in env.agents if a != f"agent_{env._proposer}")
    obs, _, _, _, infos = env.step({waiter: '{"accept": ""}'})
    assert infos[waiter]["invalid_action"] and "you may not accept now" in obs[waiter]["text"]
    env.reset(seed=0)
    obs, _, _, _, infos = env.step({waiter: '{"leave": ""}'})  # no leaving outside the hard split
    assert infos[waiter]["invalid_action"] and waiter in env.agents


def test_grammar_actions_are_canonical_json():
    # That the expert's action is in the grammar and grammar actions are valid: test_contract.py.
    rng = np.random.default_rng(2)
    for n in (2, 3, 5):
        env = make(n, max_turns=10)
        for seed in range(4):
            env.reset(seed=seed, options={"split": BargainingEnv.splits[seed % 3]})
            while env.agents:
                for a in env.agents:
                    for _ in range(3):
                        action = sample_grammar(env.action_grammar(a), rng)
                        assert action == json.dumps(json.loads(action))
                env.step({a: mixed_action(env, a, rng) for a in env.agents})


def test_compositions_are_exactly_the_valid_groups():
    assert compositions(2, (True, True, True)) == ("200", "110", "101", "020", "011", "002")
    assert compositions(2, (True, False, True)) == ("200", "101", "002")
    assert len(compositions(5, (True,) * 8)) == 792


def test_first_observation_private_values_and_short():
    env = make(3, split="hard", seed=9)
    obs, _ = env.reset()
    pool = env.pool
    for i, a in enumerate(env.agents):
        text = obs[a]["text"]
        assert text.startswith(f"you are {a} of 3. pool: ")
        mine = " ".join(f"{item} {v}" for item, v in zip(pool.items, pool.values[i], strict=True))
        assert f"your values: {mine}" in text and f"leave gets {pool.outside[i]}" in text
        assert len(re.findall(r"[A-Za-z_]+|\d", text)) < 60
    assert len({o["text"].split("your values")[1] for o in obs.values()}) > 1


def test_options_and_registry():
    info = scenarios.info("bargaining")
    assert (info.kind, info.agent_range, info.splits) == ("competitive", (2, 8), ("train", "basic", "hard"))
    assert info.description and make().metadata["name"] == "bargaining"
    for bad, match in [({"hard_frac": -0.1}, "hard_frac"), ({"split": "easy"}, "split"),
                       ({"reward_weights": {"task": 1}}, "valid keys"), ({"max_turns": 0}, "max_turns")]:
        with pytest.raises(ValueError, match=match):
            make(**bad)
    with pytest.raises(ValueError, match="n_agents"):
        make(9)


def test_splits_differ():
    env = make(2)
    env.reset(seed=0, options={"split": "hard"})
    assert len(env.pool.items) == 4 and all(o > 0 for o in env.pool.outside)
    env.reset(seed=0, options={"split": "basic"})
    assert len(env.pool.items) == 3 and env.pool.outside == (0, 0)


def test_entities_cover_actions_and_stay_whole():
    env = make(3)
    vocab = env.entity_vocabulary()
    assert vocab == sorted(vocab) and set(ITEMS) <= set(vocab) and "agent_7" in vocab
    words = set()
    for split in BargainingEnv.splits:
        for seed in range(10):
            obs, _ = env.reset(seed=seed, options={"split": split})
            texts = [o["text"] for o in obs.values()]
            while env.agents:
                actions = {a: env.expert_action(a) for a in env.agents}
                for act in actions.values():
                    offer = json.loads(act).get("offer", "")
                    assert set(offer.replace(" ", "")) <= set(vocab)
                obs, *_ = env.step(actions)
                texts += [o["text"] for o in obs.values()]
            for t in texts:
                assert set(t) <= set(string.printable)
                words |= {w for w in re.findall(r"[A-Za-z]+", t) if w not in vocab}
    long_entities = [e for e in vocab if len(e) >= 3 and not e.startswith("agent_")]
    for w in words:
        assert not any(e in w for e in long_entities), w
