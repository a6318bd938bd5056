"""The comms wrapper: ``wrap(env, topology, channel)`` shares observations between graph neighbours.

It wraps a text scenario (a ``scenarios.base.TextScenario``: a PettingZoo ``ParallelEnv`` whose
observations are ``{"text": str}`` and which declares the optional capabilities; anything else is
refused with a message that says so) and returns a ``ParallelEnv`` with the same agents, the same
space objects, the same ``state()`` (the global state stays for the centralized critic) and the
scenario's ``action_grammar``, ``expert_action``, ``entity_vocabulary`` and ``eval_seeds``. Every
capability the base class declares (``scenarios.base.CAPABILITIES``: ``team_of``,
``opponent_styles``, ``episode_stats``, ``action_classes``, ``action_class``,
``turn_budget_visible``, ``note_seen``, ``expert_turn``, ``action_summary``, ``shared_view``,
``scripted_action``) is
forwarded by a method of its own, so a wrapped scenario offers the same declared surface as a bare
one; the wrapper itself calls them directly, never by probing. A scenario's own extras (such as
``tool_schemas``) still pass through by attribute lookup. What changes is each agent's observation
text: after reset and after every step it gains a short section with what its in-neighbours shared::

    <own observation>
    team:
    agent_1 saw: posted Paris / board: empty | did: read_board()
    turn 3 of 9

(a scenario that shows its turn budget keeps that line last, and it is never shared: a sender's
budget is its own, not news)

A sender shares its observation text of that step (newlines shown as `` / ``), as far as the
scenario's ``shared_view`` keeps it (the news, not the sender's own role or tool list; the whole
text by default), and the action it took to get there (none at reset), rendered by the scenario's
``action_summary`` (``read_board()`` rather than the JSON; the text itself by default). With nothing
kept the item is only ``agent_2 did: read_board()``; with no action either, nothing is sent. Lines that every agent's observation holds that
step (a broadcast such as the team task) are left out: each receiver has them already, and
repeating them per neighbour tripled a 4-agent team's context. An item that arrives late says
when it was sent: ``agent_1 (t=3) saw: ...``. Only agents still in ``env.agents`` send; items reach their
receivers through the ``Channel`` (size cap, drop, delay, noise; see ``comms/channel.py``). An
observation never holds anything from an agent that is not one of its in-neighbours
(decentralized execution). The observation stays inside its ``Text`` space: the own text is kept
whole and the team section is cut (with a marker) to the room left, or to ``total_chars``. The
wrapper calls the scenario's ``note_seen(agent, text)`` with each delivered text (a no-op unless
the scenario uses it: ``info_split``'s grammar then admits the entities the receiver saw).

With channel mode ``"message"`` (or ``"both"``) agents also write: an action may carry a message
(``comms/messages.py``: a ``"say"`` field on a JSON-object action, a trailing `` say: <value>`` on
any other action text), stripped before the scenario sees the action (and before
``action_class`` reads it) and delivered through the same channel as a line ``agent_1 says:
Sydney``; ``action_grammar`` then offers every action with and without a message from the
entities the agent has seen. Mode ``"message"`` shares nothing else; ``"both"`` shares
observations too.

The graph is rebuilt at every reset for the scenario's ``possible_agents`` (the team size may
change between environments of a curriculum); ``topology_graph`` exposes it, ``stats()`` the
channel's cumulative counts as ``comms/...`` metrics (``comms/messages`` counts messages written,
``comms/malformed_messages`` the ``say`` fields that could not be read).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import networkx as nx
from pettingzoo import ParallelEnv

from comms.channel import Channel, ChannelConfig, cut
from comms.messages import SeenEntities, can_carry, split_message, with_message, with_messages
from comms.topology import Topology, as_topology, build, neighbours, receivers
from scenarios.base import OpponentStyles, TextScenario, split_turn_budget

SECTION_HEADER = "\nteam:"


def _within(text: str, allowed: frozenset[str]) -> str:
    """``text`` with characters outside the Text space's charset replaced by ``?`` (dropped if ``?`` is not allowed)."""
    bad = "?" if "?" in allowed else ""
    return "".join(c if c in allowed else bad for c in text)


def _lines(text: str) -> list[str]:
    return [part for part in text.replace("\r", "\n").splitlines() if part.strip()]


def _one_line(text: str) -> str:
    """``text`` on one line (`` / `` between its lines)."""
    return " / ".join(_lines(text)) or "(empty)"


def _common_lines(obs: Mapping[str, Any]) -> frozenset[str]:
    """Lines every observation of this step holds (a broadcast like the team task): not worth sharing."""
    if len(obs) < 2:
        return frozenset()
    sets = [set(_lines(str(o["text"]))) for o in obs.values() if isinstance(o, Mapping) and "text" in o]
    return frozenset(set.intersection(*sets)) if len(sets) == len(obs) else frozenset()


class CommsWrapper(ParallelEnv):
    """A scenario whose observations also show what graph neighbours shared (see the module docstring)."""

    def __init__(self, env: TextScenario, topology: Topology | str | nx.Graph = "full",
                 channel: ChannelConfig | None = None):
        if not isinstance(env, ParallelEnv):
            raise ValueError(f"comms.wrap needs a PettingZoo ParallelEnv (e.g. scenarios.make(...)), "
                             f"got {type(env).__name__}")
        if not isinstance(env, TextScenario):
            # The wrapper calls the hooks TextScenario declares; a bare ParallelEnv has none of them.
            raise ValueError(f"comms.wrap needs observations {{'text': Text}} and the hooks of a text scenario: "
                             f"{type(env).__name__} is a ParallelEnv but not a scenarios.base.TextScenario. "
                             "Wrap a text scenario (scenarios.make(...)) or subclass TextScenario")
        if channel is None:
            channel = ChannelConfig()
        if not isinstance(channel, ChannelConfig):
            raise ValueError(f"channel must be a comms.ChannelConfig, got {type(channel).__name__}")
        topology = as_topology(topology)
        self.env = env
        self.topology = topology
        self.channel_config = channel
        self.channel = Channel(channel)
        self.metadata = dict(env.metadata)
        self.render_mode = env.render_mode
        self.state_space = env.state_space
        self._text_space = {a: self._space_of(a) for a in env.possible_agents}
        self.topology_graph: nx.Graph = build(topology, list(env.possible_agents))
        self._step = 0
        self._seen = SeenEntities(env.entity_vocabulary() if channel.carries_messages else (),
                                  channel.message_values)

    # ----- delegated -----
    @property
    def possible_agents(self) -> list[str]:  # type: ignore[override]
        return self.env.possible_agents

    @property
    def agents(self) -> list[str]:  # type: ignore[override]
        return self.env.agents

    @property
    def unwrapped(self) -> ParallelEnv:
        return self.env.unwrapped

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self.env.action_space(agent)

    def state(self) -> Any:
        return self.env.state()

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()

    def action_grammar(self, agent: str) -> Any:
        grammar = self.env.action_grammar(agent)
        if not self.channel_config.carries_messages:
            return grammar
        return with_messages(grammar, self._seen.of(agent))

    def expert_action(self, agent: str) -> str:
        """The scenario's scripted action; in message mode it carries the value the scenario's
        ``expert_turn`` would say to the agent's live out-neighbours (a teacher that talks, so SFT
        demonstrations teach talking), when the agent may say it."""
        if not self.channel_config.carries_messages:
            return self.env.expert_action(agent)
        live = set(self.env.agents)
        hearers = [b for b in receivers(self.topology_graph, agent) if b in live] if agent in live else []
        action, message = self.env.expert_turn(agent, hearers)
        if message is None or message not in self._seen.of(agent) or not can_carry(action):
            return action
        return with_message(action, message)

    def entity_vocabulary(self) -> list[str]:
        return self.env.entity_vocabulary()

    def eval_seeds(self, split: str, n: int, skip: int = 0) -> list[int]:
        return self.env.eval_seeds(split, n, skip=skip)

    # ----- declared capabilities (scenarios.base.CAPABILITIES), forwarded one by one -----
    def team_of(self, agent: str) -> str:
        return self.env.team_of(agent)

    def opponent_styles(self) -> OpponentStyles:
        return self.env.opponent_styles()

    def episode_stats(self, agent: str) -> dict[str, float]:
        return self.env.episode_stats(agent)

    def action_classes(self) -> tuple[str, ...]:
        return self.env.action_classes()

    def action_class(self, agent: str, action: object) -> str | None:
        """The scenario's class of ``action``; in message mode, of the action without its message."""
        if self.channel_config.carries_messages and isinstance(action, str):
            action = split_message(action)[0]
        return self.env.action_class(agent, action)

    def opponent_slots(self, agent: str) -> tuple[str, ...]:
        return self.env.opponent_slots(agent)

    def opponent_actions(self, agent: str) -> dict[str, str | None]:
        return self.env.opponent_actions(agent)

    def opponent_actions_revealed(self) -> bool:
        return self.env.opponent_actions_revealed()

    @property
    def turn_budget_visible(self) -> bool:
        return self.env.turn_budget_visible

    def note_seen(self, agent: str, text: str) -> None:
        self.env.note_seen(agent, text)

    def expert_turn(self, agent: str, audience: Collection[str] = ()) -> tuple[str, str | None]:
        """The scenario's own (action, message); the wrapper's talking expert is ``expert_action``."""
        return self.env.expert_turn(agent, audience)

    def action_summary(self, agent: str, action: object) -> str:
        return self.env.action_summary(agent, action)

    def scripted_action(self, agent: str, style: str) -> str:
        """The scenario's scripted action; the expert talks as the wrapper's expert does (``expert_action``)."""
        return self.expert_action(agent) if style == "expert" else self.env.scripted_action(agent, style)

    def shared_view(self, agent: str, text: str) -> str:
        return self.env.shared_view(agent, text)

    def __getattr__(self, name: str) -> Any:
        # Only a scenario's own extras (tool_schemas, pool, ...) get here: declared hooks are methods above.
        if name.startswith("_") or name == "env":
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        return getattr(self.env, name)

    # ----- comms -----
    def stats(self) -> dict[str, float]:
        """The channel's cumulative counts: ``comms/sent``, ``comms/delivered``, ``comms/dropped``, ..."""
        return self.channel.stats()

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        obs, infos = self.env.reset(seed=seed, options=options)
        self.topology_graph = build(self.topology, list(self.env.possible_agents))
        self._text_space = {a: self._space_of(a) for a in self.env.possible_agents}
        self.channel.reset(seed)
        self._seen.reset()
        self._step = 0
        return self._share(obs, {}, {}), infos

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        messages: dict[str, str] = {}
        if self.channel_config.carries_messages:
            actions = dict(actions)
            for agent, action in actions.items():
                if isinstance(action, str):
                    actions[agent], message, malformed = split_message(action)
                    self.channel.counts["malformed_messages"] += malformed
                    if message is not None:
                        messages[agent] = message
                        self.channel.counts["messages"] += 1
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        self._step += 1
        return self._share(obs, actions, messages), rewards, terms, truncs, infos

    def _space_of(self, agent: str) -> tuple[int, frozenset[str]]:
        space = self.env.observation_space(agent)
        spaces = getattr(space, "spaces", None)
        text = spaces.get("text") if isinstance(spaces, Mapping) else None
        # duck-typed gymnasium Text (comms does not import gymnasium): a length cap and a charset
        if not (isinstance(getattr(text, "max_length", None), int) and hasattr(text, "character_set")):
            raise ValueError(f"comms.wrap needs observations {{'text': Text}}; {agent!r} has {space!r}. "
                             "Wrap a text scenario (scenarios.make(...))")
        return int(text.max_length), frozenset(text.character_set)

    def _share(self, obs: dict[str, Any], actions: dict[str, Any], messages: dict[str, str]) -> dict[str, Any]:
        graph, step, cfg = self.topology_graph, self._step, self.channel_config
        live = set(self.env.agents)
        common = _common_lines(obs)
        for sender in self.env.possible_agents:  # fixed order: the fault draws replay exactly
            targets = [r for r in receivers(graph, sender) if r in obs]
            if sender in messages:  # the last words of an agent that just left still go out
                self.channel.send(step, sender, targets, f"says: {_one_line(messages[sender])}")
            if not cfg.shares_observations or sender not in live or sender not in obs:
                continue  # agents that left stop sending
            parts = []
            own, _ = split_turn_budget(str(obs[sender]["text"]))  # the sender's own budget is no news
            news = [line for line in _lines(str(self.shared_view(sender, own))) if line not in common]
            if news:
                parts.append(f"saw: {' / '.join(news)}")
            if sender in actions:
                parts.append(f"did: {_one_line(str(self.action_summary(sender, actions[sender])))}")
            if parts:  # nothing seen worth sharing and nothing done (a reset): nothing to send
                self.channel.send(step, sender, targets, " | ".join(parts))
        arrived = self.channel.deliver(step, set(obs))
        out = {}
        for agent, ob in obs.items():
            if cfg.carries_messages:
                self._seen.note(agent, split_turn_budget(str(ob["text"]))[0])  # the budget's digits are no entities
            items = [d for d in arrived.get(agent, []) if graph.has_node(d.sender)
                     and d.sender in neighbours(graph, agent)]  # guard: never show a non-neighbour
            if not items:
                out[agent] = ob
                continue
            # the send step only when the item is late: fresh ones would pay tokens for nothing
            lines = [f"{d.sender}{'' if d.sent_step == step else f' (t={d.sent_step})'} {d.text}" for d in items]
            for line in lines:
                self.env.note_seen(agent, line)
            out[agent] = {**ob, "text": self._compose(agent, str(ob["text"]), lines)}
            if cfg.carries_messages:
                self._seen.note(agent, "\n".join(lines))  # what neighbours said can be relayed
        return out

    def _compose(self, agent: str, own: str, lines: list[str]) -> str:
        limit, allowed = self._text_space.get(agent) or self._space_of(agent)
        body, budget = split_turn_budget(own)  # a shown turn budget stays the last line
        tail = f"\n{budget}" if budget is not None else ""
        room = limit - len(own)
        if self.channel_config.total_chars is not None:
            room = min(room, self.channel_config.total_chars)
        section = _within("\n".join([SECTION_HEADER, *lines]), allowed)
        if room <= len(SECTION_HEADER):
            return own  # no room for the section: the agent's own observation comes first
        return body + cut(section, room) + tail


def wrap(env: TextScenario, topology: Topology | str | nx.Graph = "full",
         channel: ChannelConfig | None = None) -> CommsWrapper:
    """Wrap ``env`` so each agent's observation shows what its in-neighbours in ``topology`` shared or said.

    ``topology``: a ``Topology``, a spec string (``"full"``, ``"ring"``, ``"random:p=0.3"``) or a
    networkx graph over agent ids or indices. ``channel``: a ``ChannelConfig`` (default: shared
    observations, lossless, no delay, 512 characters per item; ``mode="message"`` for messages).
    """
    return CommsWrapper(env, topology=topology, channel=channel)


__all__ = ["SECTION_HEADER", "CommsWrapper", "wrap"]
