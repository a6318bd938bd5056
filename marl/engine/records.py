"""The records a rollout produces: turns, agent-episodes and batches, plain serializable data.

`Turn` is one agent's action with the token ids, logprobs and allowed sets the learner needs;
`Episode` one agent's episode (its turns, return, ending, transcript, team and seat); `RolloutBatch`
one collection's turns and episodes with its timing. `concat_batches` joins collections made in
parts and `mark_harness_faults` spreads a harness fault to the teammates who share its outcome.
It leaves out playing episodes (`marl.engine.rollout`) and any figure computed from them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from scenarios.base import HARNESS_FAULTS  # endings that are never the agent's doing


@dataclass
class Turn:
    """One agent's action in one turn: what the learner trains on."""

    episode: int
    prompt_ids: list[int]
    action_ids: list[int]
    logprobs: list[float]
    allowed: list[list[int]] | None
    reward: float
    invalid: bool
    state: str | None = None
    """The scenario's global `state()` when the agent acted (recorded only for a centralized critic)."""
    opponent: tuple[int, ...] = ()
    """What each of the scenario's `opponent_slots(agent)` played in this step, as an index into its
    `action_classes()` (-1: no valid action): an opponent model's labels; empty without slots."""
    hint_len: int = 0
    """How many of `prompt_ids`' last ids are the opponent head's prediction shown to the agent (`aux+input`):
    the head read the hidden state before them."""
    prediction: tuple[int, ...] = ()
    """The class shown per opponent slot where an in-match model mixed it with the head's (`in_match.py`);
    empty otherwise (the head's own argmax is recomputed on replay)."""
    explored: bool = False
    """The action's first real decision was drawn uniformly among what its grammar allowed (`rl.explore`), not
    from the policy; its recorded log-probs are still the policy's own."""


@dataclass
class Episode:
    """One agent's episode; `group` indexes the task seed shared by a rollout group."""

    seed: int
    group: int
    agent: str
    turns: list[int] = field(default_factory=list)
    ret: float = 0.0
    reason: str = ""
    transcript: list[tuple[str, str]] = field(default_factory=list)
    policy: str = "shared"
    """Id of the policy that acted for this agent (see `marl.engine.policy_map`)."""
    final_observation: str | None = None
    """The observation the agent was left with after its last turn (a truncated episode's bootstrap)."""
    final_state: str | None = None
    """The global state after the agent's last turn (recorded with `record_state`)."""
    env: int = -1
    """Index of the environment within its collection: the agent-episodes of one team share it."""
    team: str = ""
    """The agent's team where the scenario has teams (its `team_of`), else empty."""
    stats: dict[str, float] = field(default_factory=dict)
    """The scenario's `episode_stats(agent)` when the agent's episode ended (empty where it measures none)."""
    budget_visible: bool = False
    """The agent was shown its turn budget (the scenario's `turn_budget_visible`): a `max_turns`
    ending is then an outcome of the task, valued 0 after it, not a cut to bootstrap."""
    opponent: list[tuple[int, ...]] = field(default_factory=list)
    """Per action (as in `transcript`), the opponent model's labels of that step (`Turn.opponent`)."""
    variant: str = ""
    """The env variant the episode was played in (a curriculum stage's name; "" for the worker's own)."""
    teammate_fault: bool = False
    """A teammate's episode ended in a harness fault, and this team shares one outcome (see
    `mark_harness_faults`)."""

    @property
    def harness_fault(self) -> bool:
        """Out of the loss and of every baseline: a harness fault (`timeout`, `error`) ended it, or a
        teammate's, where agents share one outcome (a cooperative team; a team of a mixed scenario)."""
        return self.reason in HARNESS_FAULTS or self.teammate_fault


@dataclass
class RolloutBatch:
    """Turns and episodes of one collection, plus timing for throughput metrics."""

    turns: list[Turn]
    episodes: list[Episode]
    generated_tokens: int
    env_steps: int
    seconds: float
    generate_seconds: float
    env_seconds: float
    reused_prompt_tokens: int = 0
    """Prompt tokens served from the turn cache instead of being read again."""
    prompt_tokens: int = 0
    """Prompt tokens of every generate call (the turn cache's share of them included)."""

    @property
    def processed_tokens(self) -> int:
        """Tokens the model read or wrote while generating: prompts not served from the turn cache, plus actions."""
        return self.prompt_tokens - self.reused_prompt_tokens + self.generated_tokens


def concat_batches(parts: Sequence[RolloutBatch]) -> RolloutBatch:
    """One batch of several collections' records, in order: turn, episode and env indices shifted so each
    part's stay its own (two parts' env 0 are different environments)."""
    turns: list[Turn] = []
    episodes: list[Episode] = []
    env_offset = 0
    for part in parts:
        t0, e0 = len(turns), len(episodes)
        turns.extend(replace(t, episode=t.episode + e0) for t in part.turns)
        episodes.extend(replace(ep, turns=[i + t0 for i in ep.turns], env=ep.env + env_offset if ep.env >= 0 else -1)
                        for ep in part.episodes)
        env_offset += 1 + max((ep.env for ep in part.episodes), default=-1)
    return RolloutBatch(turns, episodes, sum(p.generated_tokens for p in parts), sum(p.env_steps for p in parts),
                        sum(p.seconds for p in parts), sum(p.generate_seconds for p in parts),
                        sum(p.env_seconds for p in parts), sum(p.reused_prompt_tokens for p in parts),
                        sum(p.prompt_tokens for p in parts))


def mark_harness_faults(episodes: Sequence[Episode], kinds: Sequence[str]) -> None:
    """Set `harness_fault` on every episode a harness fault touched: its own, and where teammates share
    one outcome, every agent-episode of the team (the whole env in a cooperative scenario, the same
    team of a mixed one): what the team achieved was shaped by the fault, not by its play alone."""
    def fate(ep: Episode) -> tuple[int, str]:
        kind = kinds[ep.env]
        shared = kind == "cooperative" or (kind == "mixed" and ep.team)
        return (ep.env, ep.team if kind == "mixed" else "") if shared else (ep.env, f"agent:{ep.agent}")

    touched = {fate(ep) for ep in episodes if ep.reason in HARNESS_FAULTS}
    for ep in episodes:
        ep.teammate_fault = ep.reason not in HARNESS_FAULTS and fate(ep) in touched
