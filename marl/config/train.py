"""`TrainConfig`: the whole configuration of a training run, and the checks that span its sections.

The single source of truth for every default is a dataclass field with a one-line docstring; tyro
turns these dataclasses into the `marl train` CLI whose help text is those docstrings. A config checks
itself when it is built (`__post_init__`) and again on `validate()` (after fields were changed in
Python), raising `ConfigError` with a message that says which field to change; checking never
changes a field. The fields whose default depends on other fields (`agents`, `eval_splits`,
`tracking.run_name`) stay None until `resolved()` returns a copy with them filled in. YAML files are
read into the same dataclasses by `marl.config.files`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Annotated, Any

import tyro

from marl.config.checks import ConfigError, SelfChecking, one_of, positive, require
from marl.config.choices import ALGORITHM_NEEDS, Algo, PolicyMapping, options
from marl.config.curriculum import CurriculumConfig
from marl.config.distributed import RayConfig
from marl.config.guards import GuardsConfig
from marl.config.lora import LoraConfig
from marl.config.opponents import OpponentModelConfig, OpponentPoolConfig
from marl.config.sections import (
    CheckpointConfig,
    CommsConfig,
    CriticConfig,
    PolicyConfig,
    RLConfig,
    TrackingConfig,
    WarmStartConfig,
    experiment_or_default,
    tracking_uri_or_default,
)


@dataclass
class TrainConfig(SelfChecking):
    """`marl train`: warm start by SFT, then on-policy RL, tracked in MLflow."""

    scenario: str = "tool_use"
    """Scenario name (see `marl scenarios`)."""
    agents: int | None = None
    """Number of agents in the scenario (default: the smallest count it supports)."""
    iterations: int = 200
    """RL iterations (collect a batch, update once); the RL wall-clock budget may stop earlier."""
    seed: int = 0
    """Seed of models, sampling and training task draws."""
    algo: Algo = "grpo"
    """RL algorithm: `grpo` (critic-free group baseline), `mappo` (centralized critic), `ippo` (independent critic)."""
    policy_mapping: PolicyMapping = "shared"
    """Which agents share a model: `shared` (one model, agent id in the prompt), `team` (one per team), `agent`."""
    train_split: str = "train"
    """Scenario split that training tasks come from."""
    eval_episodes: int = 100
    """Held-out episodes per evaluation split at the end of training (0 skips)."""
    eval_sampled: bool = False
    """Also evaluate with sampling at the policy temperature (`eval_sampled/<split>/...`): sturdier than greedy for comparing runs."""
    eval_splits: tuple[str, ...] | None = None
    """Evaluation splits at the end of training (default: every split of the scenario but `train_split`)."""
    output_dir: str = "runs"
    """Folder for checkpoints and the tokenizer cache."""
    quiet: bool = False
    """No progress bars or per-iteration lines on the console (`<output_dir>/<run_id>/console.log` still gets the lines)."""
    config: str | None = None
    """Optional YAML file with the same fields; command-line flags override it."""
    resume: str | None = None
    """Continue a killed run from a resume point: `<output_dir>/<run_id>/resume/it-N`, the run's folder (its newest),
    or `runs:/<run_id>[/resume/it-N]` in the store of --tracking-uri; its saved config and MLflow run are used,
    and every other flag is ignored."""
    rollout_workers: int = 0
    """RL rollouts on this many Ray actors, each with its own envs and a copy of the policies (0: in this process)."""
    # No flag: tyro cannot parse `dict[str, Any]` from the command line; YAML is the one way to set it.
    scenario_options: Annotated[dict[str, Any], tyro.conf.Suppress] = field(default_factory=dict)
    """Extra scenario options passed to `scenarios.make` (YAML only, e.g. `train_mix: [1, 0, 0]`)."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """The LLM MoE policy and its tokenizer."""
    sft: WarmStartConfig = field(default_factory=WarmStartConfig)
    """Supervised fine-tuning on scripted-expert demonstrations before RL."""
    rl: RLConfig = field(default_factory=RLConfig)
    """On-policy RL: PPO-clip on the agent's own tokens; the advantages come from `algo`."""
    lora: LoraConfig = field(default_factory=LoraConfig)
    """LoRA adapters per policy for RL on one frozen base (off by default: RL trains every weight)."""
    critic: CriticConfig = field(default_factory=CriticConfig)
    """The value model of critic-based algorithms (`mappo`, `ippo`); unused by `grpo`."""
    opponent: OpponentModelConfig = field(default_factory=OpponentModelConfig)
    """Opponent modeling: each agent predicts the others' next action class from its own history."""
    pool: OpponentPoolConfig = field(default_factory=OpponentPoolConfig)
    """Who the learner plays in competitive and mixed scenarios: scripted styles and frozen snapshots of itself."""
    comms: CommsConfig = field(default_factory=CommsConfig)
    """Who shares observations with whom during rollouts; `none` leaves the scenario as is."""
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    """Stages of team size or difficulty that RL moves through on success (none by default)."""
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    """Resume points during training (`resume` continues from one)."""
    guards: GuardsConfig = field(default_factory=GuardsConfig)
    """Alerts on KL, reward, entropy and invalid actions (tags, warnings, optional stop) and crashed environments."""
    ray: RayConfig = field(default_factory=RayConfig)
    """The Ray cluster of `rollout_workers` and what each worker gets."""
    tracking: Annotated[TrackingConfig, tyro.conf.OmitArgPrefixes] = field(default_factory=TrackingConfig)
    """MLflow settings; their flags have no prefix (`--tracking-uri`, `--experiment`, `--run-name`)."""

    def resolved(self) -> TrainConfig:
        """A deep copy with the defaults that depend on other fields filled in: `agents`, `eval_splits`,
        `tracking.run_name`."""
        import scenarios

        info = scenarios.info(self.scenario)
        out = copy.deepcopy(self)
        if out.agents is None:
            out.agents = self.curriculum.parsed()[0].agents if self.curriculum.enabled else info.agent_range[0]
        if out.eval_splits is None:
            out.eval_splits = tuple(s for s in info.splits if s != self.train_split)
        out.tracking.run_name = out.tracking.run_name or f"{self.scenario}-{self.policy.model}-s{self.seed}"
        out.tracking.tracking_uri = tracking_uri_or_default(self.tracking.tracking_uri)
        out.tracking.experiment = experiment_or_default(self.tracking.experiment)
        return out

    def validate(self) -> TrainConfig:
        """Check every field and every section; raise ConfigError naming the field and the fix."""
        for section in (self.policy, self.sft, self.rl, self.lora, self.critic, self.opponent, self.pool, self.comms,
                        self.curriculum, self.checkpoint, self.guards, self.ray, self.tracking):
            section.validate()
        self._check_scenario()
        self._check_curriculum()
        one_of("algo", self.algo, options(Algo))
        one_of("policy_mapping", self.policy_mapping, options(PolicyMapping))
        positive("iterations", self.iterations, allow_zero=True)
        positive("eval_episodes", self.eval_episodes, allow_zero=True)
        positive("rollout_workers", self.rollout_workers, allow_zero=True)
        require(not self.ray.async_rollouts or self.rollout_workers > 0,
                "ray.async_rollouts plays ahead on Ray rollout workers: set rollout_workers > 0")
        require(not self.ray.async_rollouts or (self.pool.sampling == "off" and not self.curriculum.enabled),
                "ray.async_rollouts: an opponent pool or a curriculum decides each batch from the one before; "
                "use pool.sampling off and no curriculum, or synchronous rollouts")
        self._check_algorithm()
        return self

    def _check_scenario(self) -> None:
        import scenarios

        one_of("scenario", self.scenario, tuple(scenarios.names()))
        info = scenarios.info(self.scenario)
        low, high = info.agent_range
        agents = low if self.agents is None else self.agents
        require(isinstance(agents, int) and low <= agents <= high,
                f"agents={self.agents} is outside {self.scenario}'s range [{low}, {high}]")
        for split in (self.train_split, *(self.eval_splits or ())):
            require(split in info.splits, f"split {split!r} is not a split of {self.scenario}; "
                    f"choose from {list(info.splits)}")
        require("split" not in self.scenario_options, "scenario_options must not set 'split'; use train_split / "
                "eval_splits")
        try:
            env = scenarios.make(self.scenario, n_agents=agents, **self.scenario_options)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"scenario_options for {self.scenario}: {err}") from err
        if self.pool.sampling != "off":
            require(any(set(env.opponent_slots(a)) & set(env.possible_agents) for a in env.possible_agents),
                    f"pool.sampling={self.pool.sampling!r}: in {self.scenario} with {agents} agents no agent plays "
                    "another (repeated_game: set scenario_options pairing: self); use pool.sampling off")
        if self.opponent.mode != "off":
            slots = max(len(env.opponent_slots(a)) for a in env.possible_agents)
            require(slots > 0 and len(env.action_classes()) >= 2,
                    f"opponent.mode={self.opponent.mode!r}: {self.scenario} with {agents} agents gives no agent another "
                    "to predict (no opponent_slots or action_classes); use a competitive or mixed scenario, or "
                    "opponent.mode off")

    def _check_curriculum(self) -> None:
        """Every stage is a team size, split and options the scenario takes; the run starts at the first."""
        import scenarios

        if not self.curriculum.enabled:
            return
        stages = self.curriculum.parsed()
        require(self.agents is None or self.agents == stages[0].agents,
                f"agents={self.agents} but the curriculum starts at agents={stages[0].agents}: leave agents unset "
                "(the first stage sets it) or make them agree")
        require(self.pool.sampling == "off", "curriculum with pool.sampling: an opponent pool seats a fixed team; "
                "use pool.sampling off with a curriculum")
        info = scenarios.info(self.scenario)
        teams: dict[str, tuple[str, int]] = {}  # agent -> (its team, at which size) as first seen
        for k, stage in enumerate(stages):
            where = f"curriculum.stages[{k}] ({stage.spec()!r})"
            low, high = info.agent_range
            require(low <= stage.agents <= high, f"{where}: agents={stage.agents} is outside {self.scenario}'s "
                    f"range [{low}, {high}]")
            require(stage.split is None or stage.split in info.splits,
                    f"{where}: split {stage.split!r} is not a split of {self.scenario}; choose from {list(info.splits)}")
            try:
                env = scenarios.make(self.scenario, n_agents=stage.agents,
                                     **{**self.scenario_options, **dict(stage.options)})
            except (TypeError, ValueError) as err:
                raise ConfigError(f"{where}: {err}") from err
            per_agent = self.policy_mapping == "agent" or self.rl.normalize_by == "role"
            for agent in env.possible_agents:
                team, size = teams.setdefault(agent, (env.team_of(agent), stage.agents))
                require(not per_agent or team == env.team_of(agent),
                        f"{where}: in {self.scenario} {agent} is on team {team!r} with {size} agents and on "
                        f"{env.team_of(agent)!r} with {stage.agents}; under policy_mapping agent or rl.normalize_by "
                        "role it would change sides: use policy_mapping team (or shared) and rl.normalize_by agent")

    def _check_algorithm(self) -> None:
        needs, rl, critic = ALGORITHM_NEEDS[self.algo], self.rl, self.critic
        require(not (needs.needs_groups and rl.baseline == "group" and rl.group_size < 2),
                f"rl.group_size={rl.group_size}: a group baseline needs at least 2 rollouts per seed "
                "(or use rl.baseline running, or a critic-based algo)")
        require(not (rl.ptx_coef > 0 and self.sft.episodes <= 0),
                "rl.ptx_coef > 0 trains on demonstrations: set sft.episodes > 0")
        has_critic = needs.critic is not None
        require(not (has_critic and rl.value_coef == 0),
                f"algo={self.algo} has a critic; rl.value_coef=0 would never train it (use > 0)")
        require(not (has_critic and rl.baseline != "group"),
                f"rl.baseline={rl.baseline!r} is for critic-free algos; {self.algo} uses its critic")
        require(not (critic.warmup_iterations > 0 and not has_critic),
                f"critic.warmup_iterations={critic.warmup_iterations} warms a critic, and algo={self.algo} has "
                "none: use mappo or ippo, or set it to 0")
        require(not (critic.warmup_iterations >= self.iterations > 0),
                f"critic.warmup_iterations={critic.warmup_iterations} leaves no policy update in "
                f"iterations={self.iterations}: lower it or raise iterations")
        require(critic.state_view == "global" or needs.centralized_critic,
                f"critic.state_view={critic.state_view!r} shapes a centralized critic's input; algo={self.algo} "
                "has none (use mappo, or leave it global)")
