"""Communication between agents: topologies (who hears whom), channels (how it travels) and the wrapper.

``comms.wrap(env, topology, channel)`` makes any scenario share observations over a graph, or
carry agent-written messages (channel mode ``"message"`` or ``"both"``: a ``"say"`` field on actions).
"""

from comms.channel import MODES, STAT_NAMES, TRUNCATED_MARK, Channel, ChannelConfig, Delivery
from comms.messages import SAY_KEY, split_message, with_messages
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

__all__ = ["DEFAULT_K", "DEFAULT_P", "KINDS", "MODES", "SAY_KEY", "SECTION_HEADER", "STAT_NAMES", "TRUNCATED_MARK",
           "Channel", "ChannelConfig", "CommsWrapper", "Delivery", "Topology", "build", "draw", "grid_shape",
           "neighbours", "receivers", "split_message", "with_messages", "wrap"]
