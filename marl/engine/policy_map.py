"""Policy mapping: which model acts for which agent, and one batched generate call per model.

Modes (`--policy-mapping`):
- `shared` (default): one model for every agent; the agent's id (and role) is in its first
  observation, so one set of weights can still act differently per seat.
- `team`: one model per team: the scenario's `team_of(agent)` where it has teams (predator_prey),
  each agent its own team in competitive scenarios, one team in cooperative ones.
- `agent`: one model per agent id.

`PolicyMap` looks like a single policy to the rollout worker: `generate` takes every live row of a
turn, splits the rows by policy, makes one batched call per policy and puts the results back in
row order. Each policy keeps its own optimizer, reference and metrics (see `marl.run.train`). A
curriculum that grows the team under `agent` mapping adds the newcomers' policies
(`marl.run.curriculum`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from marl.config.choices import PolicyMapping, options
from policies.turn_cache import TurnCache

MAPPING_MODES = options(PolicyMapping)
SHARED = "shared"
SNAPSHOT_PREFIX = "snapshot:"  # owner ids of an opponent pool's frozen snapshots (`marl.engine.opponent_pool`)


def policy_id(mode: str, env: Any, agent: str, kind: str) -> str:
    """The policy that acts for `agent` of `env` (a scenario of `kind`) under mapping `mode`."""
    if mode == "shared":
        return SHARED
    if mode == "agent":
        return agent
    if mode == "team":
        team = env.team_of(agent)  # declared by every scenario: "" where it has no teams
        if team:
            return f"team_{team}"
        return agent if kind == "competitive" else "team"
    raise ValueError(f"policy mapping {mode!r} is unknown; choose one of {MAPPING_MODES}")


def policy_ids(mode: str, env: Any, kind: str) -> list[str]:
    """Every policy id the agents of a freshly reset `env` map to, in agent order, without repeats."""
    ids: list[str] = []
    for agent in env.possible_agents:
        pid = policy_id(mode, env, agent, kind)
        if pid not in ids:
            ids.append(pid)
    return ids


class PolicyMap:
    """Several policies behind the one-call `generate` interface of a single policy."""

    def __init__(self, policies: dict[str, Any], route: Callable[[Any, str], str]) -> None:
        if not policies:
            raise ValueError("a PolicyMap needs at least one policy")
        self.policies = policies
        self.route = route
        first = next(iter(policies.values()))
        self.constrained = getattr(first, "constrained", True)  # scripted policies follow the grammar
        self.tokenizer = getattr(first, "tokenizer", None)

    def __getitem__(self, pid: str) -> Any:
        return self.policies[pid]

    def policy_of(self, env: Any, agent: str) -> str:
        pid = self.route(env, agent)
        if pid not in self.policies:
            raise KeyError(f"agent {agent} maps to policy {pid!r}, which was never built; known: "
                           f"{sorted(self.policies)} (under `agent` mapping only a curriculum adds agents)")
        return pid

    def generate(self, prompts: Sequence[Sequence[int]], grammars: Sequence[Any], owners: Sequence[str],
                 keys: Sequence[Hashable] | None = None, turn_caches: dict[str, TurnCache] | None = None,
                 **kwargs: Any) -> Any:
        """One batched call per policy over its rows; results in the original row order.

        `keys` (one per row) with a `turn_caches` dict let each policy keep its rows' KV caches
        between turns (`policies/turn_cache.py`); the dict is filled per policy id on first use.
        """
        from policies.llm_policy import Generation

        n = len(prompts)
        token_ids: list[Any] = [None] * n
        logprobs: list[Any] = [None] * n
        texts: list[Any] = [None] * n
        allowed: list[Any] = [None] * n
        finished: list[Any] = [None] * n
        prompt_tokens: list[Any] = [0] * n
        hints: list[list[int]] = [[] for _ in range(n)]
        explored = [False] * n
        for k, (pid, policy) in enumerate(self.policies.items()):
            rows = [r for r in range(n) if owners[r] == pid]
            if not rows:
                continue
            call = dict(kwargs)
            if pid.startswith(SNAPSHOT_PREFIX):  # a frozen opponent plays as it is; exploring is the learners' part
                call.pop("explore", None)
            if call.get("seed") is not None and k:  # each policy its own sampling stream
                call["seed"] = int(np.random.SeedSequence([call["seed"], k]).generate_state(1)[0])
            if keys is not None and turn_caches is not None:
                call["turn_cache"] = turn_caches.setdefault(pid, TurnCache())
                call["keys"] = [keys[r] for r in rows]
            if call.get("hint_mix") is not None:  # the mixer names rows of the whole call
                call["hint_mix"] = functools.partial(_rows_of, call["hint_mix"], rows)
            gen = policy.generate([prompts[r] for r in rows], [grammars[r] for r in rows], **call)
            for k, r in enumerate(rows):
                token_ids[r], logprobs[r], texts[r] = gen.token_ids[k], gen.logprobs[k], gen.texts[k]
                allowed[r], finished[r] = gen.allowed[k], gen.finished[k]
                if gen.num_prompt_tokens:
                    prompt_tokens[r] = gen.num_prompt_tokens[k]
                if gen.hints:
                    hints[r] = gen.hints[k]
                if getattr(gen, "explored", None):
                    explored[r] = gen.explored[k]
        return Generation(token_ids, logprobs, texts, allowed, finished, prompt_tokens, hints, explored)


def _rows_of(hint_mix: Callable[..., Any], rows: Sequence[int], local: Sequence[int], probs: Any) -> Any:
    """`hint_mix` called with the whole call's row indices of one policy's `local` rows."""
    return hint_mix([rows[i] for i in local], probs)


def single(policy: Any) -> PolicyMap:
    """A map with one shared policy (what every caller with one model gets)."""
    return PolicyMap({SHARED: policy}, lambda env, agent: SHARED)
