"""The one place that builds the parts of a run from a config: scenario, comms, policy, policy map, critic.

`marl train`, `marl eval` and the benchmarks build their parts through these functions, so a
scenario is wrapped in comms, a tokenizer is trained (or read from its cache), a policy is built on
a device and a critic is matched to its algorithm the same way everywhere. A checkpoint is loaded
from its typed metadata record (`marl.run.checkpoint.CheckpointMeta`), never from a stand-in
training config. It leaves out the training loop (`marl.run.train`) and what each part does once
built (`marl.engine`).
"""

from __future__ import annotations

import copy
import os
import random
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

import comms
import scenarios
from marl.config import CommsConfig, ConfigError, PolicyConfig, TrainConfig
from marl.engine import algorithms
from marl.engine.critic import Critic, build_critic_model
from marl.engine.opponent import build_head
from marl.engine.policy_map import PolicyMap, policy_id, policy_ids, single
from marl.engine.rollout import RolloutWorker
from marl.run.checkpoint import ADAPTERS_DIR, CheckpointMeta, read_meta
from marl.run.sft import demonstration_episodes
from policies.adapters import BaseView, SharedBase, is_adapter, load_adapters
from policies.chat import ChatFormat
from policies.llm_policy import LLMPolicy
from policies.opponent_head import OpponentHead
from policies.presets import PRESETS, build_model, model_source
from policies.tokenizer import load_or_train_tokenizer

EnvFactory = Callable[[], Any]

def seed_everything(seed: int) -> None:
    """Seed python's, numpy's and torch's global generators."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def resolve_device(name: str) -> torch.device:
    """`auto` picks cuda when available; anything else is taken as given."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def train_seeds(rng: np.random.Generator, n: int) -> list[int]:
    """Task seeds from the training range only (evaluation seeds lie outside it)."""
    return [int(s) for s in rng.integers(0, scenarios.TRAIN_SEED_LIMIT, size=n)]


# ----- scenario and comms -----
def env_factory(scenario: str, agents: int, split: str, options: dict[str, Any],
                sharing: CommsConfig | None = None) -> EnvFactory:
    """A picklable factory of the scenario on `split`, wrapped in comms when `sharing` has a topology."""
    make = partial(scenarios.make, scenario, n_agents=agents, split=split, **options)
    if sharing is None or sharing.topology == "none":
        return make
    return partial(shared_env, make, sharing.topology, sharing.channel(agents))


def shared_env(make: EnvFactory, topology: str, channel: Any) -> Any:
    # A top-level function (not a lambda) so the factory pickles, as rollout workers may need.
    return comms.wrap(make(), topology=topology, channel=channel)


def train_env_factory(cfg: TrainConfig, split: str) -> EnvFactory:
    """The env factory of a resolved training config on `split`."""
    return env_factory(cfg.scenario, cfg.agents, split, cfg.scenario_options, cfg.comms)


# ----- tokenizer and policy -----
def build_tokenizer(make_env: EnvFactory, out_dir: Path, policy_cfg: PolicyConfig, rng: np.random.Generator,
                    more_envs: tuple[EnvFactory, ...] = ()) -> Any:
    """The offline tokenizer of a scenario: trained on scripted-expert text, cached on disk by content hash.
    With `more_envs` (a curriculum's other stages) the corpus's episodes are shared out over every factory,
    so the text of each team size is in it."""
    probe = make_env()
    corpus_seeds = train_seeds(rng, policy_cfg.tokenizer_episodes)
    factories = (make_env, *more_envs)

    def corpus() -> list[str]:
        texts = []
        for k, factory in enumerate(factories):
            worker = RolloutWorker(factory, policy=None, chat=None)
            for ep in demonstration_episodes(worker, corpus_seeds[k :: len(factories)]):
                texts.extend(text for _, text in ep.transcript)
        return texts

    return load_or_train_tokenizer(out_dir / "tokenizers", corpus, probe.entity_vocabulary(), policy_cfg.vocab_size)


def new_policy(policy_cfg: PolicyConfig, tokenizer: Any, seed: int) -> LLMPolicy:
    """A random-init model of the preset (or the model folder) behind the decoding settings of `policy_cfg`."""
    # One load-balancing weight for SFT (the model's own forward with labels reads it) and RL (the learner).
    model = build_model(policy_cfg.model, vocab_size=len(tokenizer), seed=seed,
                        pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, router_aux_loss_coef=policy_cfg.router_aux_loss_coef,
                        dtype=torch.bfloat16 if policy_cfg.dtype == "bfloat16" else None)
    model = merged_adapter(model, policy_cfg.model)
    model.to(resolve_device(policy_cfg.device))
    return LLMPolicy(model, tokenizer, constrained=policy_cfg.constrained, temperature=policy_cfg.temperature,
                     max_new_tokens=policy_cfg.max_new_tokens, lean=policy_cfg.lean_decoding)


def merged_adapter(model: Any, model_spec: str) -> Any:
    """A warm start from a checkpoint whose policies are LoRA adapters: its first policy's adapter merged into
    the base (the policy as it played); any other model as it is."""
    folder = Path(model_spec).expanduser()
    if not (folder / ADAPTERS_DIR).is_dir():
        return model
    first = read_meta(folder).adapters[0]
    views = load_adapters(model, {first: folder / ADAPTERS_DIR / first})
    return views[first].shared.peft.merge_and_unload()


def saved_tokenizer(model_spec: str) -> Any | None:
    """The model's own tokenizer: the one saved in a model folder (a checkpoint, or any `save_pretrained` folder) or
    a hub model's; None for a preset, which gets the offline tokenizer. A model folder without a tokenizer is refused:
    a tokenizer trained here would read the model's ids as other text."""
    if model_spec in PRESETS:
        return None
    from transformers import AutoTokenizer

    source = model_source(model_spec)
    if Path(source).is_dir():
        if not any((Path(source) / name).is_file() for name in ("tokenizer_config.json", "tokenizer.json")):
            raise ValueError(f"model folder {model_spec} has no tokenizer; save the tokenizer the model was trained "
                             "with beside it (tokenizer.save_pretrained(folder))")
    return AutoTokenizer.from_pretrained(source)


def build_policy(cfg: TrainConfig, make_env: EnvFactory, out_dir: Path, rng: np.random.Generator,
                 more_envs: tuple[EnvFactory, ...] = (), tokenizer: Any = None) -> tuple[Any, Any, Any]:
    """The tokenizer, the model and the policy around them: a preset gets the offline tokenizer (cached)
    and random weights; a checkpoint folder comes with the tokenizer it was trained with, whatever the
    seed (a tokenizer trained on another seed's corpus would read its ids as other text). `more_envs`:
    further factories whose text the tokenizer's corpus also holds (a curriculum's stages); `tokenizer`:
    the one to use (a resumed run's own)."""
    tokenizer = tokenizer if tokenizer is not None else saved_tokenizer(cfg.policy.model)
    if tokenizer is None:
        tokenizer = build_tokenizer(make_env, out_dir, cfg.policy, rng, more_envs)
    else:
        train_seeds(rng, cfg.policy.tokenizer_episodes)  # the same draws as a fresh start, so later ones match
    policy = new_policy(cfg.policy, tokenizer, cfg.seed)
    return tokenizer, policy.model, policy


def same_policy(policy: LLMPolicy, model: Any) -> LLMPolicy:
    """`model` behind `policy`'s tokenizer and decoding settings."""
    return LLMPolicy(model, policy.tokenizer, constrained=policy.constrained, temperature=policy.temperature,
                     max_new_tokens=policy.max_new_tokens, lean=policy.lean)


def clone_policy(policy: LLMPolicy) -> LLMPolicy:
    """A trainable copy of `policy`: its weights and opponent head, copied (a further policy of a mapping)."""
    clone = same_policy(policy, copy.deepcopy(policy.model))
    clone.opponent_head = copy.deepcopy(policy.opponent_head)
    return clone


def frozen_reference(policy: LLMPolicy) -> LLMPolicy:
    """The KL anchor: a frozen copy of `policy`, or for a LoRA adapter its base with every adapter off (the
    base is the model as supervised fine-tuning left it, and no second copy is held)."""
    if is_adapter(policy.model):
        return same_policy(policy, BaseView(policy.model.shared))
    return frozen_copy(policy)


def frozen_copy(policy: LLMPolicy) -> LLMPolicy:
    """`policy`'s weights copied (a LoRA adapter: a new adapter on the same base) and frozen."""
    model = copy.deepcopy(policy.model).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    return same_policy(policy, model)


def frozen_snapshot(policy: LLMPolicy) -> LLMPolicy:
    """A frozen copy of `policy` that acts as it does now, its opponent head included (an opponent pool's entry)."""
    snapshot = frozen_copy(policy)
    if policy.opponent_head is not None:
        snapshot.opponent_head = copy.deepcopy(policy.opponent_head).eval().requires_grad_(False)
    return snapshot


def policy_weights(policy: LLMPolicy) -> dict[str, Any]:
    """What can change of `policy` as it learns: its model's state (a LoRA adapter's alone) and its opponent head's."""
    head = policy.opponent_head
    return {"model": policy.model.state_dict(), "head": head.state_dict() if head is not None else None}


def load_policy_weights(policy: LLMPolicy, saved: dict[str, Any]) -> None:
    """Put `policy_weights` of a policy of the same architecture into `policy`."""
    policy.model.load_state_dict(saved["model"])
    if policy.opponent_head is not None:
        policy.opponent_head.load_state_dict(saved["head"])


def build_policy_map(mapping: str, scenario: str, policy: LLMPolicy, make_env: EnvFactory) -> PolicyMap:
    """The policies of a policy mapping: the (warm-started) policy, copied once per further id."""
    if mapping == "shared":
        return single(policy)
    kind = scenarios.info(scenario).kind
    ids = policy_ids(mapping, make_env(), kind)
    # each policy learns its own weights and its own opponents' model from the same start
    models = {ids[0]: policy, **{pid: clone_policy(policy) for pid in ids[1:]}}
    return PolicyMap(models, partial(policy_id, mapping, kind=kind))


def attach_opponent_head(cfg: TrainConfig, policy: LLMPolicy, make_env: EnvFactory) -> None:
    """Give `policy` the opponent head `cfg.opponent` asks for: the one saved beside a checkpoint it
    starts from (when it has one), else a fresh one for the scenario's slots and classes; under
    `aux+input` its prediction is shown to the agent (`feeds_prompt`)."""
    if cfg.opponent.mode == "off":
        return
    head = OpponentHead.load(cfg.policy.model, policy.device) if Path(cfg.policy.model).is_dir() else None
    policy.opponent_head = head if head is not None else build_head(policy.model, make_env(), seed=cfg.seed)
    policy.opponent_head.feeds_prompt = cfg.opponent.mode == "aux+input"  # the config decides, not the checkpoint
    policy.opponent_head.in_match = cfg.opponent.in_match
    if cfg.opponent.in_match and not make_env().opponent_actions_revealed():
        raise ConfigError(f"opponent.in_match adapts to what the opponents played, which {cfg.scenario} does not "
                          "show an agent: set opponent.in_match false")


def attach_lora(cfg: TrainConfig, policy: LLMPolicy) -> None:
    """Freeze `policy`'s model as the shared base of LoRA adapters (`cfg.lora`) and make the policy its first
    adapter; further policies of a mapping copy it (`clone_policy`) onto the same base. On a GPU with bfloat16,
    `policy.dtype: auto` stores the frozen base in bfloat16 (the adapters stay float32)."""
    model = policy.model
    if cfg.policy.dtype == "auto" and model.device.type == "cuda" and torch.cuda.is_bf16_supported():
        model.to(torch.bfloat16)
    lora = cfg.lora
    shared = SharedBase(model, lora.rank, lora.alpha, lora.dropout, lora.targets)
    policy.model = shared.view(shared.names[0])


LORA_BASE_FILE = "lora-base.safetensors"
"""The frozen base of a LoRA run, in its run folder (resume points hold only the adapters)."""


def keep_lora_base(model: Any, run_dir: Path, resumed: bool) -> None:
    """A LoRA run's base is the model as supervised fine-tuning left it: written once into the run folder when
    RL starts (atomically), and read back into `model` by a resumed run, which skips fine-tuning."""
    from safetensors.torch import load_model, save_model

    path = run_dir / LORA_BASE_FILE
    if resumed:
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: a LoRA run resumes on the base its fine-tuning wrote there")
        load_model(model, str(path))
        return
    tmp = path.with_name(path.name + ".tmp")
    save_model(model, str(tmp))
    os.replace(tmp, path)


def build_critic(cfg: TrainConfig, policy: LLMPolicy, chat: ChatFormat, seed: int) -> Critic | None:
    """The critic of `cfg.algo` for one policy (None for critic-free algorithms), on the policy's device."""
    algo = algorithms.get(cfg.algo)
    if algo.critic is None:
        return None
    tok = policy.tokenizer
    view = None if cfg.critic.state_view == "global" else cfg.critic.state_view
    model = build_critic_model(cfg.critic.model, view, len(tok), tok.pad_token_id, seed=seed)
    model.to(policy.device)
    return Critic(model, tok, chat, algo.centralized_critic, cfg.critic.learning_rate, cfg.rl.max_grad_norm,
                  state_view=view,
                  minibatches=cfg.critic.minibatches)


# ----- checkpoints -----
def load_policy(checkpoint: str | Path, device: str = "auto") -> tuple[Any, ChatFormat, CheckpointMeta]:
    """Policy + ChatFormat + metadata record from a checkpoint folder (safetensors, tokenizer, JSON).

    A checkpoint of several policies (`policy_mapping` team or agent) comes back as a `PolicyMap`
    that routes each agent to its own model, as during training.
    """
    from transformers import AutoTokenizer

    meta = read_meta(checkpoint)
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint))

    adapters: dict[str, Any] = {}
    if meta.adapters:  # one frozen base at the top, the policies as its LoRA adapters
        base = build_model(str(checkpoint), vocab_size=len(tokenizer)).to(resolve_device(device))
        adapters = load_adapters(base, {pid: Path(checkpoint) / ADAPTERS_DIR / pid for pid in meta.adapters})

    def load(folder: Path, pid: str) -> LLMPolicy:
        model = adapters[pid] if pid in adapters else build_model(str(folder), vocab_size=len(tokenizer))
        model = model.to(resolve_device(device)).eval()
        policy = LLMPolicy(model, tokenizer, constrained=meta.constrained, temperature=meta.temperature,
                           max_new_tokens=meta.max_new_tokens)
        head = OpponentHead.load(folder, policy.device)
        policy.opponent_head = head.eval() if head is not None else None
        return policy

    policy: Any = load(Path(checkpoint), meta.policies[0])
    if len(meta.policies) > 1:
        kind = scenarios.info(meta.scenario).kind
        models = {meta.policies[0]: policy,
                  **{pid: load(Path(checkpoint) / "policies" / pid, pid) for pid in meta.policies[1:]}}
        policy = PolicyMap(models, partial(policy_id, meta.policy_mapping, kind=kind))
    return policy, ChatFormat(tokenizer), meta
