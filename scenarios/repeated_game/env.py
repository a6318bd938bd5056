"""Repeated game (``repeated_game``): zero-sum rock-paper-scissors matches against scripted styles or each other.

**Agents.** ``agent_0`` .. ``agent_{n-1}``, n in [2, 16]. With option ``pairing="scripted"``
(default) each agent plays its own match against a scripted opponent whose style (see
``styles.py``: fixed, cycle, copy, beat_last, frequency, noisy_beat_last, win_stay,
win_stay_lose_next, win_stay_lose_copy, lose_to_last, pattern2, pattern5, copy_lag3; held out,
sharing no rule with those:
pattern, pattern4, copy_lag2, beat_least_frequent) is drawn per agent from the episode seed.
With ``pairing="self"`` agents play each other: agent_0 vs agent_1, agent_2 vs agent_3, ...;
with an odd count the last agent plays a scripted opponent. The opponent's style goes into ``infos[agent]["opponent_style"]`` (``"agent"``
for a learning opponent, whose id is in ``infos[agent]["opponent"]``) and into ``state()``,
never into an observation.

**Observations.** ``{"text": str}``, printable ASCII. Turn 1 says who the agent is, who it
plays (``a hidden opponent`` or the other agent's id), the match length and the moves, e.g.
``you are agent_0 vs a hidden opponent. 10 rounds; most rounds won takes the match. moves:
rock paper scissors; each beats the one before it (rock beats scissors).`` Later turns:
``round 3: you rock, opp paper: lost. score 1-2`` (own round wins - opponent round wins),
prefixed by ``error: <reason>; round forfeited.`` after a malformed action, followed by
``match over: ...`` at the end. With option ``history`` K > 0 each of them also lists both sides'
moves of the last K rounds, oldest first: ``recent opp: rock rock paper; you: paper scissors
rock`` (so a side's move of k rounds ago sits k from the end of its list, readable without
looking back over the transcript; forfeited rounds are not listed).

**Actions.** One JSON object as text: ``{"move": "rock"}``; any JSON with that content is
accepted. Malformed actions (not JSON, not an object, keys other than exactly ``move``, a
non-string or unknown move, non-ASCII, over 512 characters, ``None``) forfeit the round: it
counts as a loss (both forfeiting: a draw) and does not enter either side's move history.
``action_grammar(agent)`` lists the valid moves; ``expert_action(agent)`` is the scripted
expert's move (``expert.py``: predicts the opponent with generic rules and plays the counter).

**Rewards.** Layers in ``infos[agent]["reward_components"]``: ``round`` (+1 win, -1 loss, 0
draw, every round), ``match`` (+1 won, -1 lost, 0 drawn; at the end), ``format`` (-1
malformed, else 0). Default weights: round 0.1, match 1.0, format 0.2 (option ``reward_weights``).

**Ending.** A match ends after ``rounds`` rounds; in the first-to-K variant (``hard``) it ends
as soon as one side has ``first_to`` round wins. The winner has more round wins. ``success``
if the agent won the match, ``failure`` if it lost or drew (a draw is not a win). Both sides of
a self-play pair end together; in scripted pairing first-to-K matches end at different
turns, so agents leave ``agents`` while others play on. ``max_turns`` below the match length
truncates the match (reason ``max_turns``).

**Options.** ``split``, ``max_turns`` (50), ``reward_weights``, ``pairing`` ("scripted" or
"self"), ``rounds`` (10), ``first_to`` (4), ``hard_frac`` (0.3: share of first-to-K
five-move matches in ``train``), ``styles`` (None: scripted opponents come from the split's
styles; a list of names draws them from those instead, e.g. ``["uniform"]``, a probe style),
``history`` (0: rounds listed in each observation, up to 20).

**Splits.** ``train``: training styles; three moves and ``rounds`` rounds, or (``hard_frac``
of episodes) the hard variant. ``basic``: training styles, three moves, ``rounds`` rounds.
``heldout``: only the held-out styles, three moves, ``rounds`` rounds. ``hard``: training
styles, five moves (rock paper scissors spock lizard), first to ``first_to`` within
``rounds``. Evaluation seeds: ``RepeatedGameEnv.eval_seeds(split, n)``.

**Capabilities.** ``opponent_styles()``: the training and held-out style names; ``scripted_action(agent, style)``:
the move any style (or ``"expert"``) plays in ``agent``'s seat, one instance per seat and episode
drawn from the episode seed, so a scripted opponent can stand in for an agent in self pairing;
``action_classes()``: the five move names (``action_class`` reads the move of a well-formed
action, whether or not this match uses five moves); ``opponent_slots(agent)``: the one side it plays, ``("opponent",)``
for a scripted opponent or the other agent's id in self pairing, whose move of the last round
``opponent_actions`` gives (``None`` for a forfeit); ``episode_stats(agent)``: rounds won, lost
and drawn so far, and once the match is over ``match_won/<style>`` (1 won, 0 not; ``agent`` for a
learning opponent): averaged, the win rate against each style. ``turn_budget_visible`` is False: the match length is shown (the match's own end is a
``success``/``failure``), ``max_turns`` is not: set below the match length it is an outside cut the
agent cannot see coming, which the learner bootstraps from the value.

**Expert.** Over 200 evaluation seeds x 2 agents (scripted pairing, default options) the
expert wins 0.92 of matches in ``basic``, 0.96 in ``hard`` and 0.90 in ``heldout`` (tests hold
it to 0.9, 0.9 and 0.85); every deterministic training style but pattern5 is beaten in every
ten-round match, the noisy one in about 0.9, pattern5 (whose period takes half the match to
see) in about 0.2 with three moves; of the held-out styles copy_lag2 and beat_least_frequent
in every match, pattern in about 0.95 and pattern4 in about 0.65. In 20-round matches it beats
every deterministic style in every match. Expert against expert (self pairing) draws every three-move match.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scenarios.base import OpponentStyles, ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar, Slot
from scenarios.json_action import read_json_object
from scenarios.repeated_game.expert import expert_move
from scenarios.repeated_game.styles import (
    HELDOUT_STYLES,
    MOVES3,
    MOVES5,
    STYLES,
    TRAIN_STYLES,
    Style,
    make_style,
    outcome,
)

SPLITS = ("train", "basic", "heldout", "hard")
_SPLIT_CODE = {s: i for i, s in enumerate(SPLITS)}
_RESULT = {1: "won", -1: "lost", 0: "drew"}
_RULE = {MOVES3: "each beats the one before it (rock beats scissors)",
         MOVES5: "each beats the one before it and the one two after it, cyclically"}


@dataclass(frozen=True)
class RepeatedGameOptions(ScenarioOptions):
    """Options of ``repeated_game`` (on top of split, max_turns, reward_weights)."""

    max_turns: int = 50
    """Actions an agent may take before truncation (reason ``max_turns``); one action plays one round."""
    pairing: str = "scripted"
    """"scripted": every agent plays its own scripted opponent; "self": agent_0 vs agent_1, agent_2 vs agent_3, ..."""
    rounds: int = 10
    """Rounds of a match (the most a first-to-K match can last)."""
    first_to: int = 4
    """In the hard variant a match also ends as soon as one side has this many round wins (never if above rounds)."""
    hard_frac: float = 0.3
    """Share of ``train`` episodes drawn as the hard variant (five moves, first to ``first_to``)."""
    styles: tuple[str, ...] | None = None
    """Scripted opponents drawn from these styles instead of the split's (measuring a policy against one style)."""
    history: int = 0
    """Each round's observation also lists both sides' moves of the last this many rounds (0: only the last round)."""

    def __post_init__(self) -> None:
        if self.pairing not in ("scripted", "self"):
            raise ValueError(f'pairing must be "scripted" or "self", got {self.pairing!r}')
        r = self.rounds
        if isinstance(r, bool) or not isinstance(r, int) or not 1 <= r <= 50:
            raise ValueError(f"rounds must be an int in [1, 50], got {r!r}")
        k = self.first_to
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"first_to must be an int >= 1, got {k!r}")
        f = self.hard_frac
        if isinstance(f, bool) or not isinstance(f, int | float) or not 0 <= f <= 1:
            raise ValueError(f"hard_frac must be a number in [0, 1], got {f!r}")
        h = self.history
        if isinstance(h, bool) or not isinstance(h, int) or not 0 <= h <= 20:
            raise ValueError(f"history must be an int in [0, 20] (rounds listed in each observation), got {h!r}")
        if self.styles is not None:
            names = tuple(self.styles) if isinstance(self.styles, list | tuple) else ()
            unknown = [n for n in names if n not in STYLES]
            if not names or unknown:
                raise ValueError(f"styles must be a non-empty list of style names from {sorted(STYLES)}, "
                                 f"got {self.styles!r}")
            object.__setattr__(self, "styles", names)


@dataclass
class _Side:
    """One agent's match."""

    opponent: str | None  # the other agent's id in self pairing, else None
    style: Style | None  # the scripted opponent, else None
    history: list[tuple[str, str]] = field(default_factory=list)  # (own, opponent) rounds with two valid moves
    last_opponent: str | None = None  # the opponent's move in the last round (None: no valid move)
    score: list[int] = field(default_factory=lambda: [0, 0, 0])  # wins, losses, draws
    rounds: int = 0
    opening: str = "rock"  # the expert's first move

    @property
    def style_name(self) -> str:
        return self.style.name if self.style is not None else "agent"


def parse_move(action: object, moves: tuple[str, ...], max_chars: int) -> tuple[str | None, str | None]:
    """Return ``(move, None)`` for a well-formed action, else ``(None, reason)``; never raises."""
    fmt = '{"move": "<move>"}'
    obj, reason = read_json_object(action, max_chars, fmt)
    if obj is None:
        return None, reason
    if set(obj) != {"move"}:
        return None, f"wrong keys {[str(k)[:20] for k in sorted(obj)][:4]}; use exactly {fmt}"
    move = obj["move"]
    if not isinstance(move, str) or move not in moves:
        return None, f"unknown move {str(move)[:40]!r}; moves: {' '.join(moves)}"
    return move, None


def _recent(rounds: list[tuple[str, str]]) -> str:
    """Both sides' moves of ``rounds``, oldest first, one list per side (a side's lag-k move sits k from its end)."""
    return f"\nrecent opp: {' '.join(b for _, b in rounds)}; you: {' '.join(a for a, _ in rounds)}"


class RepeatedGameEnv(TextScenario):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "name": "repeated_game", "is_parallelizable": True}
    description = "Win a repeated rock-paper-scissors match against scripted styles or another agent."
    kind = "competitive"
    agent_range = (2, 16)
    splits = SPLITS
    options_cls = RepeatedGameOptions
    default_reward_weights = {"round": 0.1, "match": 1.0, "format": 0.2}
    turn_budget_visible = False  # the match length is shown; max_turns is not

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        self._sides: dict[str, _Side] = {}
        self._moves: tuple[str, ...] = MOVES3
        self._first_to: int | None = None
        self._seated: dict[tuple[str, str], Style] = {}  # styles standing in for agents (scripted_action)

    # ----- hooks -----
    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        code = _SPLIT_CODE[split]
        hard = split == "hard" or (split == "train" and np.random.default_rng([episode_seed, code]).random()
                                   < self.opts.hard_frac)
        self._moves = MOVES5 if hard else MOVES3
        self._first_to = self.opts.first_to if hard else None
        pool = self.opts.styles or (HELDOUT_STYLES if split == "heldout" else TRAIN_STYLES)
        n = len(self.possible_agents)
        paired = n - n % 2 if self.opts.pairing == "self" else 0
        self._sides = {}
        self._seated = {}
        for i, agent in enumerate(self.possible_agents):
            rng = np.random.default_rng([episode_seed, i, code, 1])
            opening = self._moves[int(rng.integers(len(self._moves)))]
            if i < paired:
                side = _Side(opponent=self.possible_agents[i ^ 1], style=None, opening=opening)
            else:
                style = make_style(pool[int(rng.integers(len(pool)))], rng, self._moves)
                side = _Side(opponent=None, style=style, opening=opening)
            self._sides[agent] = side
        return {a: self._intro(a) for a in self.possible_agents}

    def _intro(self, agent: str) -> str:
        side, r = self._sides[agent], self.opts.rounds
        who = side.opponent or "a hidden opponent"
        goal = f"first to {self._first_to} rounds won, at most {r} rounds," if self._first_to else \
            f"{r} rounds; most rounds won"
        return (f"you are {agent} vs {who}. {goal} takes the match. "
                f"moves: {' '.join(self._moves)}; {_RULE[self._moves]}.")

    def _step_agents(self, actions: dict[str, Any]) -> dict[str, StepOutcome]:
        parsed = {a: parse_move(act, self._moves, self.max_action_length) for a, act in actions.items()}
        outcomes = {}
        for agent in actions:
            side = self._sides[agent]
            mine, reason = parsed[agent]
            if side.style is not None:
                # The style sees the history from its own side: (its move, the agent's move).
                theirs: str | None = side.style.act([(b, a) for a, b in side.history])
            else:
                theirs = parsed.get(side.opponent, (None, None))[0]
            outcomes[agent] = self._play_round(side, mine, theirs, reason)
        return outcomes

    def _play_round(self, side: _Side, mine: str | None, theirs: str | None, reason: str | None) -> StepOutcome:
        res = outcome(mine, theirs, self._moves)
        side.score[{1: 0, -1: 1, 0: 2}[res]] += 1
        side.rounds += 1
        side.last_opponent = theirs
        if mine is not None and theirs is not None:
            side.history.append((mine, theirs))
        wins, losses, _ = side.score
        opp = theirs or "none"
        if reason is None:
            text = f"round {side.rounds}: you {mine}, opp {opp}: {_RESULT[res]}. score {wins}-{losses}"
        else:
            text = f"error: {reason}; round {side.rounds} forfeited (opp {opp}). score {wins}-{losses}"
        if self.opts.history and side.history:
            text += _recent(side.history[-self.opts.history:])
        components = {"round": float(res), "format": -1.0 if reason is not None else 0.0}
        if not self._match_over(side):
            return StepOutcome(text, components, invalid=reason is not None)
        match = (wins > losses) - (wins < losses)
        components["match"] = float(match)
        verdict = {1: "you won", -1: "you lost", 0: "you drew"}[match]
        return StepOutcome(f"{text}\nmatch over: {verdict} {wins}-{losses}", components,
                           invalid=reason is not None, end="success" if match > 0 else "failure")

    def _agent_state(self, agent: str) -> str:
        side = self._sides.get(agent)
        if side is None:
            return ""
        wins, losses, draws = side.score
        last = "/".join(side.history[-1]) if side.history else "-"
        opp = side.opponent or "scripted"
        return (f"opponent={opp} style={side.style_name} round={side.rounds}/{self.opts.rounds} "
                f"score={wins}-{losses}-{draws} last={last}")

    def state(self) -> str:
        game = f"game: moves={len(self._moves)} rounds={self.opts.rounds} first_to={self._first_to or '-'} " \
               f"pairing={self.opts.pairing}"
        return self._clean(f"{super().state()}\n{game}", self.state_space.max_length)

    # ----- infos: the opponent's identity, for opponent modeling (never observed) -----
    def _side_info(self, agent: str) -> dict[str, str]:
        side = self._sides[agent]
        return {"opponent_style": side.style_name, "opponent": side.opponent or "scripted"}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = super().reset(seed=seed, options=options)
        for agent, info in infos.items():
            info.update(self._side_info(agent))
        return obs, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        out = super().step(actions)
        for agent, info in out[4].items():
            info.update(self._side_info(agent))
        return out

    # ----- scenario extras -----
    def opponent_style(self, agent: str) -> Style | None:
        """The scripted opponent of ``agent`` (``None`` when it plays another agent)."""
        return self._sides[agent].style

    def style_action(self, agent: str, style: Style) -> str:
        """The action ``style`` would play in ``agent``'s seat now: any style can stand in for an agent.

        E.g. in ``pairing="self"`` a learning agent can face ``make_style("pattern", rng)`` seated as
        its opponent, with the same history the scenario keeps for that seat.
        """
        return json.dumps({"move": style.act(self._sides[agent].history)})

    def scripted_action(self, agent: str, style: str) -> str:
        if style == "expert":
            return self.expert_action(agent)
        if style not in STYLES:
            raise ValueError(f"repeated_game has no style {style!r}; styles: expert, {', '.join(sorted(STYLES))}")
        key = (agent, style)
        if key not in self._seated:  # one instance per seat and episode, drawn from the episode seed
            rng = np.random.default_rng([self.episode_seed or 0, self.possible_agents.index(agent), 2,
                                         sorted(STYLES).index(style)])
            self._seated[key] = make_style(style, rng, self._moves)
        return self.style_action(agent, self._seated[key])

    def opponent_styles(self) -> OpponentStyles:
        return OpponentStyles(train=TRAIN_STYLES, held_out=HELDOUT_STYLES)

    def action_classes(self) -> tuple[str, ...]:
        return MOVES5

    def opponent_slots(self, agent: str) -> tuple[str, ...]:
        i, n = self.possible_agents.index(agent), len(self.possible_agents)
        paired = self.opts.pairing == "self" and i < n - n % 2
        return (self.possible_agents[i ^ 1],) if paired else ("opponent",)

    def opponent_actions(self, agent: str) -> dict[str, str | None]:
        side = self._sides.get(agent)
        return {self.opponent_slots(agent)[0]: side.last_opponent if side is not None else None}

    def action_class(self, agent: str, action: object) -> str | None:
        return parse_move(action, MOVES5, self.max_action_length)[0]

    def opponent_actions_revealed(self) -> bool:
        return True  # each round's result names the opponent's move

    def episode_stats(self, agent: str) -> dict[str, float]:
        side = self._sides.get(agent)
        if side is None:
            return {}
        wins, losses, draws = side.score
        stats = {"rounds_won": float(wins), "rounds_lost": float(losses), "rounds_drawn": float(draws)}
        if self._match_over(side):  # averaged over the matches against each style: the win rate against it
            stats[f"match_won/{side.style_name}"] = float(wins > losses)
        return stats

    def _match_over(self, side: _Side) -> bool:
        k = self._first_to
        return side.rounds >= self.opts.rounds or (k is not None and max(side.score[:2]) >= k)

    def entity_vocabulary(self) -> list[str]:
        ids = [f"agent_{i}" for i in range(self.agent_range[1])]
        return sorted({*MOVES5, *_RESULT.values(), *ids})

    def expert_action(self, agent: str) -> str:
        side = self._sides[agent]
        return json.dumps({"move": expert_move(side.history, self._moves, side.opening)})

    def action_grammar(self, agent: str) -> ActionGrammar:
        if agent not in self.agents:
            return ActionGrammar(())
        return ActionGrammar((('{"move": "', Slot("move", self._moves), '"}'),))
