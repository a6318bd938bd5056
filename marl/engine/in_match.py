"""In-match adaptation of an opponent model: the head's prediction mixed with predictors fitted to this match.

A head trained on some opponents predicts a rule it has seen, and a new rule only where it resembles
one: the held-out styles of repeated_game (a sequence of another period, copying at another lag) stay
near chance for the head alone. What an agent can still do at execution is what a person does: watch
what this opponent has played so far and check which simple regularity explains it. This module does
that for every (agent, opponent slot) of a collection, from what the agent itself has seen: the
opponent's revealed action classes and the agent's own, one step at a time (decentralized; the
scenario must reveal the opponents' actions, `opponent_actions_revealed()`).

Predictors (experts), each a distribution over the next action class:
- the head (its softmax, computed by the policy from the agent's own context);
- conditional frequencies, one per context: what the opponent played after each value of a context
  so far in this match, smoothed toward the head's distribution (`SMOOTHING`: a context value not
  seen yet defers to the head, and a class the head rules out, such as a move the variant does not
  offer, keeps almost no mass); contexts are nothing (plain frequencies), the
  opponent's class `k` steps back and the agent's own `k` steps back (`k` = 1 .. `LAGS`), the pair of
  both last classes, and the most / least frequent class of either side so far. A context's table
  learns any mapping from its value to the next class (copy, "beat my last", a period of `k`), with no
  knowledge of the game's rules.

The mixture is Bayesian model averaging over the experts with fixed share (`SHARE`; an opponent that
changes its rule, such as a learning policy, is tracked again after a while): the head starts with
half of the prior weight, so early in a match, with little history, its prediction stands. The
agent is shown the mixture's most likely class (`policies/llm_policy.py`, `hint_mix`).

It leaves out training: the head learns as before; nothing here has parameters to train.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np
import torch

LAGS = 6
"""How many steps back a lag context reads, for the opponent's and the agent's own classes."""
SMOOTHING = 0.25
"""Pseudo-count per class of a conditional frequency, spread by the head's distribution (small: a rule
seen twice is trusted)."""
SHARE = 0.02
"""Fixed share: each step this part of the weight is spread back over the experts by their prior."""
HEAD_PRIOR = 0.5
"""The head's share of the prior weight; the context predictors share the rest."""


def _contexts(opp: Sequence[int], own: Sequence[int], classes: int) -> list[Hashable | None]:
    """Each context predictor's value now (None: undefined yet), from both sides' classes so far (-1: none)."""
    def lag(seq: Sequence[int], k: int) -> int | None:
        return seq[-k] if len(seq) >= k and seq[-k] >= 0 else None

    def ranked(seq: Sequence[int], most: bool) -> int | None:
        # among the classes either side has played; ties go to the one this side played last (most) or
        # least recently (least), as a frequency rule naturally breaks them
        seen = sorted({c for c in (*opp, *own) if c >= 0})
        if not seen:
            return None
        last = {c: i for i, c in enumerate(seq)}
        keys = {c: (seq.count(c), last.get(c, -1)) for c in seen}
        return max(seen, key=keys.__getitem__) if most else min(seen, key=keys.__getitem__)

    values: list[Hashable | None] = [0]
    values += [lag(opp, k) for k in range(1, LAGS + 1)]
    values += [lag(own, k) for k in range(1, LAGS + 1)]
    last = (lag(opp, 1), lag(own, 1))
    values.append(None if None in last else last)
    values += [ranked(own, True), ranked(own, False), ranked(opp, True), ranked(opp, False)]
    return values


class SlotModel:
    """One agent's in-match model of one opponent slot: the experts' tables, their weights, and both histories."""

    def __init__(self, classes: int) -> None:
        self.classes = classes
        self.opp: list[int] = []
        self.own: list[int] = []
        contexts = len(_contexts([], [], classes))
        self.tables: list[dict[Hashable, np.ndarray]] = [{} for _ in range(contexts)]
        self.prior = np.concatenate([[HEAD_PRIOR], np.full(contexts, (1 - HEAD_PRIOR) / contexts)])
        self.log_weights = np.log(self.prior)
        self._pending: tuple[list[Hashable | None], np.ndarray] | None = None

    def _experts(self, head: np.ndarray, values: list[Hashable | None]) -> np.ndarray:
        """`[experts, classes]`: the head's distribution, then each context's conditional frequency."""
        head = head / head.sum()
        pseudo = SMOOTHING * self.classes
        rows = [head]
        for table, value in zip(self.tables, values, strict=True):
            counts = table.get(value) if value is not None else None
            rows.append(head if counts is None else (counts + pseudo * head) / (counts.sum() + pseudo))
        return np.stack(rows)

    def predict(self, head: np.ndarray) -> np.ndarray:
        """The mixture's distribution over the slot's next class, given the head's (kept for `observe`)."""
        values = _contexts(self.opp, self.own, self.classes)
        experts = self._experts(head, values)
        self._pending = (values, experts)
        weights = np.exp(self.log_weights - self.log_weights.max())
        return (weights / weights.sum()) @ experts

    def observe(self, opponent: int, own: int) -> None:
        """The step's classes (-1: none): the experts that predicted it gain weight, the tables learn it.

        A step where either side has no class (a forfeit, a malformed action) teaches what the opponent
        did play but leaves both histories, as `repeated_game` leaves a forfeited round out of the
        history its styles read: a lag then still counts the rounds the opponent's rule counts."""
        if self._pending is not None and opponent >= 0:
            values, experts = self._pending
            self.log_weights = self.log_weights + np.log(np.maximum(experts[:, opponent], 1e-12))
            weights = np.exp(self.log_weights - self.log_weights.max())
            weights = (1 - SHARE) * weights / weights.sum() + SHARE * self.prior
            self.log_weights = np.log(weights)
            for table, value in zip(self.tables, values, strict=True):
                if value is not None:
                    table.setdefault(value, np.zeros(self.classes))[opponent] += 1
        self._pending = None
        if opponent >= 0 and own >= 0:
            self.opp.append(opponent)
            self.own.append(own)


class InMatchModels:
    """Every (env, agent) of one collection's in-match models, one per opponent slot; `mix` is the policy's
    `hint_mix` (rows named by `keys`), `observe` feeds each step's revealed classes."""

    def __init__(self, classes: int) -> None:
        self.classes = classes
        self.models: dict[tuple[Hashable, int], SlotModel] = {}
        self.shown: dict[Hashable, tuple[int, ...]] = {}

    def mix(self, keys: Sequence[Hashable], head_probs: torch.Tensor) -> torch.Tensor:
        """`[rows, slots, classes]` head probabilities -> the mixtures' (same shape), one row per key."""
        probs = head_probs.detach().float().cpu().numpy()
        out = np.empty_like(probs)
        for r, key in enumerate(keys):
            for s in range(probs.shape[1]):
                model = self.models.setdefault((key, s), SlotModel(self.classes))
                out[r, s] = model.predict(probs[r, s])
            self.shown[key] = tuple(int(c) for c in out[r].argmax(-1))
        return torch.as_tensor(out, dtype=head_probs.dtype, device=head_probs.device)

    def observe(self, key: Hashable, opponent: Sequence[int], own: int) -> None:
        """After a step: what each slot of `key`'s agent played (`Turn.opponent`) and the agent's own class."""
        for s, label in enumerate(opponent):
            model = self.models.get((key, s))
            if model is None:  # a slot not predicted yet (the agent did not act through the policy) still has a history
                model = self.models.setdefault((key, s), SlotModel(self.classes))
            model.observe(int(label), int(own))

    def take_shown(self, key: Hashable) -> tuple[int, ...]:
        """The classes last shown to `key`'s agent (its mixture's argmax per slot), forgotten once read; () for none."""
        return self.shown.pop(key, ())


def own_class(env: Any, agent: str, text: str) -> int:
    """`agent`'s own action class index in `env.action_classes()` from its action text; -1 for none."""
    name = env.action_class(agent, text)
    classes = env.action_classes()
    return classes.index(name) if name in classes else -1


def in_match_models(policies: Any, envs: Sequence[Any]) -> InMatchModels | None:
    """A collection's in-match models where a policy of `policies` (a `PolicyMap`) shows its head's prediction
    mixed in-match, else None; refused where one of `envs` does not reveal what the opponents played."""
    heads = [getattr(p, "opponent_head", None) for p in (policies.policies.values() if policies is not None else ())]
    if not any(h is not None and h.feeds_prompt and getattr(h, "in_match", False) for h in heads):
        return None
    for one in envs:
        if not one.opponent_actions_revealed():
            raise ValueError(f"{type(one.unwrapped).__name__} does not show an agent what its opponents played, so the "
                             "opponent head cannot adapt in-match: train with opponent.in_match false, or evaluate "
                             "the checkpoint with in-match off (repeated_game_styles.py --in-match off)")
    return InMatchModels(len(envs[0].action_classes()))
