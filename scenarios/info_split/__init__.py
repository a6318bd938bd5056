"""The information-split scenario: one tool-use task, its facts and tools dealt among a team; see ``env.py``."""

from scenarios.info_split.env import InfoSplitEnv
from scenarios.info_split.options import InfoSplitOptions

__all__ = ["InfoSplitEnv", "InfoSplitOptions"]
