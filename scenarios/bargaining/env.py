"""Bargaining (``bargaining``): agents with private values divide a pool of items by offers and votes.

**Agents.** ``agent_0`` .. ``agent_{n-1}``, n in [2, 8]. Each episode draws a pool (``basic``: 3
item types of 1-4 units; ``hard``: 4 types of 1-5 units) and, per agent, private values of
0-5 per unit (each agent values the pool at more than 0); in ``hard`` each agent also has a
private outside option worth 10-40% of its pool value. An agent sees only its own values.

**Turns.** One proposer per step, round robin over the agents still bargaining, starting
with a seeded agent. Every live agent acts every step; what is valid depends on its role:

- the *proposer* writes ``{"offer": "<groups>"}`` (a full allocation; it replaces the offer on
  the table) or, when an offer is on the table, ``{"accept": ""}``;
- the maker of the offer on the table writes ``{"wait": ""}``;
- everyone else writes ``{"accept": ""}`` or ``{"reject": ""}`` when an offer is on the table,
  else ``{"wait": ""}``;
- in ``hard`` anyone may write ``{"leave": ""}`` instead.

The offer on the table becomes a **deal** when every agent except its maker accepts it (the
proposer included: a counter-offer is a rejection) and nobody leaves. Otherwise it is off
the table, and the proposer's new offer (if any, and if nobody left) is put on it. A
malformed or out-of-role action counts as no offer and no acceptance.

**Offers.** One group of digits per item type, in pool order, each group holding the counts
of agent_0, agent_1, ... in id order (agents that left get 0): with pool ``book 3 hat 1 ball 2``
and two agents, ``21 01 11`` gives agent_0 two books and a ball (see ``deals.py``).

**Observations.** ``{"text": str}``, printable ASCII. Turn 1: ``you are agent_1 of 2. pool:
book 3 hat 1 ball 2. your values: book 2 hat 4 ball 1 (all 12). offers give each item's counts
per agent id. now: wait`` (``hard`` adds ``leave gets 3.``). Later
turns, only what changed: ``rejected by agent_1.``, ``agent_0 offers 21 01 11: you get book 1
hat 1 ball 1, worth 7.``, ``agent_2 left.``, ``error: <reason>.``, then the agent's role now:
``now: offer``, ``now: offer or accept``, ``now: accept or reject``, ``now: wait`` (``hard``:
``... or leave``).

**Actions.** One JSON object with exactly one key out of offer, accept, reject, wait, leave;
all but offer take the empty string. ``action_grammar(agent)`` holds exactly the valid actions
of its role now (offers as one slot per item type whose values are the valid digit groups);
``expert_action(agent)`` is the scripted negotiator's action (``expert.py``). Malformed actions
(not JSON, wrong or several keys, non-string values, invalid or unbalanced offers, an act
outside the agent's role, non-ASCII, over 512 characters, ``None``) return ``error:``.

**Rewards.** Layers in ``infos[agent]["reward_components"]``: ``value`` (at a deal, the value
of the agent's share divided by its value of the whole pool; when leaving, its outside option
divided the same way), ``deal`` (1 at a deal), ``format`` (-1 malformed). Default weights:
value 1.0, deal 0.0 (a shaping bonus to turn on), format 0.1.

**Ending.** A deal ends every live agent's episode with ``success``. Leaving ends the leaver's
with ``failure`` (and its outside option as value); when fewer than two agents remain, the
last one ends with ``failure`` and its outside option too. No deal within ``max_turns``
truncates everyone with reason ``max_turns`` and value 0.

**Options.** ``split``, ``max_turns`` (24), ``reward_weights``, ``hard_frac`` (0.3: share of
hard episodes in ``train``).

**Splits.** ``train`` (``basic`` or, with probability ``hard_frac``, ``hard``), ``basic``,
``hard``. Evaluation seeds: ``BargainingEnv.eval_seeds(split, n)``.

**Capabilities.** ``action_classes()``: the five verbs (offer, accept, reject, wait, leave;
``action_class`` reads the verb of a well-formed action, valid in the agent's role or not);
``opponent_slots(agent)``: every other bargainer (whose verbs an opponent model predicts);
``opponent_styles()``: scripted partner styles (``styles.py``: pushover, fair, tough, conceder,
boulware; held out, sharing no rule with those: alternating, reciprocal, anchored) and
``scripted_action(agent, style)``: the action a style (or ``"expert"``) takes in ``agent``'s seat now,
one instance per seat and episode, so a scripted partner can stand in for an agent (an opponent pool's entries);
``episode_stats(agent)``: ``value`` (the normalized value the agent got: its share at a deal or
its outside option, 0 without either) and ``offers`` (its offers that went on the table).
``turn_budget_visible`` is True: every observation ends with ``turn k of K`` (``K`` = ``max_turns``), so
the deadline is part of the negotiation and running out of it is terminal.

**Expert.** With every agent scripted, over 200 evaluation seeds per agent count 2 / 3 / 5 / 8:
deal rate 1.0 at every count in ``basic``, 1.0 / 0.99 / 0.97 / 0.74 in ``hard`` (outside
options make some deals impossible); mean normalized value per agent in ``basic`` 0.67 / 0.47
/ 0.29 / 0.19 (a fair share is 1/n; different values make the sum exceed 1). Floors are in
``tests/scenarios/test_bargaining.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np

from scenarios.bargaining.deals import (
    ACTS,
    ITEMS,
    Alloc,
    Pool,
    compositions,
    make_pool,
    offer_text,
    parse_act,
    parse_offer,
)
from scenarios.bargaining.expert import acceptable, propose
from scenarios.bargaining.styles import HELDOUT_STYLES, STYLES, TRAIN_STYLES, PartnerStyle, SeatView
from scenarios.base import OpponentStyles, ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar, Part, Slot

SPLITS = ("train", "basic", "hard")
_SPLIT_CODE = {s: i for i, s in enumerate(SPLITS)}
_ROLE_ACTS = {"propose": ("offer", "accept"), "respond": ("accept", "reject"), "wait": ("wait",)}


@dataclass(frozen=True)
class BargainingOptions(ScenarioOptions):
    """Options of ``bargaining`` (on top of split, max_turns, reward_weights)."""

    max_turns: int = 24
    """Steps before an undecided negotiation is truncated (reason ``max_turns``, value 0 for all)."""
    hard_frac: float = 0.3
    """Share of ``train`` episodes drawn from the hard split (four item types, outside options)."""

    def __post_init__(self) -> None:
        f = self.hard_frac
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 <= f <= 1:
            raise ValueError(f"hard_frac must be a number in [0, 1], got {f!r}")


@dataclass(frozen=True)
class _Table:
    alloc: Alloc
    maker: int


class BargainingEnv(TextScenario):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "name": "bargaining", "is_parallelizable": True}
    description = "Divide a pool of items by offers and votes; each agent knows only its own values."
    kind = "competitive"
    agent_range = (2, 8)
    splits = SPLITS
    options_cls = BargainingOptions
    default_reward_weights = {"value": 1.0, "deal": 0.0, "format": 0.1}
    turn_budget_visible = True  # "turn k of K" ends each observation: the deadline is part of the game

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        self._pool: Pool | None = None
        self._hard = False
        self._left: set[int] = set()
        self._table: _Table | None = None
        self._proposer = 0
        self._steps = 0
        self._revealed: dict[int, Alloc] = {}  # each agent's latest offer, for the expert
        self._value: dict[int, float] = {}  # normalized value each agent got (deal share or outside option)
        self._offers: dict[int, int] = {}  # offers each agent put on the table
        self._seated: dict[tuple[str, str], PartnerStyle] = {}  # scripted partners, one per seat and episode

    # ----- roles -----
    def _live(self) -> tuple[bool, ...]:
        return tuple(i not in self._left for i in range(len(self.possible_agents)))

    def _role(self, i: int) -> str:
        if i == self._proposer:
            return "propose"
        if self._table is not None and i != self._table.maker:
            return "respond"
        return "wait"

    def _valid_acts(self, i: int) -> tuple[str, ...]:
        acts = _ROLE_ACTS[self._role(i)]
        if acts == ("offer", "accept") and self._table is None:
            acts = ("offer",)
        return (*acts, "leave") if self._hard else acts

    def _prompt(self, i: int) -> str:
        return "now: " + " or ".join(self._valid_acts(i))

    # ----- hooks -----
    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        rng = np.random.default_rng([episode_seed, _SPLIT_CODE[split], 2])
        n = len(self.possible_agents)
        self._hard = split == "hard" or (split == "train" and rng.random() < self.opts.hard_frac)
        self._pool = make_pool(rng, n, self._hard)
        self._proposer = int(rng.integers(n))
        self._left, self._table, self._steps, self._revealed = set(), None, 0, {}
        self._value, self._offers, self._seated = {}, {}, {}
        return {a: self._intro(i) for i, a in enumerate(self.possible_agents)}

    def _intro(self, i: int) -> str:
        pool, n = self._pool, len(self.possible_agents)
        goods = " ".join(f"{item} {c}" for item, c in zip(pool.items, pool.counts, strict=True))
        vals = " ".join(f"{item} {v}" for item, v in zip(pool.items, pool.values[i], strict=True))
        leave = f" leave gets {pool.outside[i]}." if self._hard else ""
        # No example offer here: it grows with n and every offer error shows one.
        return (f"you are agent_{i} of {n}. pool: {goods}. your values: {vals} (all {pool.max_worth(i)}). "
                f"offers give each item's counts per agent id.{leave} {self._prompt(i)}")

    def _step_agents(self, actions: dict[str, Any]) -> dict[str, StepOutcome]:
        pool, index = self._pool, {a: int(a.split("_")[1]) for a in actions}
        acts: dict[int, str | None] = {}
        errors: dict[int, str] = {}
        offer: Alloc | None = None
        for agent, action in actions.items():
            i = index[agent]
            act, arg, reason = parse_act(action, self.max_action_length)
            if reason is None and act not in self._valid_acts(i):
                valid = " or ".join('{"offer": "<groups>"}' if a == "offer" else json.dumps({a: ""})
                                    for a in self._valid_acts(i))
                reason = f"you may not {act} now; valid: {valid}"
            if reason is None and act == "offer":
                offer, reason = parse_offer(arg, pool, self._live())
            if reason is not None:
                errors[i], act = reason, None
            acts[i] = act
        live = [index[a] for a in actions]
        leavers = [i for i in live if acts[i] == "leave"]
        table, self._table = self._table, None
        self._steps += 1
        events: list[str] = []
        if table is not None:
            refusers = [i for i in live if i != table.maker and acts[i] != "accept"]
            if not refusers and not leavers:
                return self._deal(table.alloc, live, errors)
            if refusers:
                events.append("rejected by " + " ".join(f"agent_{i}" for i in refusers) + ".")
        if leavers:
            events.append(" ".join(f"agent_{i}" for i in leavers) + " left.")
            self._left.update(leavers)
        elif offer is not None:
            self._table = _Table(offer, self._proposer)
            self._revealed[self._proposer] = offer
            self._offers[self._proposer] = self._offers.get(self._proposer, 0) + 1
        self._advance_proposer()
        remaining = [i for i in live if i not in self._left]
        outcomes = {}
        for i in live:
            error = f"error: {errors[i]}. " if i in errors else ""
            components = {"format": -1.0 if i in errors else 0.0}
            if i in self._left or len(remaining) < 2:
                why = "you left" if i in self._left else "too few agents remain"
                components["value"] = self._value[i] = pool.outside[i] / pool.max_worth(i)
                text = " ".join([*filter(None, [error.strip(), *events]),
                                 f"{why}: outside option {pool.outside[i]}; episode over"])
                outcomes[f"agent_{i}"] = StepOutcome(text, components, i in errors, "failure")
                continue
            lines = [*events]
            if self._table is not None:
                t = self._table
                who = "you offer" if t.maker == i else f"agent_{t.maker} offers"
                worth = "" if t.maker == i else \
                    f": you get {pool.share_text(i, t.alloc)}, worth {pool.worth(i, t.alloc)}"
                lines.append(f"{who} {offer_text(t.alloc)}{worth}.")
            lines.append(self._prompt(i))
            outcomes[f"agent_{i}"] = StepOutcome(error + " ".join(lines), components, i in errors)
        if len(remaining) < 2:
            self._left.update(remaining)
        return outcomes

    def _deal(self, alloc: Alloc, live: list[int], errors: dict[int, str]) -> dict[str, StepOutcome]:
        pool, outcomes = self._pool, {}
        for i in live:
            worth, total = pool.worth(i, alloc), pool.max_worth(i)
            text = (f"deal on {offer_text(alloc)}: you get {pool.share_text(i, alloc)}, worth {worth} of {total}; "
                    "episode over")
            self._value[i] = worth / total
            components = {"value": worth / total, "deal": 1.0, "format": -1.0 if i in errors else 0.0}
            outcomes[f"agent_{i}"] = StepOutcome(text, components, i in errors, "success")
        return outcomes

    def _advance_proposer(self) -> None:
        n = len(self.possible_agents)
        for k in range(1, n + 1):
            nxt = (self._proposer + k) % n
            if nxt not in self._left:
                self._proposer = nxt
                return

    def _agent_state(self, agent: str) -> str:
        if self._pool is None:
            return ""
        i, pool = int(agent.split("_")[1]), self._pool
        worth = pool.worth(i, self._table.alloc) if self._table is not None else "-"
        return (f"values={','.join(map(str, pool.values[i]))} all={pool.max_worth(i)} outside={pool.outside[i]} "
                f"role={self._role(i)} table_worth={worth}")

    def state(self) -> str:
        extra = ""
        if self._pool is not None:
            table = f"{offer_text(self._table.alloc)} by agent_{self._table.maker}" if self._table else "-"
            goods = " ".join(f"{item}={c}" for item, c in zip(self._pool.items, self._pool.counts, strict=True))
            extra = f"\npool: {goods} hard={self._hard} proposer=agent_{self._proposer} step={self._steps} " \
                    f"table={table}"
        return self._clean(super().state() + extra, self.state_space.max_length)

    # ----- scenario extras -----
    @property
    def pool(self) -> Pool | None:
        """This episode's pool, values and outside options (global information: not for agents' eyes)."""
        return self._pool

    def opponent_slots(self, agent: str) -> tuple[str, ...]:
        """Every other bargainer: each one's next verb is what an agent could predict."""
        return tuple(a for a in self.possible_agents if a != agent)

    def action_classes(self) -> tuple[str, ...]:
        return ACTS

    def action_class(self, agent: str, action: object) -> str | None:
        return parse_act(action, self.max_action_length)[0]

    def episode_stats(self, agent: str) -> dict[str, float]:
        if self._pool is None or agent not in self.possible_agents:
            return {}
        i = int(agent.split("_")[1])
        return {"value": self._value.get(i, 0.0), "offers": float(self._offers.get(i, 0))}

    def entity_vocabulary(self) -> list[str]:
        ids = [f"agent_{i}" for i in range(self.agent_range[1])]
        return sorted({*ITEMS, *ids, *(str(d) for d in range(10))})

    def expert_action(self, agent: str) -> str:
        i, pool = int(agent.split("_")[1]), self._pool
        n_live = len(self.possible_agents) - len(self._left)
        progress = min(1.0, self._steps / self.opts.max_turns)
        role, table = self._role(i), self._table
        ok = table is not None and acceptable(pool, i, table.alloc, progress, n_live)
        last_step = self._steps + 1 >= self.opts.max_turns
        if self._hard and last_step and not ok and not (table is not None and table.maker == i):
            return json.dumps({"leave": ""})
        if role == "propose":
            if ok:
                return json.dumps({"accept": ""})
            alloc = propose(pool, i, self._live(), progress, self._revealed)
            return json.dumps({"offer": offer_text(alloc)})
        if role == "respond":
            return json.dumps({"accept" if ok else "reject": ""})
        return json.dumps({"wait": ""})

    def opponent_styles(self) -> OpponentStyles:
        return OpponentStyles(train=TRAIN_STYLES, held_out=HELDOUT_STYLES)

    def scripted_action(self, agent: str, style: str) -> str:
        if style == "expert":
            return self.expert_action(agent)
        if style not in STYLES:
            raise ValueError(f"bargaining has no partner style {style!r}; styles: expert, {', '.join(sorted(STYLES))}")
        seat = self._seated.setdefault((agent, style), STYLES[style]())
        i, table = int(agent.split("_")[1]), self._table
        return seat.act(SeatView(self._pool, i, self._role(i), table.alloc if table else None,
                                 table.maker if table else -1, min(1.0, self._steps / self.opts.max_turns),
                                 self._live()))

    def action_grammar(self, agent: str) -> ActionGrammar:
        if agent not in self.agents or self._pool is None:
            return ActionGrammar(())
        i, live = int(agent.split("_")[1]), self._live()
        templates: list[tuple[Part, ...]] = []
        for act in self._valid_acts(i):
            if act == "offer":
                parts: list[Part] = ['{"offer": "']
                for t, item in enumerate(self._pool.items):
                    parts += [" "] if t else []
                    parts.append(Slot(item, compositions(self._pool.counts[t], live)))
                templates.append((*parts, '"}'))
            else:
                templates.append((json.dumps({act: ""}),))
        return ActionGrammar(tuple(templates))
