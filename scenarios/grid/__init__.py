"""The grid scenarios (``navigation``, ``predator_prey``) and their shared board; see each module for its documentation page."""

from scenarios.grid.navigation import NavigationEnv
from scenarios.grid.predator_prey import PredatorPreyEnv, PredatorPreyOptions

__all__ = ["NavigationEnv", "PredatorPreyEnv", "PredatorPreyOptions"]
