"""Communication between agents: topologies (who hears whom), channels (how it travels) and the wrapper.

``comms.wrap(env, topology, channel)`` makes any text scenario share observations over a graph, or
carry agent-written messages (channel mode ``"message"`` or ``"both"``: a ``"say"`` field on JSON-object
actions, a trailing `` say: <value>`` on any other action text).
"""

from comms.channel import MODES, STAT_NAMES, TRUNCATED_MARK, Channel, ChannelConfig, Delivery
from comms.messages import SAY_KEY, SAY_MARK, can_carry, split_message, with_message, with_messages
from comms.topology import (
    DEFAULT_K,
    DEFAULT_P,
    KINDS,
    Topology,
    build,
    draw,
    grid_shape,
    neighbours,
    receivers,
)
from comms.wrapper import SECTION_HEADER, CommsWrapper, wrap

__all__ = ["DEFAULT_K", "DEFAULT_P", "KINDS", "MODES", "SAY_KEY", "SAY_MARK", "SECTION_HEADER", "STAT_NAMES",
           "TRUNCATED_MARK", "Channel", "ChannelConfig", "CommsWrapper", "Delivery", "Topology", "build", "can_carry",
           "draw", "grid_shape", "neighbours", "receivers", "split_message", "with_message", "with_messages", "wrap"]
