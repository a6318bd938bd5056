"""The opponent sections of a training config: the opponent model each agent learns and the pool it plays against.

See `marl.config.sections` for how sections check themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from marl.config.checks import SelfChecking, finite_non_negative, one_of, positive, require, within
from marl.config.choices import OpponentModel, PoolSampling, options


@dataclass
class OpponentModelConfig(SelfChecking):
    """Opponent modeling: each agent predicts the next action class of the others it faces, from its own history."""

    mode: OpponentModel = "off"
    """`off`; `aux`: a head on the policy's last hidden state predicts each opponent's next action class, trained by cross-entropy on what they played (from the first SFT step and through RL); `aux+input`: the same head, whose prediction (each opponent's predicted class, as text) goes into the agent's prompt before it acts."""
    coef: float = 1.0
    """Weight of the opponent-model cross-entropy in the SFT and RL losses."""
    final_coef: float | None = None
    """Weight at the last RL iteration, reached linearly from `coef` (None: constant)."""
    hint_noise: float = 0.2
    """`aux+input`: share of demonstration steps that show a random class instead of what the opponent really played (the head's prediction will not always be right either)."""
    in_match: bool = False
    """`aux+input`: show the head's prediction mixed with simple predictors fitted to the match so far (what the opponent played after each of its own and the agent's recent moves), weighted by how well each has predicted it; needs a scenario that reveals the opponents' moves."""

    def validate(self) -> OpponentModelConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        one_of("opponent.mode", self.mode, options(OpponentModel))
        finite_non_negative("opponent.coef", self.coef)
        within("opponent.hint_noise", self.hint_noise, 0.0, 1.0)
        if self.final_coef is not None:
            finite_non_negative("opponent.final_coef", self.final_coef)
        require(not self.in_match or self.mode == "aux+input", f"opponent.in_match mixes the shown prediction, "
                f"but opponent.mode is {self.mode!r}: set opponent.mode aux+input or opponent.in_match false")
        require(self.mode == "off" or self.coef > 0 or (self.final_coef or 0) > 0,
                "opponent.mode is on but both weights are 0: the head would never learn (raise opponent.coef)")
        return self

    def weight(self, iteration: int, iterations: int) -> float:
        """The loss weight at RL iteration `iteration` (0-based) of `iterations`."""
        if self.final_coef is None or iterations <= 1:
            return self.coef
        frac = min(max(iteration / (iterations - 1), 0.0), 1.0)
        return self.coef + frac * (self.final_coef - self.coef)


@dataclass
class OpponentPoolConfig(SelfChecking):
    """Who the learner plays in competitive and mixed scenarios: a pool of the scenario's scripted styles and frozen snapshots of the policy."""

    sampling: PoolSampling = "off"
    """`off` (the agents play each other, all learning), `uniform`, or `pfsp` (prioritized fictitious self-play: entries the learner loses to come more often)."""
    scripted: bool = True
    """Put the scenario's scripted expert and its training styles in the pool (held-out styles never enter)."""
    snapshot_every: int = 5
    """Add a frozen copy of the learning policy every this many RL iterations (0: no snapshots)."""
    max_snapshots: int = 8
    """Snapshots kept in the pool; the oldest leaves when a new one comes."""
    pfsp_power: float = 2.0
    """PFSP weight of an entry: (1 - the learner's recent win rate against it) to this power."""
    window: int = 64
    """Recent results per entry that its win rate is measured over (PFSP weights, `pool/<entry>/win_rate`)."""
    eval_episodes: int = 50
    """Greedy episodes against each pool entry at the end of training (`eval/pool/...`; 0 skips)."""

    def validate(self) -> OpponentPoolConfig:
        """Check this section's fields; raise ConfigError naming the field and the fix."""
        one_of("pool.sampling", self.sampling, options(PoolSampling))
        positive("pool.snapshot_every", self.snapshot_every, allow_zero=True)
        positive("pool.max_snapshots", self.max_snapshots)
        finite_non_negative("pool.pfsp_power", self.pfsp_power)
        positive("pool.window", self.window)
        positive("pool.eval_episodes", self.eval_episodes, allow_zero=True)
        require(self.sampling == "off" or self.scripted or self.snapshot_every > 0,
                "pool.sampling is on but the pool would stay empty: keep pool.scripted true or set pool.snapshot_every > 0")
        return self
