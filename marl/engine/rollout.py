"""Rollout: play many scenario episodes at once with one batched policy call per turn.

Every live (environment, agent) pair the policy plays is one row of a single `generate` call,
so a turn costs one batched forward whatever the number of environments and agents (N=1 is the
same code path). Each agent keeps its conversation as token ids: a turn's prompt is the previous
prompt + the generated action ids + the tokens of the new observation, so nothing is re-tokenized
and the learner sees exactly the ids the policy saw.

What comes out is plain, serializable data (`Turn`, `Episode`): token ids, logprobs, the allowed
token sets of constrained decoding, rewards and termination reasons. It leaves out advantages
(`advantages.py`), the batch's figures (`summary.py`) and anything about the learner.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from comms import CommsWrapper
from marl.engine.errors import EnvCrashError
from marl.engine.in_match import InMatchModels, in_match_models, own_class
from marl.engine.policy_map import PolicyMap, single
from marl.engine.records import (
    HARNESS_FAULTS,
    Episode,
    RolloutBatch,
    Turn,
    concat_batches,
    mark_harness_faults,
)

log = logging.getLogger(__name__)

__all__ = ["HARNESS_FAULTS", "SCRIPTED", "Part", "STYLE_PREFIX", "Episode", "RolloutBatch", "RolloutWorker", "Turn", "concat_batches",
           "expert_actor", "mark_harness_faults",
           "task_groups", "team_name", "turn_seed"]


def turn_seed(sample_seed: int | None, turn: int) -> int | None:
    """Independent sampling seed per (collection, turn): `base + turn` would reuse seeds across collections."""
    if sample_seed is None:
        return None
    return int(np.random.SeedSequence([sample_seed, turn]).generate_state(1)[0])


SCRIPTED = "scripted"
"""The policy id of an episode an `actor` played (no tokens: never in a loss)."""
STYLE_PREFIX = "style:"
"""A seat owner `style:<name>` is the scenario's scripted style `name`, played by `env.scripted_action`."""


def played_by_llm(pid: str) -> bool:
    """Whether an episode's policy id names a policy (not an `actor` or a scripted style)."""
    return pid != SCRIPTED and not pid.startswith(STYLE_PREFIX)


def task_groups(task_seeds: Sequence[int], group_size: int) -> tuple[list[int], list[int]]:
    """Each task seed repeated `group_size` times, and the group (task index) of each: `collect`'s seeds and groups."""
    seeds = [int(s) for s in task_seeds for _ in range(group_size)]
    return seeds, [k for k in range(len(task_seeds)) for _ in range(group_size)]


@dataclass
class Part:
    """A slice of one collection played in one go: its seeds, their groups, seats and env variants, and the
    part's own sampling seed (plain data: a part can be played in another process)."""

    seeds: list[int]
    groups: list[int]
    sample_seed: int | None
    seats: list[Mapping[str, str]] | None = None
    variants: list[str] | None = None


def expert_actor(env: Any, agent: str) -> str:
    """The scenario's scripted expert as an `actor` for `RolloutWorker.collect`."""
    return env.expert_action(agent)


class RolloutWorker:
    """Holds a pool of environments and plays batches of seeded episodes through a policy."""

    def __init__(self, make_env: Callable[[], Any], policy: Any, chat: Any, turn_cache: bool = True,
                 max_rows: int = 0, variants: Mapping[str, Callable[[], Any]] | None = None,
                 max_env_crashes: int | None = None) -> None:
        """`policy`: one policy for every agent, a `PolicyMap`, or None for scripted actors only.

        `turn_cache`: keep each agent's KV cache between turns of a collection, so a turn reads
        only its new observation (off: every turn re-reads the whole conversation).
        `max_rows`: the most agents (envs x agents) played at once; a larger collection plays its envs
        in consecutive parts, so the KV caches it holds do not grow with it (0: all at once).
        `variants`: further env factories by name (a curriculum's stages: other team sizes, splits,
        options), which `collect` can mix into one batch; `make_env` is the variant "".
        `max_env_crashes`: an environment that raises in `reset` or `step` is replaced by a fresh one (its
        live agents' episodes end as `error`, a harness fault); past this many crashes `EnvCrashError` stops
        the caller (None: no limit).
        """
        if max_rows < 0:
            raise ValueError(f"max_rows={max_rows} must be >= 0 (0: no bound)")
        self.make_env = make_env
        self.factories: dict[str, Callable[[], Any]] = {"": make_env, **(variants or {})}
        self.max_rows = max_rows
        self.turn_cache = turn_cache
        self.policy = policy
        self.policies = policy if policy is None or isinstance(policy, PolicyMap) else single(policy)
        self.chat = chat
        self._pools: dict[str, list[Any]] = {}
        self.max_env_crashes = max_env_crashes
        self.env_crashes = 0
        """Environments that raised in reset or step and were recreated, over the worker's life."""

    @property
    def envs(self) -> list[Any]:
        """Every environment the worker has built so far (for statistics that live in the envs)."""
        return [env for pool in self._pools.values() for env in pool]

    def message_stats(self) -> dict[str, float]:
        """Message counts of comms summed over this worker's environments (cumulative; empty without comms)."""
        totals: dict[str, float] = {}
        for env in self.envs:
            if isinstance(env, CommsWrapper):
                for k, v in env.stats().items():
                    totals[k] = totals.get(k, 0.0) + float(v)
        return totals

    def _recreate(self, env: Any, err: Exception, where: str) -> Any:
        """A fresh environment in the crashed one's place in its pool; the crash is counted and reported."""
        self.env_crashes += 1
        log.warning("environment crashed in %s: %s: %s; replaced by a fresh one (%d crash(es) so far)",
                    where, type(err).__name__, err, self.env_crashes)
        if self.max_env_crashes is not None and self.env_crashes > self.max_env_crashes:
            raise EnvCrashError(f"{self.env_crashes} environment crashes, more than the {self.max_env_crashes} "
                                f"tolerated (guards.max_env_crashes); the last: {type(err).__name__}: {err}") from err
        for key, pool in self._pools.items():
            for k, held in enumerate(pool):
                if held is env:
                    pool[k] = self.factories[key]()
                    return pool[k]
        raise ValueError("the crashed environment is not one of this worker's")

    def _envs(self, n: int, variants: Sequence[str] | None = None) -> list[Any]:
        """`n` environments, the k-th of variant `variants[k]` (default ""), each used once per call."""
        keys = list(variants) if variants is not None else [""] * n
        out, used = [], {}
        for key in keys:
            if key not in self.factories:
                raise KeyError(f"env variant {key!r} is unknown; known: {sorted(self.factories)}")
            pool = self._pools.setdefault(key, [])
            used[key] = used.get(key, 0) + 1
            while len(pool) < used[key]:
                pool.append(self.factories[key]())
            out.append(pool[used[key] - 1])
        return out

    def collect(
        self,
        seeds: Sequence[int],
        groups: Sequence[int] | None = None,
        greedy: bool = False,
        sample_seed: int | None = None,
        actor: Callable[[Any, str], str] | None = None,
        max_loops: int = 1000,
        record_state: bool = False,
        scripted: Callable[[Any, str], bool] | None = None,
        seats: Sequence[Mapping[str, str]] | None = None,
        variants: Sequence[str] | None = None,
        explore: float = 0.0,
    ) -> RolloutBatch:
        """Play one episode per seed (all agents of each) and return every turn and episode.

        `actor(env, agent) -> text` replaces the LLM (scripted expert, random baseline); its turns
        carry no token ids. By default it plays every agent; with `scripted(env, agent) -> bool` it
        plays only those agents and the policy the rest (a trained team against scripted opponents).
        `record_state` keeps the scenario's `state()` with every turn and at every agent's end (what a
        centralized critic reads). With `max_rows`, the envs are played in parts of at most that many
        agents (each part samples from its own seed), and the parts' records are concatenated.
        `seats` (one mapping per seed) names who plays an agent instead of the policy map's route: a
        policy id of the map (a frozen snapshot), or `style:<name>` for the scenario's scripted style
        (`env.scripted_action`); agents it leaves out follow the route, or the `actor` where there is one
        (an opponent pool's seating; the expert against a seated style).
        `variants` (one name per seed) plays a seed in that env variant (a curriculum stage), all in the same
        generate calls; each episode records its variant.
        `explore`: the share of LLM actions whose first real decision is drawn uniformly (`rl.explore`).
        """
        parts = self.plan(seeds, groups, sample_seed, seats, variants)
        batches = [self.play(part, greedy=greedy, actor=actor, max_loops=max_loops, record_state=record_state,
                             scripted=scripted, explore=explore) for part in parts]
        return batches[0] if len(batches) == 1 else concat_batches(batches)

    def plan(self, seeds: Sequence[int], groups: Sequence[int] | None = None, sample_seed: int | None = None,
             seats: Sequence[Mapping[str, str]] | None = None, variants: Sequence[str] | None = None,
             min_parts: int = 1) -> list[Part]:
        """The parts `collect` plays one after the other: at most `max_rows` agents each (all seeds in one
        part without a bound), split further into at least `min_parts` parts where there are seeds enough.
        Part `k` samples from its own seed, so a part plays the same wherever it is played (another process
        playing parts of one collection gives the episodes this worker would)."""
        for name, given in (("seats", seats), ("variants", variants)):
            if given is not None and len(given) != len(seeds):
                raise ValueError(f"{name} has {len(given)} entries for {len(seeds)} seeds: give one per seed")
        groups = list(groups) if groups is not None else list(range(len(seeds)))
        size = len(seeds)
        if self.max_rows and seeds:
            kinds = sorted(set(variants or [""]))
            widest = max(len(env.possible_agents) for env in self._envs(len(kinds), kinds))
            size = max(1, self.max_rows // max(widest, 1))
        size = max(1, min(size, -(-len(seeds) // max(min_parts, 1))))
        return [Part(seeds=[int(s) for s in seeds[start : start + size]], groups=groups[start : start + size],
                     sample_seed=None if sample_seed is None else sample_seed + 7919 * k,
                     seats=None if seats is None else list(seats[start : start + size]),
                     variants=None if variants is None else list(variants[start : start + size]))
                for k, start in enumerate(range(0, max(len(seeds), 1), size))]

    def play(self, part: Part, greedy: bool = False, actor: Callable[[Any, str], str] | None = None,
             max_loops: int = 1000, record_state: bool = False,
             scripted: Callable[[Any, str], bool] | None = None, explore: float = 0.0) -> RolloutBatch:
        """One planned part's envs played together (see `collect` for the arguments)."""
        return self._collect(part.seeds, part.groups, greedy, part.sample_seed, actor, max_loops, record_state,
                             scripted, part.seats, part.variants, explore)

    def _collect(self, seeds: Sequence[int], groups: Sequence[int], greedy: bool, sample_seed: int | None,
                 actor: Callable[[Any, str], str] | None, max_loops: int, record_state: bool,
                 scripted: Callable[[Any, str], bool] | None,
                 seats: Sequence[Mapping[str, str]] | None = None,
                 variants: Sequence[str] | None = None, explore: float = 0.0) -> RolloutBatch:
        """One part of `collect`: these seeds' envs played together."""
        if scripted is not None and (actor is None or self.policies is None):
            raise ValueError("`scripted` picks the agents an actor plays beside a policy: pass both")
        start = time.perf_counter()
        envs = self._envs(len(seeds), variants)
        episodes: list[Episode] = []
        turns: list[Turn] = []
        slot: dict[tuple[int, str], int] = {}
        context: dict[tuple[int, str], list[int]] = {}
        first: list[tuple[tuple[int, str], str]] = []  # the LLM agents' first observations, tokenized together
        for i, (env, seed) in enumerate(zip(envs, seeds, strict=True)):
            try:
                observations, _ = env.reset(seed=int(seed))
            except Exception as err:  # a second crash on the same seed is the scenario's bug, and propagates
                env = envs[i] = self._recreate(env, err, f"reset(seed={seed})")
                observations, _ = env.reset(seed=int(seed))
            for agent in env.agents:
                key = (i, agent)
                slot[key] = len(episodes)
                seated = seats[i].get(agent) if seats is not None else None
                # A seat is an explicit assignment, so it wins over an actor's blanket claim on every agent.
                by_actor = not seated and actor is not None and (scripted is None or scripted(env, agent))
                pid = SCRIPTED if by_actor else seated or self.policies.policy_of(env, agent)
                if seated and played_by_llm(seated) and seated not in self.policies.policies:
                    raise KeyError(f"seat {agent} goes to policy {seated!r}, which the policy map lacks; "
                                   f"known: {sorted(self.policies.policies)}")
                episodes.append(Episode(seed=int(seed), group=groups[i], agent=agent, policy=pid, env=i,
                                        team=team_name(env, agent), variant=variants[i] if variants else "",
                                        budget_visible=bool(env.turn_budget_visible)))
                text = observations[agent]["text"]
                episodes[slot[key]].transcript.append(("observation", text))
                if played_by_llm(pid):
                    first.append((key, text))
        if first:  # scripted-only workers have no chat format
            context.update(zip([k for k, _ in first], self.chat.first_many([t for _, t in first]), strict=True))
        kinds = [env.unwrapped.kind for env in envs]
        in_match = in_match_models(self.policies, envs) if envs else None
        crashed: set[int] = set()
        gen_s = env_s = 0.0
        tokens = steps = prompted = 0
        # KV caches live for this collection only: the weights may change before the next one
        turn_caches: dict[str, Any] | None = {} if self.turn_cache else None
        for loop in range(max_loops):
            # one read of each env's agents: a wrapped env forwards the attribute through every wrapper
            live = [(i, a) for i, env in enumerate(envs) if i not in crashed for a in env.agents]
            if not live:
                break
            t0 = time.perf_counter()
            llm = [k for k in live if played_by_llm(episodes[slot[k]].policy)]
            gen = None
            texts: dict[tuple[int, str], str] = {}
            if llm:
                grammars = [envs[i].action_grammar(a) if self.policies.constrained else None for i, a in llm]
                owners = [episodes[slot[k]].policy for k in llm]
                mix = None if in_match is None else functools.partial(_mix_rows, in_match, llm)
                gen = self.policies.generate([context[k] for k in llm], grammars, owners, greedy=greedy,
                                             seed=turn_seed(sample_seed, loop), keys=llm, turn_caches=turn_caches,
                                             hint_mix=mix, **({"explore": explore} if explore else {}))
                texts.update(zip(llm, gen.texts, strict=True))
                tokens += sum(len(ids) for ids in gen.token_ids)
                prompted += sum(len(context[k]) for k in llm)
            for i, a in live:
                if (i, a) not in texts:
                    pid = episodes[slot[(i, a)]].policy
                    texts[(i, a)] = actor(envs[i], a) if pid == SCRIPTED else \
                        envs[i].scripted_action(a, pid.removeprefix(STYLE_PREFIX))
            gen_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            per_env: dict[int, dict[str, str]] = {}
            follow: list[tuple[tuple[int, str], str]] = []  # next observations of LLM agents, tokenized together
            row_of = {key: row for row, key in enumerate(llm)}  # the generate call's row of each LLM agent
            for key in live:
                per_env.setdefault(key[0], {})[key[1]] = texts[key]
            for i, actions in per_env.items():
                state = envs[i].state() if record_state else None
                try:
                    obs, rewards, terms, truncs, infos = envs[i].step(actions)
                except Exception as err:  # the env is replaced; its live agents' episodes end as a harness fault
                    envs[i] = self._recreate(envs[i], err, f"step (seed {seeds[i]})")
                    crashed.add(i)
                    for agent in actions:
                        episodes[slot[(i, agent)]].reason = "error"
                    continue
                steps += 1
                for agent, text in actions.items():
                    key = (i, agent)
                    ep = episodes[slot[key]]
                    row = row_of.get(key)
                    info = infos.get(agent, {})
                    reward = float(rewards.get(agent, 0.0))
                    ep.ret += reward
                    ep.transcript.append(("action", text))
                    ep.turns.append(len(turns))
                    ep.opponent.append(opponent_labels(envs[i], agent))
                    by_llm = gen is not None and row is not None
                    hint = list(gen.hints[row]) if by_llm and gen.hints else []
                    if in_match is not None and by_llm:
                        in_match.observe(key, ep.opponent[-1], own_class(envs[i], agent, text))
                    if hint:  # the prediction the agent was shown is part of the prompt its action answers
                        context[key] = context[key] + hint
                    turns.append(Turn(
                        episode=slot[key],
                        prompt_ids=list(context[key]) if by_llm else [],
                        action_ids=list(gen.token_ids[row]) if by_llm else [],
                        logprobs=list(gen.logprobs[row]) if by_llm else [],
                        allowed=gen.allowed[row] if by_llm else None,
                        reward=reward,
                        invalid=bool(info.get("invalid_action", False)),
                        state=state,
                        opponent=ep.opponent[-1],
                        hint_len=len(hint),
                        prediction=in_match.take_shown(key) if in_match is not None else (),
                        explored=by_llm and bool(gen.explored) and gen.explored[row],
                    ))
                    done = terms.get(agent, False) or truncs.get(agent, False)
                    if done:
                        ep.reason = str(info.get("termination_reason", "max_turns" if truncs.get(agent) else "failure"))
                        final = obs.get(agent)
                        ep.final_observation = final["text"] if isinstance(final, dict) else None
                        if record_state:
                            ep.final_state = envs[i].state()
                        ep.stats = {k: float(v) for k, v in envs[i].episode_stats(agent).items()}
                        continue
                    text_obs = obs[agent]["text"]
                    ep.transcript.append(("observation", text_obs))
                    if by_llm:
                        context[key] = context[key] + list(gen.token_ids[row])
                        follow.append((key, text_obs))
            if follow:
                for (key, _), ids in zip(follow, self.chat.next_many([t for _, t in follow]), strict=True):
                    context[key] += ids
            env_s += time.perf_counter() - t0
        else:
            raise RuntimeError(f"rollout did not end within {max_loops} turns: the scenario's max_turns is not enforced")
        mark_harness_faults(episodes, kinds)
        reused = sum(c.reused_tokens for c in (turn_caches or {}).values())
        return RolloutBatch(turns=turns, episodes=episodes, generated_tokens=tokens, env_steps=steps,
                            seconds=time.perf_counter() - start, generate_seconds=gen_s, env_seconds=env_s,
                            reused_prompt_tokens=reused, prompt_tokens=prompted)


def _mix_rows(in_match: InMatchModels, keys: Sequence[Any], rows: Sequence[int], probs: Any) -> Any:
    """The policy's `hint_mix` for a generate call whose rows are `keys`."""
    return in_match.mix([keys[r] for r in rows], probs)


def opponent_labels(env: Any, agent: str) -> tuple[int, ...]:
    """`Turn.opponent` of `agent` after a step of `env`: each opponent slot's action class index, -1 for none."""
    slots = env.opponent_slots(agent)
    if not slots:
        return ()
    index = {c: k for k, c in enumerate(env.action_classes())}
    played = env.opponent_actions(agent)
    return tuple(index.get(played.get(slot), -1) for slot in slots)


def team_name(env: Any, agent: str) -> str:
    """The scenario's declared `team_of(agent)`: the agent's team, "" where the scenario has no teams."""
    return str(env.team_of(agent))
