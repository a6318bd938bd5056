"""Critics of `mappo` and `ippo`: what a value function reads, its values for GAE, and its loss.

- Centralized (`mappo`): before each of an agent's turns the critic reads the scenario's global
  `state()` at that moment plus the agent's id. Every agent that acts on one state shares one
  sequence: the state text, then `agent <id>` per reader (sorted), and each agent's value is read at
  the end of its own id. One forward per env step instead of one per agent (the per-agent way made
  the critic the slowest part of an iteration). Any number of agents fits (the state is text, never a fixed-order concatenation of
  per-agent vectors). The readers of a state are taken from the whole batch, so a minibatch reads
  the same sequence the advantages were computed from.
- Agent-specific (`mappo` with a `state_view`, see `STATE_VIEWS`): the state rewritten per reader
  (its own line last, or only the team's lines and its own), or the agent's own conversation with
  that view inserted before each turn. One sequence per reader then (a view is one agent's).
- Both (`mappo` with `state_view="own_and_state"`): two trunks whose values add, one reading the
  agent's own conversation (as `ippo`'s), one the shared global-state sequence (as plain
  `mappo`'s). The state's part starts at 0, so the critic starts as `ippo`'s and learns from the
  state only what the conversation leaves unexplained; each input stays as short as on its own
  (`with_own` puts both in one sequence, many times longer than either).
- Decentralized (`ippo`): the critic reads the agent's own conversation, exactly the token ids
  the policy saw; one forward over the episode gives the value before every turn.

The critic steps in its own minibatches of whole teams (`minibatches`, `team_chunks`), apart from
the policy's: it shares no weights with it, and a random-init critic needs the steps.

Episodes cut where the agent could not see it coming (a `max_turns` ending of a budget it was not
shown: `advantages.bootstrap_needed`) also get the value of the state they were left in (the final
global state, or the conversation plus the final observation), which GAE bootstraps from; a budget
the agent sees ends the task, and nothing is read after it. The critic only ever gets targets for
states where an agent acts, so a bootstrap read is an extrapolation; on `info_split`, before its
budget was shown, it drifted upwards (docs/algorithms.md). Decentralized actors never read `state()`: only this
module does, and only during training. Left out: value clipping and return normalization
(rewards here are O(1)).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from marl.config.choices import StateView, options
from marl.engine.advantages import bootstrap_needed
from marl.engine.rollout import RolloutBatch
from policies.value_model import SummedValueModel, ValueModel, build_value_model


def _own_last(state: str, agent: str, agents: frozenset[str]) -> str:
    """The state with the reader's own line moved to the end, next to where its value is read."""
    lines = state.split("\n")
    own = [line for line in lines if line.startswith(f"{agent}: ")]
    return "\n".join([line for line in lines if not line.startswith(f"{agent}: ")] + own)


def _own_team(state: str, agent: str, agents: frozenset[str]) -> str:
    """The reader's own line and the lines about no particular agent (the team's); teammates' lines dropped."""
    lines = state.split("\n")
    own = [line for line in lines if line.startswith(f"{agent}: ")]
    shared = [line for line in lines if line.split(": ", 1)[0] not in agents]
    return "\n".join(shared + own)


_VIEWS = {"own_last": _own_last, "own_team": _own_team}
FUSED_VIEW = "own_and_state"
STATE_VIEWS = tuple(v for v in options(StateView) if v != "global")
"""Agent-specific global states (MAPPO's): `own_last` and `own_team` rewrite the state per reader;
`with_own` reads the agent's own conversation with the `own_team` view of the state inserted before
each of its turns (the whole state at every turn would not fit a critic's context);
`own_and_state` adds the values of two trunks, one on the own conversation, one on the global state."""


def build_critic_model(spec: str, state_view: str | None, vocab_size: int, pad_id: int,
                       seed: int = 0) -> ValueModel | SummedValueModel:
    """The value model a critic with this view needs: two parts (own, state) for `own_and_state`, else one."""
    model = build_value_model(spec, vocab_size, pad_id, seed=seed)
    if state_view == FUSED_VIEW and not isinstance(model, SummedValueModel):
        model = SummedValueModel([model, build_value_model(spec, vocab_size, pad_id, seed=seed + 1)])
    return model


@dataclass
class CriticInputs:
    """Token sequences and read positions for a set of episodes, and what each read is for."""

    sequences: list[list[int]]
    positions: list[list[int]]
    turns: list[int]
    """Turn index of each value read, in flattening order; -1 - e marks episode e's bootstrap."""
    state: CriticInputs | None = None
    """`own_and_state`: the state part's inputs (the same reads, in its own order)."""
    state_order: list[int] | None = None
    """`own_and_state`: for each read of `turns`, its index among `state.turns`."""


class Critic:
    """A value model with its optimizer, reading centralized or decentralized inputs."""

    def __init__(self, model: Any, tokenizer: Any, chat: Any, centralized: bool, learning_rate: float,
                 max_grad_norm: float, chunk: int = 64, state_view: str | None = None, minibatches: int = 8) -> None:
        if state_view is not None and state_view not in STATE_VIEWS:
            raise ValueError(f"state_view {state_view!r}: use None (the state as is) or one of {sorted(STATE_VIEWS)}")
        if minibatches < 1:
            raise ValueError(f"minibatches must be >= 1, got {minibatches}")
        if (state_view == FUSED_VIEW) != (isinstance(model, SummedValueModel) and len(model.parts) == 2):
            raise ValueError(f"state_view {state_view!r} with a {type(model).__name__}: `{FUSED_VIEW}` needs a "
                             "SummedValueModel of two parts (own, state; build_critic_model makes it), other views one model")
        self.model = model
        self.state_view = state_view
        self.minibatches = minibatches
        """Critic steps per pass over a batch (whole teams per minibatch, see `team_chunks`)."""
        self.tokenizer = tokenizer
        self.chat = chat
        self.centralized = centralized
        self.max_grad_norm = max_grad_norm
        self.chunk = chunk
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate, weight_decay=0.0)
        # Per-batch caches (states rarely repeat across iterations): they start afresh with each new batch
        # and hold it only weakly, so a finished iteration's records can be freed before the next rollout.
        self._encoded: dict[tuple[str, bool], list[int]] = {}
        self._readers_map: dict[str, list[str]] | None = None
        self._batch: weakref.ref[RolloutBatch] | None = None
        self._suffixes: dict[str, list[int]] = {}

    def _begin(self, batch: RolloutBatch) -> None:
        """Start the per-batch caches afresh when `batch` is not the one they were filled from."""
        if self._batch is None or self._batch() is not batch:
            self._batch = weakref.ref(batch)
            self._encoded.clear()
            self._readers_map = None

    def _encode(self, text: str, bos: bool = True) -> list[int]:
        """Token ids of `text` (after BOS when `bos`), cached."""
        key = (text, bos)
        ids = self._encoded.get(key)
        if ids is None:
            first = [self.tokenizer.bos_token_id] if bos and self.tokenizer.bos_token_id is not None else []
            ids = first + list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            self._encoded[key] = ids
        return ids

    @staticmethod
    def _acting_turns(batch: RolloutBatch, e: int) -> list[int]:
        """Episode `e`'s turns that produced tokens (the ones valued)."""
        return [i for i in batch.episodes[e].turns if batch.turns[i].action_ids]

    @staticmethod
    def _conversation(batch: RolloutBatch, idx: list[int]) -> list[int]:
        """The whole conversation of an agent-episode: its last prompt and last action."""
        last = batch.turns[idx[-1]]
        return list(last.prompt_ids) + list(last.action_ids)

    def _suffix(self, agent: str) -> list[int]:
        ids = self._suffixes.get(agent)
        if ids is None:
            ids = self._suffixes[agent] = list(self.tokenizer(f"\nagent {agent}", add_special_tokens=False)["input_ids"])
        return ids

    def _reads(self, batch: RolloutBatch, episodes: Sequence[int]) -> list[tuple[str, str, int]]:
        """(state, agent, read) of every centralized value read of the given episodes (the state as the view shows it)."""
        view = _VIEWS.get(self.state_view) if self.state_view else None
        agents = frozenset(ep.agent for ep in batch.episodes) if view else frozenset()
        out = []
        for e in episodes:
            ep = batch.episodes[e]
            idx = self._acting_turns(batch, e)
            if not idx:
                continue
            states = [(batch.turns[i].state, i) for i in idx]
            if bootstrap_needed(ep):
                states.append((ep.final_state, -1 - e))
            for state, read in states:
                if state is None:
                    raise ValueError("a centralized critic needs the global state of every turn: collect rollouts "
                                     "with record_state=True")
                out.append((view(state, ep.agent, agents) if view else state, ep.agent, read))
        return out

    def _readers(self, batch: RolloutBatch) -> dict[str, list[str]]:
        if self._readers_map is None:
            readers: dict[str, set[str]] = {}
            for state, agent, _ in self._reads(batch, range(len(batch.episodes))):
                readers.setdefault(state, set()).add(agent)
            self._readers_map = {k: sorted(v) for k, v in readers.items()}
        return self._readers_map

    def _centralized_inputs(self, batch: RolloutBatch, episodes: Sequence[int]) -> CriticInputs:
        readers = self._readers(batch)
        wanted: dict[str, list[tuple[str, int]]] = {}
        for state, agent, read in self._reads(batch, episodes):
            wanted.setdefault(state, []).append((agent, read))
        seqs, positions, reads = [], [], []
        for state, pairs in wanted.items():
            ids = list(self._encode(state))
            end: dict[str, int] = {}
            for agent in readers[state]:
                ids += self._suffix(agent)
                end[agent] = len(ids) - 1
            seqs.append(ids)
            positions.append([end[agent] for agent, _ in pairs])
            reads.extend(read for _, read in pairs)
        return CriticInputs(seqs, positions, reads)

    def _state_ids(self, state: str, agent: str, agents: frozenset[str]) -> list[int]:
        return self._encode(f"\n{_own_team(state, agent, agents)}", bos=False) + self._suffix(agent)

    def _with_own_inputs(self, batch: RolloutBatch, episodes: Sequence[int]) -> CriticInputs:
        """One sequence per agent-episode: its conversation, with the global state and its id before each turn."""
        agents = frozenset(ep.agent for ep in batch.episodes)
        seqs, positions, reads = [], [], []
        for e in episodes:
            ep = batch.episodes[e]
            idx = self._acting_turns(batch, e)
            if not idx:
                continue
            conversation = self._conversation(batch, idx)
            seq: list[int] = []
            pos: list[int] = []
            done = 0
            for i in idx:
                t = batch.turns[i]
                if t.state is None:
                    raise ValueError("a centralized critic needs the global state of every turn: collect rollouts "
                                     "with record_state=True")
                seq += conversation[done : len(t.prompt_ids)] + self._state_ids(t.state, ep.agent, agents)
                pos.append(len(seq) - 1)
                seq += t.action_ids
                done = len(t.prompt_ids) + len(t.action_ids)
                reads.append(i)
            if bootstrap_needed(ep):
                if ep.final_state is None:
                    raise ValueError("a centralized critic needs the final global state of a truncated episode: "
                                     "collect rollouts with record_state=True")
                if ep.final_observation is not None:
                    seq += list(self.chat.next(ep.final_observation))
                seq += self._state_ids(ep.final_state, ep.agent, agents)
                pos.append(len(seq) - 1)
                reads.append(-1 - e)
            seqs.append(seq)
            positions.append(pos)
        return CriticInputs(seqs, positions, reads)

    def inputs(self, batch: RolloutBatch, episodes: Sequence[int]) -> CriticInputs:
        """Critic inputs for every turn (and truncation bootstrap) of the given episodes."""
        self._begin(batch)
        if self.centralized and self.state_view == "with_own":
            return self._with_own_inputs(batch, episodes)
        if self.centralized and self.state_view == FUSED_VIEW:
            own, state = self._own_inputs(batch, episodes), self._centralized_inputs(batch, episodes)
            where = {read: k for k, read in enumerate(state.turns)}
            own.state, own.state_order = state, [where[read] for read in own.turns]
            return own
        if self.centralized:
            return self._centralized_inputs(batch, episodes)
        return self._own_inputs(batch, episodes)

    def _own_inputs(self, batch: RolloutBatch, episodes: Sequence[int]) -> CriticInputs:
        """The agent's own conversation per agent-episode, a value read before each of its turns."""
        seqs: list[list[int]] = []
        positions: list[list[int]] = []
        reads: list[int] = []
        for e in episodes:
            ep = batch.episodes[e]
            idx = self._acting_turns(batch, e)
            if not idx:
                continue
            sequence = self._conversation(batch, idx)
            pos = [len(batch.turns[i].prompt_ids) - 1 for i in idx]
            reads.extend(idx)
            if bootstrap_needed(ep):
                if ep.final_observation is not None:
                    sequence = sequence + list(self.chat.next(ep.final_observation))
                pos.append(len(sequence) - 1)
                reads.append(-1 - e)
            seqs.append(sequence)
            positions.append(pos)
        return CriticInputs(seqs, positions, reads)

    def predict(self, inputs: CriticInputs) -> torch.Tensor:
        """Values of every read in `inputs`, in order (grad flows if enabled)."""
        if inputs.state is None:
            return self._values(self.model, inputs)
        own, state = self.model.parts
        order = torch.tensor(inputs.state_order, dtype=torch.long, device=self.model.device)
        return self._values(own, inputs) + self._values(state, inputs.state)[order]

    def _values(self, model: ValueModel, inputs: CriticInputs) -> torch.Tensor:
        out = []
        for start in range(0, len(inputs.sequences), self.chunk):
            out.append(model.values(inputs.sequences[start : start + self.chunk],
                                    inputs.positions[start : start + self.chunk]))
        if not out:
            return torch.zeros(0, device=model.device)
        return torch.cat(out)

    @torch.no_grad()
    def batch_values(self, batch: RolloutBatch) -> tuple[np.ndarray, np.ndarray]:
        """(values per turn, bootstrap value per episode) for the whole batch, without grad."""
        was_training = self.model.training
        self.model.eval()
        inputs = self.inputs(batch, range(len(batch.episodes)))
        flat = self.predict(inputs).float().cpu().numpy()
        self.model.train(was_training)
        values = np.zeros(len(batch.turns), dtype=np.float64)
        bootstrap = np.zeros(len(batch.episodes), dtype=np.float64)
        for read, v in zip(inputs.turns, flat, strict=True):
            if read >= 0:
                values[read] = v
            else:
                bootstrap[-1 - read] = v
        return values, bootstrap

    @staticmethod
    def team_chunks(batch: RolloutBatch, episodes: Sequence[int], n: int, rng: np.random.Generator) -> list[list[int]]:
        """`episodes` split into at most `n` random minibatches of whole teams (the agent-episodes of one
        environment stay together, so a state the team shares is read in one minibatch, not once per agent)."""
        teams: dict[int, list[int]] = {}
        for e in episodes:
            env = batch.episodes[e].env
            teams.setdefault(env if env >= 0 else -1 - e, []).append(e)
        blocks = list(teams.values())
        order = rng.permutation(len(blocks))
        chunks = np.array_split(order, min(n, len(blocks)))
        return [[e for b in chunk for e in blocks[b]] for chunk in chunks if len(chunk)]

    def step(self) -> float:
        """Clip the critic's gradients and step its optimizer; returns the gradient norm."""
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)
        if torch.isfinite(norm):
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return float(norm)
