"""Helpers shared by the scenario tests (a plain module: tests/ has no packages, so conftest cannot be imported)."""

from scenarios.base import split_turn_budget


def play_expert(env, seed: int) -> dict[str, str]:
    """Run every agent with the expert until all finish; return each agent's termination reason."""
    env.reset(seed=seed)
    reasons = {}
    while env.agents:
        actions = {a: env.expert_action(a) for a in env.agents}
        _, _, _, _, infos = env.step(actions)
        for a, info in infos.items():
            if "termination_reason" in info:
                reasons[a] = info["termination_reason"]
    return reasons


def news(observation: dict[str, str]) -> str:
    """An observation's text without the ``turn k of K`` line that scenarios showing their budget end it with."""
    return split_turn_budget(observation["text"])[0]
