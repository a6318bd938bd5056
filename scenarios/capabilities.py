"""The optional capabilities of a text scenario, each with a default that means "the scenario has none of it".

``TextScenario`` inherits them (its docstring says what each one is), so the engine and comms call
them on any scenario and never probe attributes; ``CAPABILITIES`` names them, and the comms wrapper
forwards each one. It leaves out the environment loop (``scenarios.base``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class OpponentStyles:
    """Names of a scenario's scripted opponent styles: those training draws from and those held out for evaluation."""

    train: tuple[str, ...] = ()
    held_out: tuple[str, ...] = ()


# The optional capabilities TextScenario declares with defaults; a wrapper (comms) forwards each of these.
CAPABILITIES: tuple[str, ...] = ("team_of", "opponent_styles", "episode_stats", "note_seen", "turn_budget_visible",
                                 "action_classes", "action_class", "opponent_slots", "opponent_actions",
                                 "opponent_actions_revealed", "expert_turn",
                                 "action_summary", "shared_view", "scripted_action")


class Capabilities:
    """The defaults of every optional capability (mixed into ``TextScenario``)."""

    _last_actions: dict[str, Any]  # the last step's actions, kept by TextScenario.step
    expert_action: Any  # TextScenario's (the default expert_turn plays it)

    def team_of(self, agent: str) -> str:
        """The team ``agent`` plays on; ``""`` when the scenario has no teams."""
        return ""

    def opponent_styles(self) -> OpponentStyles:
        """The scripted opponent styles for training and held out for evaluation; none by default."""
        return OpponentStyles()

    def scripted_action(self, agent: str, style: str) -> str:
        """The action scripted ``style`` (``"expert"``, or one of ``opponent_styles()``) plays in ``agent``'s
        seat now, so a scripted opponent can stand in for an agent (an opponent pool's entries). By
        default only ``"expert"``, the scenario's scripted expert."""
        if style != "expert":
            raise ValueError(f"{type(self).__name__} has no scripted style {style!r} to seat; it has: expert")
        return self.expert_turn(agent)[0]

    def episode_stats(self, agent: str) -> dict[str, float]:
        """Figures measured over ``agent``'s episode so far (finished or current), for logging; none by default."""
        return {}

    def action_classes(self) -> tuple[str, ...]:
        """Every class of action another agent could predict (the same for every episode); none by default."""
        return ()

    def action_class(self, agent: str, action: object) -> str | None:
        """The class in ``action_classes()`` of ``agent``'s action text; ``None`` for no class (malformed)."""
        return None

    def opponent_slots(self, agent: str) -> tuple[str, ...]:
        """The others whose next action ``agent`` could learn to predict (agent ids, or a name for an
        opponent inside the scenario), the same for the whole episode; none by default."""
        return ()

    def opponent_actions(self, agent: str) -> dict[str, str | None]:
        """The class (of ``action_classes()``) of the action each of ``opponent_slots(agent)`` played in
        the last step; ``None`` where it played none or a malformed one. Labels for an opponent model,
        never shown to ``agent``. By default a slot that is an agent id is read from its last action."""
        return {slot: self.action_class(slot, self._last_actions[slot]) if slot in self._last_actions else None
                for slot in self.opponent_slots(agent)}

    def opponent_actions_revealed(self) -> bool:
        """Whether each agent's next observation shows it what every one of its ``opponent_slots`` played
        (so a model of them may learn from those actions during the episode); False by default."""
        return False

    def note_seen(self, agent: str, text: str) -> None:
        """``agent`` was shown ``text`` by someone else (comms); the scenario may widen its grammar. A no-op by default."""
        return None

    def expert_turn(self, agent: str, audience: Collection[str] = ()) -> tuple[str, str | None]:
        """The scripted expert's action and, when the teammates in ``audience`` hear a message from
        ``agent`` this turn (comms message mode), the value it would say to them; silent by default."""
        return self.expert_action(agent), None

    def action_summary(self, agent: str, action: object) -> str:
        """How ``agent``'s action reads to teammates it is shared with (comms); the text itself by default."""
        return action if isinstance(action, str) else repr(action)

    def shared_view(self, agent: str, text: str) -> str:
        """What of ``agent``'s observation ``text`` its teammates get under comms; the whole text by default.

        A scenario may leave out lines that describe only the agent itself (its tool list) or
        carry no news (an empty board): teammates cannot act on them, and every such line is
        repeated once per neighbour, turn after turn, in each receiver's context."""
        return text
