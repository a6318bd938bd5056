"""The base class of every text scenario: a PettingZoo ``ParallelEnv`` whose agents read and write text.

It owns what all text scenarios share: option validation, cached ``Text`` spaces, the agent
list (agents that finish leave ``self.agents``), turn counting and the ``max_turns``
truncation, layered and weighted rewards, ``infos`` with ``reward_components``,
``invalid_action`` and ``termination_reason``, harness-fault containment, printable and
bounded observation text, seeding, evaluation seeds, ``state()`` and ``render()``.

It also inherits, with defaults (``scenarios.capabilities``), every optional capability a scenario may
have (see ``TextScenario``: teams, opponent styles, per-episode stats, action classes, opponent slots,
turn-budget visibility, and the comms hooks), so callers call them directly and never probe attributes.

It leaves out everything about a particular task: subclasses implement ``_reset_scenario``,
``_step_agent`` (or ``_step_agents`` when agents interact), ``_agent_state``, ``action_grammar``, ``entity_vocabulary`` and
``expert_action``. It does not parse actions (a scenario's action language is its own) and
does not decide who observes what (that is ``comms/``).
"""

from __future__ import annotations

import dataclasses
import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from gymnasium.spaces import Dict, Text
from pettingzoo import ParallelEnv

from scenarios.capabilities import CAPABILITIES, Capabilities, OpponentStyles  # noqa: F401 - re-exported
from scenarios.grammar import ActionGrammar

PRINTABLE = string.printable
_PRINTABLE_SET = frozenset(PRINTABLE)
# Training draws seeds from [0, TRAIN_SEED_LIMIT); each split's evaluation seeds live in their
# own block above it, so no evaluation seed is ever a training seed and splits never share one.
TRAIN_SEED_LIMIT = 1_000_000
EVAL_SEED_BLOCK = 1_000_000

TERMINATION_REASONS = frozenset({"success", "failure", "timeout", "error"})
TRUNCATION_REASONS = frozenset({"max_turns"})
HARNESS_FAULTS = frozenset({"timeout", "error"})
_TRUNCATED_MARK = " ...[truncated]"
TURN_BUDGET_PREFIX = "turn "
"""Start of the line ``turn k of K`` that ends an observation when the scenario shows its turn budget."""
_TURN_BUDGET_LINE = re.compile(rf"\n({re.escape(TURN_BUDGET_PREFIX)}\d+ of \d+)$")


def split_turn_budget(text: str) -> tuple[str, str | None]:
    """``text`` without its closing ``turn k of K`` line, and that line (``None`` when it has none).

    The line is the agent's own: a wrapper that adds to an observation keeps it last, and it is
    never news worth sharing with teammates."""
    match = _TURN_BUDGET_LINE.search(text)
    if match is None:
        return text, None
    return text[: match.start()], match.group(1)


@dataclass(frozen=True)
class ScenarioOptions:
    """Options every text scenario accepts; subclasses extend this dataclass with their own."""

    split: str = "train"
    """Task split drawn at reset (one of the scenario's ``splits``); ``reset(options={"split": ...})`` overrides it."""
    max_turns: int = 8
    """Actions an agent may take before its episode is truncated with reason ``max_turns``."""
    reward_weights: Mapping[str, float] | None = None
    """Weights of the reward layers (keys: the scenario's ``default_reward_weights``); missing keys keep their default."""


@dataclass
class StepOutcome:
    """What a subclass reports for one agent's action."""

    text: str
    components: dict[str, float] = field(default_factory=dict)
    invalid: bool = False
    end: str | None = None  # a termination reason when the agent's episode ends here


class TextScenario(ParallelEnv, Capabilities):
    """Shared machinery of text scenarios (see the module docstring).

    Optional capabilities (``CAPABILITIES``), each declared here with a default that means "the
    scenario has none of it", so the engine and comms call them on any scenario:

    - ``team_of(agent)``: the agent's team, ``""`` without teams (predator_prey: predator / prey).
    - ``opponent_styles()``: the scripted opponent styles (``OpponentStyles``: training and
      held-out names), both empty without scripted opponents (repeated_game has them).
    - ``scripted_action(agent, style)``: the action scripted ``style`` (``"expert"`` or a name
      from ``opponent_styles()``) plays in ``agent``'s seat now, so a scripted opponent can stand
      in for an agent; only ``"expert"`` by default.
    - ``episode_stats(agent)``: figures the scenario measures over the agent's episode so far
      (finished or current), worth logging as averages; ``{}`` by default. Keys may differ
      between agents (a predator's catches, a prey's capture): average each over the
      agent-episodes that report it.
    - ``action_classes()`` / ``action_class(agent, action)``: the classes of action another
      agent could predict (a move, a bargaining verb, a tool name) and the class of one action
      text, read from the text alone (``None``: no class, malformed); ``()`` / ``None`` by default.
    - ``opponent_slots(agent)`` / ``opponent_actions(agent)``: the others whose action ``agent``
      could learn to predict (slot names, fixed for the episode: another agent's id, or
      ``"opponent"`` for a scripted opponent inside the scenario) and the class each of them played
      in the last step (the labels of an opponent model; never part of an observation). ``()``
      by default; the default ``opponent_actions`` reads the class of the last action of each slot
      that is an agent id, so a scenario whose slots are its agents only declares the slots.
    - ``opponent_actions_revealed()``: whether the agent's next observation shows what each of its
      slots played, so a model of them may adapt during the episode; False by default (repeated_game:
      True).
    - ``turn_budget_visible``: whether the agent is shown its turn budget, so that running out
      of turns is an outcome of the task (terminal, value 0 after it) rather than a cut it cannot
      see (bootstrapped from the value). ``False`` by default; a scenario that says ``True`` gets a
      last line ``turn k of K`` on every observation of a running episode (``K`` is
      ``_turn_budget(agent)``, the scenario's ``max_turns`` unless it sets a tighter one).
    - comms hooks: ``note_seen(agent, text)`` (the agent was shown ``text`` by a teammate;
      no-op), ``expert_turn(agent, audience)`` (the expert's action and what it would say;
      silent), ``action_summary(agent, action)`` (how an action reads to teammates; the text)
      and ``shared_view(agent, text)`` (what of an observation teammates get; all of it).
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"], "name": "text_scenario", "is_parallelizable": True}
    description: ClassVar[str] = ""
    kind: ClassVar[str] = "single"
    agent_range: ClassVar[tuple[int, int]] = (1, 1)
    splits: ClassVar[tuple[str, ...]] = ("train",)
    options_cls: ClassVar[type[ScenarioOptions]] = ScenarioOptions
    default_reward_weights: ClassVar[dict[str, float]] = {"task": 1.0}
    max_obs_length: ClassVar[int] = 2048
    max_action_length: ClassVar[int] = 512
    TRAIN_SEED_LIMIT: ClassVar[int] = TRAIN_SEED_LIMIT  # so callers holding only an env can draw training seeds
    turn_budget_visible: ClassVar[bool] = False
    """Whether the agent is shown its turn budget (``turn k of K`` ends each observation; running out ends the task)."""

    def __init__(self, n_agents: int | None = None, seed: int | None = None, render_mode: str | None = None,
                 **options: Any):
        lo, hi = self.agent_range
        if n_agents is None:
            n_agents = lo
        if not isinstance(n_agents, int) or isinstance(n_agents, bool) or not lo <= n_agents <= hi:
            raise ValueError(f"{type(self).__name__} takes n_agents in [{lo}, {hi}], got {n_agents!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}, got {render_mode!r}")
        if seed is not None and (not isinstance(seed, int) or seed < 0):
            raise ValueError(f"seed must be None or a non-negative int, got {seed!r}")
        self.opts = self._build_options(options)
        self.reward_weights = {**self.default_reward_weights, **dict(self.opts.reward_weights or {})}
        self.render_mode = render_mode
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self.agents: list[str] = []
        # Spaces are built once: PettingZoo requires the same object on every call.
        text = Text(max_length=self.max_obs_length, charset=PRINTABLE)
        self._obs_space = Dict({"text": text})
        self._act_space = Text(max_length=self.max_action_length, charset=PRINTABLE)
        self.state_space = Text(max_length=16 * self.max_obs_length, charset=PRINTABLE)
        self._rng = np.random.default_rng(seed)
        self._pending_seed = seed  # the first reset() without a seed uses the constructor's seed
        self.episode_seed: int | None = None
        self._last_actions: dict[str, Any] = {}  # the last step's actions (the default `opponent_actions` reads them)
        self.split = self.opts.split
        self._turns: dict[str, int] = {}
        self._ended: dict[str, str] = {}
        self._last_text: dict[str, str] = {}

    # ----- options -----
    @classmethod
    def _build_options(cls, options: Mapping[str, Any]) -> ScenarioOptions:
        valid = [f.name for f in dataclasses.fields(cls.options_cls)]
        unknown = sorted(set(options) - set(valid))
        if unknown:
            raise ValueError(f"unknown option(s) {unknown} for {cls.__name__}; valid options: {valid}")
        opts = cls.options_cls(**options)
        if opts.split not in cls.splits:
            raise ValueError(f"split must be one of {list(cls.splits)}, got {opts.split!r}")
        if not isinstance(opts.max_turns, int) or isinstance(opts.max_turns, bool) or opts.max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {opts.max_turns!r}")
        if opts.reward_weights is not None:
            if not isinstance(opts.reward_weights, Mapping):
                raise ValueError(f"reward_weights must be a dict over {sorted(cls.default_reward_weights)}")
            bad = sorted(set(opts.reward_weights) - set(cls.default_reward_weights))
            if bad:
                raise ValueError(f"unknown reward_weights key(s) {bad}; valid keys: {sorted(cls.default_reward_weights)}")
            for k, v in opts.reward_weights.items():
                if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
                    raise ValueError(f"reward_weights[{k!r}] must be a finite number, got {v!r}")
        return opts

    # ----- spaces -----
    def observation_space(self, agent: str) -> Dict:
        return self._obs_space

    def action_space(self, agent: str) -> Text:
        return self._act_space

    # ----- seeds -----
    @classmethod
    def eval_seeds(cls, split: str, n: int, skip: int = 0) -> list[int]:
        """``n`` held-out seeds for evaluating on ``split``: outside the training range and unique to the
        split; the first ``skip`` of the split's seeds are passed over (fresh seeds for a final check)."""
        if split not in cls.splits:
            raise ValueError(f"split must be one of {list(cls.splits)}, got {split!r}")
        if not (0 <= n and 0 <= skip and skip + n <= EVAL_SEED_BLOCK):
            raise ValueError(f"n={n} and skip={skip} must be >= 0 with n + skip <= {EVAL_SEED_BLOCK}")
        start = TRAIN_SEED_LIMIT + cls.splits.index(split) * EVAL_SEED_BLOCK + skip
        return list(range(start, start + n))

    # ----- PettingZoo API -----
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is None and self._pending_seed is not None:
            seed = self._pending_seed
        self._pending_seed = None
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self.episode_seed = int(seed)
        else:
            self.episode_seed = int(self._rng.integers(TRAIN_SEED_LIMIT))
        # Only "split" is a reset option; other keys are ignored (PettingZoo's own tests pass junk).
        split = (options or {}).get("split", self.opts.split)
        if split not in self.splits:
            raise ValueError(f"reset option split must be one of {list(self.splits)}, got {split!r}")
        self.split = split
        self.agents = list(self.possible_agents)
        self._turns = dict.fromkeys(self.agents, 0)
        self._ended = {}
        self._last_actions = {}
        texts = self._reset_scenario(self.episode_seed, split)
        obs = {a: self._observe(a, texts[a]) for a in self.agents}
        infos = {a: {"reward_components": dict.fromkeys(self.default_reward_weights, 0.0), "invalid_action": False}
                 for a in self.agents}
        return obs, infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        obs, rewards, terms, truncs, infos = {}, {}, {}, {}, {}
        live = list(self.agents)
        for agent in live:
            self._turns[agent] += 1
        try:
            outcomes = self._step_agents({a: actions.get(a) for a in live})
        except Exception as exc:  # noqa: BLE001 - a harness fault must end the episode, not the run
            fault = StepOutcome(text=f"harness error ({type(exc).__name__}); episode ended", end="error")
            outcomes = dict.fromkeys(live, fault)
        for agent in live:
            out = outcomes[agent]
            components = dict.fromkeys(self.default_reward_weights, 0.0)
            if out.end not in HARNESS_FAULTS:  # harness faults carry no reward signal: masked from the loss
                components.update({k: float(v) for k, v in out.components.items() if k in components})
            end, text = out.end, out.text
            if end is None and self._turns[agent] >= self.opts.max_turns:
                end, text = "max_turns", f"{text}\nout of turns: episode over"
            info: dict[str, Any] = {"reward_components": components, "invalid_action": bool(out.invalid)}
            if end is not None:
                info["termination_reason"] = end
                self._ended[agent] = end
            obs[agent] = self._observe(agent, text)
            rewards[agent] = float(sum(self.reward_weights[k] * v for k, v in components.items()))
            terms[agent] = end in TERMINATION_REASONS
            truncs[agent] = end in TRUNCATION_REASONS
            infos[agent] = info
        self.agents = [a for a in self.agents if a not in self._ended]
        self._last_actions = {a: actions.get(a) for a in live}
        return obs, rewards, terms, truncs, infos

    def state(self) -> str:
        lines = [f"scenario={self.metadata['name']} split={self.split} seed={self.episode_seed}"]
        for agent in self.possible_agents:
            status = self._ended.get(agent, "running" if agent in self.agents else "idle")
            turn = self._turns.get(agent, 0)
            lines.append(f"{agent}: turn={turn}/{self._turn_budget(agent)} status={status} {self._agent_state(agent)}")
        return self._clean("\n".join(lines), self.state_space.max_length)

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        last = [f"[{a}] {self._last_text.get(a, '')}" for a in self.possible_agents]
        return "\n".join([self.state(), *last])

    def close(self) -> None:
        pass

    # ----- helpers -----
    def _observe(self, agent: str, text: str) -> dict[str, str]:
        if self.turn_budget_visible and agent not in self._ended:
            # last, after the news (an error observation still starts "error: "); the text is cut
            # before the line is added, so a long observation never loses its budget
            budget = f"\n{TURN_BUDGET_PREFIX}{self._turns[agent] + 1} of {self._turn_budget(agent)}"
            clean = self._clean(text, self.max_obs_length - len(budget)) + budget
        else:
            clean = self._clean(text, self.max_obs_length)
        self._last_text[agent] = clean
        return {"text": clean}

    @staticmethod
    def _clean(text: str, max_length: int) -> str:
        # Observations must stay inside the Text space: printable ASCII, 1..max_length chars.
        text = str(text)
        if not set(text) <= _PRINTABLE_SET:  # most texts are clean already: skip the per-character rebuild
            text = "".join(c if c in _PRINTABLE_SET else "?" for c in text)
        text = text or "(empty)"
        if len(text) > max_length:
            text = text[: max_length - len(_TRUNCATED_MARK)] + _TRUNCATED_MARK
        return text

    # ----- hooks for subclasses -----
    def _reset_scenario(self, episode_seed: int, split: str) -> dict[str, str]:
        """Draw every agent's task from the episode seed; return each agent's first observation text."""
        raise NotImplementedError

    def _step_agents(self, actions: dict[str, Any]) -> dict[str, StepOutcome]:
        """Apply the live agents' actions together; returns one outcome per agent in ``actions``.

        The default steps agents one by one (independent tasks) and contains a crash to the
        agent that caused it. Scenarios where agents interact (moves on a shared grid,
        simultaneous bids) override this and resolve the joint action at once; a crash here
        ends every live agent's episode with reason ``error``.
        """
        outcomes = {}
        for agent, action in actions.items():
            try:
                outcomes[agent] = self._step_agent(agent, action)
            except Exception as exc:  # noqa: BLE001 - one agent's harness fault must not end the others
                outcomes[agent] = StepOutcome(text=f"harness error ({type(exc).__name__}); episode ended", end="error")
        return outcomes

    def _step_agent(self, agent: str, action: Any) -> StepOutcome:
        """Apply one agent's action (any object: malformed ones must become an invalid outcome, never raise)."""
        raise NotImplementedError

    def _turn_budget(self, agent: str) -> int:
        """The turns ``agent`` may take this episode, as shown when ``turn_budget_visible``; ``max_turns``
        unless the scenario ends episodes earlier with reason ``max_turns`` (then it says so here)."""
        return self.opts.max_turns

    def _agent_state(self, agent: str) -> str:
        """One line of global-state text about ``agent`` for the centralized critic."""
        return ""

    def action_grammar(self, agent: str) -> ActionGrammar:
        raise NotImplementedError

    def entity_vocabulary(self) -> list[str]:
        raise NotImplementedError

    def expert_action(self, agent: str) -> str:
        raise NotImplementedError
