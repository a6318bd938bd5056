"""Helpers for the competitive scenario tests (repeated_game, bargaining): a plain module like scenario_helpers."""


import numpy as np

from scenarios.grammar import ActionGrammar

JUNK = [
    None, 3, "", "   ", "garbage", "null", "[]", "42", '"rock"', "[" * 300 + "]" * 300,
    "{" + "x" * 20_000 + "}", '{"move": "r\u00f6ck"}', '{"move": 1}', '{"move": ["rock"]}',
    '{"move": "rock", "msg": "hi"}', '{"offer": "11 11 11"}', '{"accept": "yes"}', '{"wait": null}',
    '{"reject": ""', "{}", '{"leave": ""}', '{"offer": 123}', '{"accept": "", "reject": ""}',
    {"move": "rock"}, ["rock"],
]


def sample_grammar(grammar: ActionGrammar, rng: np.random.Generator) -> str:
    """A random valid action without expanding the grammar (offer grammars are huge products)."""
    template = grammar.templates[int(rng.integers(len(grammar.templates)))]
    return "".join(p if isinstance(p, str) else p.values[int(rng.integers(len(p.values)))]
                   for p in template)


def mixed_action(env, agent: str, rng: np.random.Generator):
    """Expert, a random grammar action, or junk (any object): exercises every branch deterministically."""
    r = rng.random()
    if r < 0.4:
        return env.expert_action(agent)
    if r < 0.8:
        return sample_grammar(env.action_grammar(agent), rng)
    return JUNK[int(rng.integers(len(JUNK)))]


def play_expert(env, seed: int, options: dict | None = None) -> dict[str, dict]:
    """Run every agent with the expert until all finish; return each agent's final info."""
    env.reset(seed=seed, options=options)
    final = {}
    while env.agents:
        _, _, _, _, infos = env.step({a: env.expert_action(a) for a in env.agents})
        final.update({a: i for a, i in infos.items() if "termination_reason" in i})
    return final
