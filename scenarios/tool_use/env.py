"""Tool use (``tool_use``): each agent solves its own question by calling mock tools, then answers.

**Agents.** ``agent_0`` .. ``agent_{n-1}``, n in [1, 16]. Every agent gets its own independent
task drawn from the episode seed; agents finish at different times and then leave ``agents``.
With one agent this is plain single-agent tool calling.

**Observations.** ``{"text": str}``, printable ASCII, at most 2048 characters, the new message
of this turn only. Turn 1: ``task: ...``, the compact tool list (``tools: get_weather(city,
day); ...``, ``?`` marks an optional argument). The two action formats are stated in every
``error:`` observation rather than in every first message. Later turns: the
tool result (``weather Paris Tue: sunny 21C``), ``tool failed: ... retry the same call``
(adversarial), or ``error: <reason>`` after a malformed action.

**Actions.** One JSON object as text: ``{"tool": "get_weather", "args": {"city": "Paris",
"day": "Tue"}}`` or ``{"answer": "21C"}``; any JSON with the same content is accepted.
Argument values are entities (cities, days, slots, flight ids, money amounts, currencies,
events). Malformed actions (not JSON, not an object, wrong keys, unlisted tool, missing /
extra / non-string / unknown argument values, an exact repeat of an earlier successful call,
a non-string answer, non-ASCII, over 512 characters) use up the turn and return ``error:``.
``action_grammar(agent)`` lists the valid actions now, with argument values restricted to
entities the agent has seen and answers to seen entities of the task's answer type;
``expert_action(agent)`` is the scripted expert's next action (it solves every task, unless
option ``expert_skips_conversion`` makes it a flawed demonstrator).

**Rewards.** Layers in ``infos[agent]["reward_components"]``: ``format`` (-1 malformed, else 0),
``tool_choice`` (1 when the called tool is the next useful one on the solution path),
``arguments`` (1 when the whole call is that next useful call), ``task`` (1 for the right final
answer). The reward is their weighted sum; weights: option ``reward_weights`` (defaults
format 0.2, tool_choice 0.1, arguments 0.1, task 1.0).

**Ending.** An answer ends the agent's episode: ``success`` if it is the correct entity, else
``failure`` (terminations). Running out of ``max_turns`` is a truncation with reason
``max_turns``. A tool backend that raises ends it with ``error``; one slower than
``tool_timeout_s`` with ``timeout`` (harness faults: all reward layers are 0).

**Options.** ``split``, ``max_turns`` (8), ``reward_weights``, ``tool_timeout_s`` (5.0),
``train_mix`` (weights of basic/hard/adversarial in the train split, (0.5, 0.3, 0.2)),
``expert_skips_conversion`` (0.0: the share of tasks on which the expert answers an amount unconverted
where it should call ``convert``; demonstrations with a systematic flaw that imitation copies and the
reward does not).

**Splits.** ``train`` (mixture), ``basic``, ``hard``, ``adversarial``; see ``tasks.py``.
Evaluation seeds: ``ToolUseEnv.eval_seeds(split, n)``.

**Capabilities.** ``action_classes()``: every tool name and ``answer`` (``action_class`` reads
them from the text, listed to the agent or not); ``episode_stats(agent)``: ``calls`` (successful
tool calls), ``progress`` (share of the solution path done) and ``success/<family>`` (1 when the
task, of that family, was answered right: averaged, the family's success rate). ``turn_budget_visible`` is
True: every observation ends with ``turn k of K`` (``K`` = ``max_turns``), so running out is terminal.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from scenarios.base import ScenarioOptions, StepOutcome, TextScenario
from scenarios.grammar import ActionGrammar, Part, Slot
from scenarios.json_action import tool_action_class, tool_action_summary
from scenarios.tool_use.actions import call_templates, parse_action
from scenarios.tool_use.tasks import SPLITS, Call, Task, generate_task, skipped_conversion
from scenarios.tool_use.tools import TOOLS, call_tool
from scenarios.tool_use.world import KIND_OF, entity_vocabulary

_WORD = re.compile(r"[A-Za-z0-9]+")
_ORDER = {e: i for i, e in enumerate(entity_vocabulary())}


@dataclass(frozen=True)
class ToolUseOptions(ScenarioOptions):
    """Options of ``tool_use`` (on top of split, max_turns, reward_weights)."""

    tool_timeout_s: float = 5.0
    """A tool call slower than this ends the agent's episode with reason ``timeout``."""
    train_mix: tuple[float, float, float] = (0.5, 0.3, 0.2)
    """Weights of the basic, hard and adversarial groups in the ``train`` split."""
    expert_skips_conversion: float = 0.0
    """Share of tasks (drawn per agent and episode seed, apart from the task) on which the scripted expert
    never converts: where its next call would be ``convert`` it answers the unconverted amount instead."""

    def __post_init__(self) -> None:
        t = self.tool_timeout_s
        if isinstance(t, bool) or not isinstance(t, int | float) or not t > 0:
            raise ValueError(f"tool_timeout_s must be a positive number of seconds, got {t!r}")
        mix = tuple(self.train_mix) if isinstance(self.train_mix, list | tuple) else ()
        if len(mix) != 3 or any(isinstance(m, bool) or not isinstance(m, int | float) or m < 0 for m in mix) \
                or sum(mix) <= 0:
            raise ValueError(f"train_mix must be 3 non-negative weights (basic, hard, adversarial) "
                             f"with a positive sum, got {self.train_mix!r}")
        object.__setattr__(self, "train_mix", tuple(float(m) for m in mix))
        skip = self.expert_skips_conversion
        if isinstance(skip, bool) or not isinstance(skip, int | float) or not 0 <= skip <= 1:
            raise ValueError(f"expert_skips_conversion must be a share in [0, 1], got {skip!r}")


@dataclass
class _AgentTask:
    task: Task
    done: list[Call] = field(default_factory=list)  # successful calls, in order
    seen: set[str] = field(default_factory=set)  # entities shown in the task text or tool results
    solved: bool = False  # answered with the right entity
    expert_skips_conversion: bool = False  # the expert answers where its next call would be `convert`

    def next_call(self) -> Call | None:
        # The next useful call: the first solution step not yet done (steps done early are skipped).
        return next((c for c in self.task.solution if c not in self.done), None)

    def see(self, text: str) -> None:
        self.seen.update(w for w in _WORD.findall(text) if w in KIND_OF)


class ToolUseEnv(TextScenario):
    """See the module docstring."""

    metadata = {"render_modes": ["ansi"], "name": "tool_use", "is_parallelizable": True}
    description = "Answer a question by calling mock tools (weather, flights, booking, currency, calendar)."
    kind = "single"
    agent_range = (1, 16)
    splits = SPLITS
    options_cls = ToolUseOptions
    default_reward_weights = {"format": 0.2, "tool_choice": 0.1, "arguments": 0.1, "task": 1.0}
    turn_budget_visible = True  # "turn k of K" ends each observation

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        super().__init__(n_agents=n_agents, seed=seed, render_mode=render_mode, **options)
        self._tasks: dict[str, _AgentTask] = {}

    # ----- hooks -----
    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        texts = {}
        for i, agent in enumerate(self.possible_agents):
            task = generate_task(split, episode_seed, i, self.opts.train_mix)
            self._tasks[agent] = _AgentTask(task, expert_skips_conversion=self._expert_skips(episode_seed, i))
            self._tasks[agent].see(task.text)
            tools = "; ".join(TOOLS[t].signature() for t in task.tools)
            # The action formats are not repeated in every first message: they cost ~35 tokens per
            # episode (a fifth of a conversation) and every `error:` observation states them.
            texts[agent] = f"task: {task.text}\ntools: {tools}"
        return texts

    def _expert_skips(self, episode_seed: int, index: int) -> bool:
        share = self.opts.expert_skips_conversion
        # Its own stream (task streams end in a split code, 0-3), so the tasks stay those of every other run.
        return share > 0 and bool(np.random.default_rng([episode_seed, index, 99]).random() < share)

    def _step_agent(self, agent: str, action: Any) -> StepOutcome:
        st = self._tasks[agent]
        parsed, reason = parse_action(action, st.task.tools, st.done, self.max_action_length)
        if parsed is None:
            return StepOutcome(f"error: {reason}", {"format": -1.0}, invalid=True)
        if parsed.answer is not None:
            ok = parsed.answer == st.task.answer
            st.solved = ok
            return StepOutcome(f"answer received: {'correct' if ok else 'wrong'}; episode over",
                               {"task": float(ok)}, end="success" if ok else "failure")
        call, useful = parsed.call, st.next_call()
        components = {"tool_choice": float(useful is not None and call.tool == useful.tool),
                      "arguments": float(call == useful)}
        result = call_tool(st.task.world, call.tool, dict(call.args), self.opts.tool_timeout_s)
        if result.fault is not None:
            return StepOutcome(result.text, end=result.fault)
        if not result.transient:  # a failed call may be repeated; a successful one may not
            st.done.append(call)
            st.see(result.text)
        return StepOutcome(result.text, components)

    def _agent_state(self, agent: str) -> str:
        st = self._tasks.get(agent)
        if st is None:
            return ""
        t = st.task
        done = sum(c in st.done for c in t.solution)
        return f"family={t.family} group={t.split} progress={done}/{len(t.solution)} calls={len(st.done)}"

    # ----- scenario extras -----
    def entity_vocabulary(self) -> list[str]:
        return entity_vocabulary()

    def tool_schemas(self, agent: str) -> list[dict]:
        """JSON-schema declarations of the tools listed to ``agent`` (for real chat templates)."""
        return [TOOLS[t].schema() for t in self._tasks[agent].task.tools]

    def action_summary(self, agent: str, action: object) -> str:
        return tool_action_summary(action)

    def action_classes(self) -> tuple[str, ...]:
        return (*TOOLS, "answer")

    def action_class(self, agent: str, action: object) -> str | None:
        return tool_action_class(action, TOOLS, self.max_action_length)

    def episode_stats(self, agent: str) -> dict[str, float]:
        st = self._tasks.get(agent)
        if st is None:
            return {}
        done = sum(c in st.done for c in st.task.solution)
        return {"calls": float(len(st.done)), "progress": done / len(st.task.solution),
                f"success/{st.task.family}": float(st.solved)}

    def expert_action(self, agent: str) -> str:
        st = self._tasks[agent]
        nxt = st.next_call()  # a transiently failed call is not done, so the expert retries it
        amount = skipped_conversion(nxt) if st.expert_skips_conversion else None
        if amount is not None:
            return json.dumps({"answer": amount})
        return nxt.json() if nxt is not None else json.dumps({"answer": st.task.answer})

    def action_grammar(self, agent: str) -> ActionGrammar:
        st = self._tasks.get(agent)
        if st is None or agent not in self.agents:
            return ActionGrammar(())
        by_kind: dict[str, list[str]] = {}
        for e in sorted(st.seen, key=_ORDER.__getitem__):
            by_kind.setdefault(KIND_OF[e], []).append(e)
        templates: list[tuple[Part, ...]] = []
        for name in st.task.tools:
            spec = TOOLS[name]
            variants = [spec.params]
            if any(not p.required for p in spec.params):
                variants.insert(0, tuple(p for p in spec.params if p.required))
            for params in variants:
                templates.extend(call_templates(name, params, by_kind, st.done))
        answers = by_kind.get(st.task.answer_kind)
        if answers:
            templates.append(('{"answer": "', Slot("answer", tuple(answers)), '"}'))
        return ActionGrammar(tuple(templates))
