"""Communication between agents: topologies now; channels and the PettingZoo wrapper come later."""

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

__all__ = ["DEFAULT_K", "DEFAULT_P", "KINDS", "Topology", "build", "draw", "grid_shape", "neighbours",
           "receivers"]
