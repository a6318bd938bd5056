"""An agent-episode as one scored sequence, its masks, and how a minibatch splits into micro-batches.

Every turn's prompt is a prefix of the next, so an agent-episode is ONE token sequence (its last
prompt + last action) whose action spans are scored in one forward. `micro_batches` cuts a
minibatch's sequences, those of one task together and longest first, into groups whose forward stays
under a token budget, so a training forward's memory is bounded by that budget, not by the batch. Left out: what is computed on them
(`marl.engine.learner`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from marl.engine.rollout import Episode, RolloutBatch, Turn
from policies.span_forward import forward_tokens


def decision_mask(turns: list[Turn], width: int) -> torch.Tensor:
    """(B, width) mask of tokens where more than one token was allowed (all tokens when unconstrained)."""
    mask = torch.zeros(len(turns), width, dtype=torch.bool)
    for row, turn in enumerate(turns):
        n = len(turn.action_ids)
        if turn.allowed is None:
            mask[row, :n] = True
        else:
            mask[row, :n] = torch.tensor([len(a) > 1 for a in turn.allowed], dtype=torch.bool)
    return mask


@dataclass
class EpisodeSequence:
    """One agent-episode as a single token sequence with the (start, length) span of each action."""

    episode: int
    sequence: list[int]
    spans: list[tuple[int, int]]
    turns: list[Turn]
    turn_ids: list[int]


def episode_sequence(batch: RolloutBatch, episode: int) -> EpisodeSequence:
    """Rebuild an episode's full sequence from its turns, checking the prefix property on the way."""
    turn_ids = [i for i in batch.episodes[episode].turns if batch.turns[i].action_ids]
    turns = [batch.turns[i] for i in turn_ids]
    last = turns[-1]
    sequence = list(last.prompt_ids) + list(last.action_ids)
    spans = []
    for t in turns:
        start, end = len(t.prompt_ids), len(t.prompt_ids) + len(t.action_ids)
        if sequence[:start] != t.prompt_ids or sequence[start:end] != t.action_ids:
            raise ValueError(f"episode {episode}: a turn's prompt is not a prefix of the next one; the chat "
                             "format must append to the conversation, never rewrite it")
        spans.append((start, len(t.action_ids)))
    return EpisodeSequence(episode, sequence, spans, turns, turn_ids)


def padded(rows: list[list[float]], width: int) -> torch.Tensor:
    out = torch.zeros(len(rows), width, dtype=torch.float32)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.float32)
    return out


def subset(batch: RolloutBatch, keep: Callable[[Episode], bool]) -> RolloutBatch:
    """The episodes `keep` selects, with their turns, re-indexed into a batch of their own."""
    turns: list[Turn] = []
    episodes: list[Episode] = []
    for ep in batch.episodes:
        if not keep(ep):
            continue
        e = len(episodes)
        ids = []
        for i in ep.turns:
            t = batch.turns[i]
            ids.append(len(turns))
            turns.append(replace(t, episode=e))  # every field travels (state, opponent labels, ...)
        episodes.append(replace(ep, turns=ids))
    return RolloutBatch(turns, episodes, batch.generated_tokens, batch.env_steps, batch.seconds,
                        batch.generate_seconds, batch.env_seconds, batch.reused_prompt_tokens, batch.prompt_tokens)


def shared_until(piece: EpisodeSequence) -> int:
    """Leading tokens of an episode's sequence that other episodes of its task may share: its first prompt
    but the last token (whose logits predict the first action)."""
    return piece.spans[0][0] - 1 if piece.spans else 0


def padded_tokens(pieces: Sequence[EpisodeSequence]) -> int:
    """Tokens of one training forward over `pieces`: a shared first prompt runs once, the rest padded."""
    return forward_tokens([p.sequence for p in pieces], [shared_until(p) for p in pieces])


def micro_batches(pieces: Sequence[EpisodeSequence], budget: int) -> list[list[EpisodeSequence]]:
    """Groups of `pieces` whose forward stays within `budget` tokens (a longer sequence forms a group of its
    own); 0 keeps them in one group. Episodes that share a first prompt are kept together (it then runs
    once), longest first, so rows of a group are of similar length and little of a forward is padding;
    their gradients add up the same in any order."""
    by_prompt: dict[tuple[int, ...], list[EpisodeSequence]] = {}
    for piece in pieces:
        by_prompt.setdefault(tuple(piece.sequence[: shared_until(piece)]), []).append(piece)
    families = sorted((sorted(f, key=lambda p: len(p.sequence), reverse=True) for f in by_prompt.values()),
                      key=lambda f: len(f[0].sequence), reverse=True)
    groups: list[list[EpisodeSequence]] = []
    for piece in (p for family in families for p in family):
        if groups and budget > 0 and padded_tokens([*groups[-1], piece]) > budget:
            groups.append([piece])
        elif groups:
            groups[-1].append(piece)
        else:
            groups.append([piece])
    return groups
