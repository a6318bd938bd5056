"""Information split (``info_split``): a team solves ONE tool-use task whose facts and tools are dealt among its agents.

**Agents.** ``agent_0`` .. ``agent_{n-1}``, n in [2, 16], cooperative. Each episode draws one
team task (a question over the mock tool-use world: weather, flights, booking, currency,
calendar; ``tasks.py``). Its *pieces* (the facts the question leaves out, like the event or
the payment currency, and the tools of its solution path) are dealt round-robin in a seeded
order, so every agent lacks at least one piece and no agent can finish alone. With fewer
agents than pieces some hold several; extra agents hold only a distractor tool (``helper``),
so N grows to 8 on the same tasks; in ``hard`` every agent also lists a distractor
(``roles.py``).

**Observations.** ``{"text": str}``, printable ASCII, at most 2048 characters, this turn's new
message only. Turn 1: ``you are agent_2 (calendar)``, ``team task: <question>``, ``you know:
event Gala`` (or ``nothing``) and ``tools: get_event(name); post(value); read_board()``. Later
turns: the agent's own tool result (``event Gala: Paris Tue``; results reach only the caller),
``posted Paris`` (or ``Paris is already on the board``), ``board: Paris Tue`` (the board's
last 16 entries, or ``empty``), an answer verdict, ``error: <reason>`` after a malformed
action. The turn budget is not shown (it is in ``state()``).

**Actions.** One JSON object as text: ``{"tool": "get_event", "args": {"name": "Gala"}}``,
``{"tool": "post", "args": {"value": "Paris"}}``, ``{"tool": "read_board", "args": {}}`` or
``{"answer": "21C"}``; any JSON with the same content is accepted. Values are entities of the
tool-use vocabulary. Malformed actions (not JSON, not an object, wrong or extra keys, a tool
the agent does not hold, missing / extra / non-string / unknown values, a repeat of the
agent's own successful call, a non-string answer, non-ASCII, over 512 characters) use up the
turn and return ``error:``. ``action_grammar(agent)`` lists the valid actions now: tool
arguments and posts among entities the agent has seen (question, facts, own results, board
reads), answers among seen entities of the answer kind. ``expert_action(agent)`` is the
scripted team protocol: answer once the answer was seen; else post an entity that a live
teammate's pending solution call needs and that teammate has not seen; else make one's next
solution call; else read the board. It solves every task at every team size.

**The board, and why it costs turns.** A tool result is seen only by its caller
(decentralized execution). Passing values on is the job of the comms layer (a later wrapper
that shares observations and messages over a graph); so that this scenario is solvable
without it, the environment offers a team board as two tools: shared state, like a shared
document, not a channel. Posts made in a turn are readable from the next turn. Every
hand-off thus costs the holder a turn per entity and the receiver a read turn. Each
episode's turn budget is the expert's board protocol length for this task and team plus
``turn_slack``, capped by ``max_turns``: a team that round-trips through the board keeps
just that slack for mistakes, while a team whose observations are shared by comms skips
posts and reads (``event_booking`` with its pieces on 4+ agents: 11 turns down to 4) and
keeps the difference as extra slack, so it succeeds more often under the same budget (a
test measures it with 30% wasted turns: about 0.5 success through the board, 1.0 shared).
The comms layer reports what an agent saw elsewhere with ``note_seen(agent, text)`` so that
its grammar admits those entities.

**Rewards.** Layers in ``infos[agent]["reward_components"]``: ``format`` (-1 malformed, else
0), ``contribution`` (1/L for each step of the solution path this agent did first: a solution
call not yet made by the team, or a post of an entity the board protocol needs that is not on
the board yet; L counts those steps, so a team's contributions sum to at most 1), ``task`` (1
to every live agent when any agent answers correctly). The reward is the weighted sum with
weights ``format`` 0.2, ``contribution`` w, ``task`` 1-w, where w is option
``individual_weight`` (0.25); a ``reward_weights`` entry multiplies its layer on top. The
incentives stay aligned: contribution pays only for steps that advance the team's solution,
once per step (to the first agent to do it), and a whole team's contributions sum to at most
1, one success's worth. So no agent gains by useless work or by hoarding a piece (holding back
a post forfeits its credit and delays the shared success), and with w < 0.5 the shared
success dominates; yet each agent gets a direct signal for its own part, which a shared
reward alone blurs more as N grows.

**Ending.** A correct answer by any agent ends every live agent's episode with ``success``.
A wrong answer ends only the answering agent's episode with ``failure`` (it leaves
``agents``; the team plays on, and may be unable to finish without its pieces). Running out
of the episode's budget is a truncation with reason ``max_turns``. A tool backend that raises
or is slower than ``tool_timeout_s`` ends the caller's episode with ``error`` / ``timeout``.

**Options.** ``split``, ``max_turns`` (cap, 16), ``turn_slack`` (2), ``individual_weight``
(0.25), ``reward_weights``, ``train_mix`` (weights of basic/hard in train, (0.5, 0.5)),
``tool_timeout_s`` (5.0), ``expert_skips_conversion`` (0.0: the share of episodes in which the expert
answers an amount unconverted where the team's next call is ``convert``; a flawed demonstrator).

**Splits.** ``train`` (mixture), ``basic`` (one hand-off stage), ``hard`` (two or three
dependent stages, distractor tools); see ``tasks.py``. Evaluation seeds:
``InfoSplitEnv.eval_seeds(split, n)``.

**Capabilities.** ``note_seen`` and ``shared_view`` (above), ``expert_turn`` (the talking
expert), ``action_classes()``: every world tool, ``post``, ``read_board`` and ``answer``;
``episode_stats(agent)``: ``contribution`` (its credit so far), ``calls`` (its successful
world-tool calls) and ``success/<family>`` (1 when its episode ended in the team's success;
averaged, the family's success rate). ``turn_budget_visible`` is True: every observation ends
with ``turn k of K`` with the episode's budget K, so running out of it is an outcome of the task
(terminal).
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scenarios.base import StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar
from scenarios.info_split.actions import (
    BOARD_TOOLS,
    READ_BOARD,
    build_grammar,
    parse_action,
    post_action,
    signature,
    tool_schema,
)
from scenarios.info_split.options import InfoSplitOptions
from scenarios.info_split.roles import Role, deal_roles
from scenarios.info_split.tasks import SPLIT_CODE, SPLITS, TeamTask, generate_task
from scenarios.json_action import tool_action_class, tool_action_summary
from scenarios.tool_use.tasks import Call, skipped_conversion
from scenarios.tool_use.tools import TOOLS, call_tool
from scenarios.tool_use.world import KIND_OF, entity_vocabulary

_SELF_LINES = ("you are ", "tools: ")
_NO_NEWS = frozenset({"you know: nothing", "board: empty"})

_WORD = re.compile(r"[A-Za-z0-9]+")
BOARD_SHOWN = 16
_PLAN_TURNS = 64  # the expert needs at most 11 turns; this only bounds a broken plan


@dataclass
class _Member:
    role: Role
    seen: set[str] = field(default_factory=set)  # entities this agent has seen (its grammar's values)
    done: list[Call] = field(default_factory=list)  # its own successful calls, in order
    credit: float = 0.0  # contribution earned so far
    solved: bool = False  # its episode ended in the team's success

    def see(self, text: str) -> None:
        self.seen.update(w for w in _WORD.findall(text) if w in KIND_OF)


class InfoSplitEnv(TextScenario):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "name": "info_split", "is_parallelizable": True}
    description = "A team answers one tool-use question whose facts and tools are split among its agents."
    kind = "cooperative"
    agent_range = (2, 16)
    splits = SPLITS
    options_cls = InfoSplitOptions
    default_reward_weights = {"format": 0.2, "contribution": 1.0, "task": 1.0}
    turn_budget_visible = True  # "turn k of K" with the episode's own budget ends each observation

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        w = self.opts.individual_weight
        self.reward_weights = {**self.reward_weights, "task": (1 - w) * self.reward_weights["task"],
                               "contribution": w * self.reward_weights["contribution"]}
        self._task: TeamTask | None = None
        self._expert_skips = False  # this episode's expert answers unconverted (option expert_skips_conversion)
        self._members: dict[str, _Member] = {}
        self._board: list[str] = []
        self._team_done: list[Call] = []
        self._needed: frozenset[str] = frozenset()  # the posts the expert's board protocol makes
        self._steps = 1  # L: solution calls + needed posts
        self._budget = self.opts.max_turns
        self._plan_turns = 0

    # ----- hooks -----
    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        task = generate_task(split, episode_seed, self.opts.train_mix)
        n = len(self.possible_agents)
        roles = deal_roles(task, n, np.random.default_rng([episode_seed, SPLIT_CODE[split], n, 1]))
        self._task, self._board, self._team_done = task, [], []
        self._members = {a: _Member(r) for a, r in zip(self.possible_agents, roles, strict=True)}
        share = self.opts.expert_skips_conversion
        draw = np.random.default_rng([episode_seed, SPLIT_CODE[split], n, 2]).random() if share > 0 else 1.0
        self._expert_skips = bool(draw < share)
        texts = {}
        for agent, m in self._members.items():
            facts = ", ".join(f"{label} {e}" for label, e in m.role.facts) or "nothing"
            tools = "; ".join(signature(t) for t in (*m.role.tools, *BOARD_TOOLS))
            texts[agent] = f"you are {agent} ({m.role.label})\nteam task: {task.text}\nyou know: {facts}\ntools: {tools}"
            m.see(texts[agent])
        self._plan()
        return texts

    def _plan(self) -> None:
        """Play the expert's board protocol on a copy: its length sets the budget, its posts the needed ones."""
        self._needed, self._steps, self._budget = frozenset(), 1, _PLAN_TURNS
        # The world, spaces and generator are only read by the expert's play: share them (copying them
        # would cost most of a reset).
        shared = (self._task.world, self._obs_space, self._act_space, self.state_space, self._rng)
        sim = copy.deepcopy(self, memo={id(x): x for x in shared})
        sim.opts = dataclasses.replace(self.opts, max_turns=_PLAN_TURNS)
        sim._expert_skips = False  # the budget is the right protocol's, flawed demonstrator or not
        turns = 0
        while sim.agents and turns < _PLAN_TURNS:
            turns += 1
            sim.step({a: sim.expert_action(a) for a in sim.agents})
        self._plan_turns = turns
        self._needed = frozenset(sim._board)
        self._steps = len(self._task.solution) + len(self._needed)
        self._budget = min(self.opts.max_turns, turns + self.opts.turn_slack)

    def _turn_budget(self, agent: str) -> int:
        return self._budget

    def _step_agents(self, actions: dict[str, Any]) -> dict[str, StepOutcome]:
        # Simultaneous moves: reads see the board as it was when the turn began, posts land after it.
        board, done_before = tuple(self._board), set(self._team_done)
        posts: list[str] = []
        calls: list[Call] = []
        solvers: list[str] = []
        outcomes = {a: self._act(a, act, board, done_before, posts, calls, solvers) for a, act in actions.items()}
        self._board += [e for e in dict.fromkeys(posts) if e not in self._board]
        self._team_done += [c for c in dict.fromkeys(calls) if c not in self._team_done]
        for agent, out in outcomes.items():
            if solvers and out.end is None:
                out.text += f"\n{solvers[0]} answered correctly: team task solved"
                out.components["task"] = 1.0
                out.end = "success"
            elif out.end is None and self._turns[agent] >= self._budget:
                out.text += "\nout of turns: episode over"
                out.end = "max_turns"
            self._members[agent].solved = out.end == "success"
        return outcomes

    def _act(self, agent: str, action: Any, board: tuple[str, ...], done_before: set[Call],
             posts: list[str], calls: list[Call], solvers: list[str]) -> StepOutcome:
        m, task = self._members[agent], self._task
        parsed, reason = parse_action(action, m.role.tools, m.done, self.max_action_length)
        if parsed is None:
            return StepOutcome(f"error: {reason}", {"format": -1.0}, invalid=True)
        if parsed.answer is not None:
            if parsed.answer == task.answer:
                solvers.append(agent)
                return StepOutcome("answer received: correct; team task solved", {"task": 1.0}, end="success")
            return StepOutcome("answer received: wrong; your episode is over", end="failure")
        if parsed.read:
            shown = board[-BOARD_SHOWN:]
            m.see(" ".join(shown))
            return StepOutcome("board: " + (" ".join(shown) or "empty"))
        share = 1.0 / self._steps
        if parsed.post is not None:
            value = parsed.post
            if value in board:
                return StepOutcome(f"{value} is already on the board")
            posts.append(value)
            credit = share if value in self._needed else 0.0
            m.credit += credit
            return StepOutcome(f"posted {value}", {"contribution": credit})
        call = parsed.call
        result = call_tool(task.world, call.tool, dict(call.args), self.opts.tool_timeout_s)
        if result.fault is not None:
            return StepOutcome(result.text, end=result.fault)
        credit = 0.0
        if not result.transient:
            credit = share if call in task.solution and call not in done_before else 0.0
            m.done.append(call)
            m.see(result.text)
            calls.append(call)
            m.credit += credit
        return StepOutcome(result.text, {"contribution": credit})

    def _agent_state(self, agent: str) -> str:
        m = self._members.get(agent)
        if m is None:
            return ""
        facts = ",".join(e for _, e in m.role.facts) or "-"
        return (f"role={m.role.label} facts={facts} tools={','.join(m.role.tools)} "
                f"calls={len(m.done)} seen={len(m.seen)} credit={m.credit:.2f}")

    def state(self) -> str:
        text = super().state()
        t = self._task
        if t is None:
            return text
        done = sum(c in self._team_done for c in t.solution)
        board = " ".join(self._board[-BOARD_SHOWN:]) or "-"
        team = (f"team: family={t.family} group={t.group} solution={done}/{len(t.solution)} "
                f"needed_posts={len(self._needed)} budget={self._budget} board={board}")
        return self._clean(f"{text}\n{team}", self.state_space.max_length)

    # ----- scenario extras -----
    def entity_vocabulary(self) -> list[str]:
        return entity_vocabulary()

    def tool_schemas(self, agent: str) -> list[dict]:
        """JSON-schema declarations of the tools listed to ``agent`` (for real chat templates)."""
        return [tool_schema(t) for t in (*self._members[agent].role.tools, *BOARD_TOOLS)]

    def note_seen(self, agent: str, text: str) -> None:
        """Record that ``agent`` saw ``text`` outside its own observations (comms: shared observations,
        messages), so its grammar admits the entities in it."""
        if agent in self._members:
            self._members[agent].see(text)

    def action_summary(self, agent: str, action: object) -> str:
        return tool_action_summary(action)

    def action_classes(self) -> tuple[str, ...]:
        return (*TOOLS, *BOARD_TOOLS, "answer")

    def action_class(self, agent: str, action: object) -> str | None:
        return tool_action_class(action, (*TOOLS, *BOARD_TOOLS), self.max_action_length)

    def episode_stats(self, agent: str) -> dict[str, float]:
        m = self._members.get(agent)
        if m is None:
            return {}
        return {"contribution": m.credit, "calls": float(len(m.done)), f"success/{self._task.family}": float(m.solved)}

    def shared_view(self, agent: str, text: str) -> str:
        """The facts and results in ``text``: without the agent's role and tool list (what it *is*,
        which no teammate acts on) and without ``you know: nothing`` / ``board: empty`` (no news)."""
        kept = [line for line in text.splitlines()
                if not line.startswith(_SELF_LINES) and line.strip() not in _NO_NEWS]
        return "\n".join(kept)

    def expert_action(self, agent: str) -> str:
        return self.expert_turn(agent)[0]

    def expert_turn(self, agent: str, audience: Collection[str] = ()) -> tuple[str, str | None]:
        """The scripted protocol's action for ``agent`` and, when teammates in ``audience`` will hear a
        message from it this turn (comms message mode), the value to say to them.

        A value a waiting teammate lacks is said when that teammate hears the agent (free: it rides
        on the turn's action) and posted on the board otherwise (a turn). One message a turn: the
        first such value in solution order; the others follow on later turns.
        """
        m, task = self._members.get(agent), self._task
        if m is None or agent not in self.agents:
            return READ_BOARD, None
        if task.answer in m.seen:
            return json.dumps({"answer": task.answer}), None
        pending = [c for c in task.solution if c not in self._team_done]
        amount = skipped_conversion(pending[0] if pending else None) if self._expert_skips else None
        if amount is not None and amount in m.seen:
            return json.dumps({"answer": amount}), None
        hear = {b for b in audience if b != agent}
        # Privileged on purpose: it knows what teammates have seen, so it passes on only what is
        # missing (and, under comms' note_seen, nothing a teammate already saw or heard).
        lacking = []  # (value, agents that need it and have not seen it)
        for call in pending:
            waiting = [b for b in self.agents if b != agent and call.tool in self._members[b].role.tools]
            for _, value in call.args:
                if value in m.seen and value not in self._board:
                    lacking.append((value, [b for b in waiting if value not in self._members[b].seen]))
        message = next((v for v, who in lacking if any(b in hear for b in who)), None)
        for value, who in lacking:
            if any(b not in hear for b in who):
                return post_action(value), message
        for call in pending:
            if call.tool in m.role.tools and call not in m.done and all(v in m.seen for _, v in call.args):
                return call.json(), message
        return READ_BOARD, message

    def action_grammar(self, agent: str) -> ActionGrammar:
        m = self._members.get(agent)
        if m is None or agent not in self.agents:
            return ActionGrammar(())
        return build_grammar(m.role.tools, m.seen, m.done, self._task.answer_kind)
