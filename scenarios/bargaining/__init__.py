"""Bargaining: divide a pool of items under private values; see ``env.py`` for its documentation page."""

from scenarios.bargaining.env import BargainingEnv, BargainingOptions

__all__ = ["BargainingEnv", "BargainingOptions"]
