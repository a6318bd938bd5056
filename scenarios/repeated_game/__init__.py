"""The repeated game: rock-paper-scissors matches against scripted styles; see ``env.py`` for its documentation page."""

from scenarios.repeated_game.env import RepeatedGameEnv, RepeatedGameOptions
from scenarios.repeated_game.styles import HELDOUT_STYLES, STYLES, TRAIN_STYLES, Style, make_style

__all__ = ["HELDOUT_STYLES", "STYLES", "TRAIN_STYLES", "RepeatedGameEnv", "RepeatedGameOptions", "Style", "make_style"]
