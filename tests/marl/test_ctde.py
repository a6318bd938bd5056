"""CTDE on real parts: critics, decentralized actors, policy mapping and the open loss.

Real scenarios (navigation, predator_prey, tool_use), their offline tokenizers, tiny random-init
MoE policies and tiny critics, seeded. What a user relies on: actors never see the global state
(only the critic does); a centralized critic takes any agent count; a decentralized critic reads
exactly the agent's own tokens; each agent is played and scored by the model its mapping names;
every loss term is logged under its name with its weight, and new terms plug in.
"""

import copy
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

import scenarios
from marl.config import TrainConfig
from marl.engine.advantages import gae_advantages
from marl.engine.critic import Critic, build_critic_model
from marl.engine.learner import Learner
from marl.engine.policy_map import PolicyMap, policy_id
from marl.engine.rollout import RolloutWorker
from marl.engine.sequences import subset
from marl.run.build import build_policy, frozen_reference
from marl.run.sft import conversations, demonstration_episodes
from policies.chat import ChatFormat
from policies.llm_policy import LLMPolicy
from policies.value_model import build_value_model

SECRET = "SECRET-GLOBAL-STATE"


def policy_for(scenario: str, n_agents: int, out: Path, seed: int = 0):
    cfg = TrainConfig(scenario=scenario, agents=n_agents, seed=seed)
    cfg.policy.tokenizer_episodes = 40
    make_env = partial(scenarios.make, scenario, n_agents=n_agents, split="train")
    tokenizer, _, policy = build_policy(cfg, make_env, out, np.random.default_rng(seed))
    return cfg, make_env, tokenizer, policy


@pytest.fixture(scope="module")
def nav(tmp_path_factory):
    return policy_for("navigation", 3, Path(tmp_path_factory.mktemp("nav")))


def critic_for(tokenizer, centralized: bool, seed: int = 0) -> Critic:
    model = build_value_model("tiny-critic", len(tokenizer), tokenizer.pad_token_id, seed=seed)
    return Critic(model, tokenizer, ChatFormat(tokenizer), centralized, learning_rate=1e-3, max_grad_norm=1.0)


def marked_env(make_env):
    env = make_env()
    real = env.state
    env.state = lambda: f"{SECRET} {real()}"  # instance attribute: what the rollout calls
    return env


def test_actors_never_read_the_global_state(nav):
    _, make_env, tokenizer, policy = nav
    chat = ChatFormat(tokenizer)
    seeds = [3, 4, 5]
    plain = RolloutWorker(partial(marked_env, make_env), policy, chat).collect(seeds, greedy=True)
    recorded = RolloutWorker(partial(marked_env, make_env), policy, chat).collect(seeds, greedy=True,
                                                                                record_state=True)
    # Recording the state for the critic changes nothing the actors see or do.
    assert [t.prompt_ids for t in plain.turns] == [t.prompt_ids for t in recorded.turns]
    assert [t.action_ids for t in plain.turns] == [t.action_ids for t in recorded.turns]
    assert all(SECRET not in tokenizer.decode(t.prompt_ids) for t in recorded.turns)
    assert all(t.state.startswith(SECRET) for t in recorded.turns)  # the critic's input has it
    assert all(t.state is None for t in plain.turns)


def _reads_of(inputs, row):
    """The read ids of sequence `row` (reads are flattened in sequence order)."""
    start = sum(len(p) for p in inputs.positions[:row])
    return inputs.turns[start : start + len(inputs.positions[row])]


def test_centralized_critic_takes_any_agent_count(tmp_path):
    _, _, tokenizer, policy = policy_for("navigation", 2, tmp_path)
    critic = critic_for(tokenizer, centralized=True)
    chat = ChatFormat(tokenizer)
    learner = Learner(policy, frozen_reference(policy), TrainConfig().rl, aux_coef=0.0, critic=critic)
    for n in (2, 4, 3):  # the team grows and shrinks between iterations
        make_env = partial(scenarios.make, "navigation", n_agents=n, split="train", max_turns=4)
        batch = RolloutWorker(make_env, policy, chat).collect([0, 0, 1, 1], groups=[0, 0, 1, 1], sample_seed=n,
                                                              record_state=True)
        assert {ep.agent for ep in batch.episodes} == {f"agent_{i}" for i in range(n)}
        values, bootstrap = critic.batch_values(batch)
        assert values.shape == (len(batch.turns),) and bootstrap.shape == (len(batch.episodes),)
        # The agents acting on one state share one sequence (the state, then `agent <id>` per reader),
        # each read at the end of its own id: one forward per env step, distinct reads per agent.
        inputs = critic.inputs(batch, range(len(batch.episodes)))
        first_turns = [batch.episodes[e].turns[0] for e in range(n)]  # env 0's agents, turn 1
        where = []
        for i in first_turns:
            row = next(r for r, pos in enumerate(inputs.positions) if i in _reads_of(inputs, r))
            where.append((row, inputs.positions[row][_reads_of(inputs, row).index(i)]))
        assert len({row for row, _ in where}) == 1 and len({pos for _, pos in where}) == n
        row = where[0][0]
        assert batch.turns[first_turns[0]].state in tokenizer.decode(inputs.sequences[row])
        for e, (_, pos) in enumerate(where):
            assert tokenizer.decode(inputs.sequences[row][: pos + 1]).endswith(f"agent {batch.episodes[e].agent}")
        # A minibatch of one agent's episodes reads the very same sequence (readers come from the batch).
        alone = critic.inputs(batch, [0])
        assert inputs.sequences[row] in alone.sequences
        before = [p.detach().clone() for p in critic.model.parameters()]
        adv = gae_advantages(batch, values, bootstrap, gamma=1.0, lam=0.95)
        metrics = learner.update(batch, adv)
        assert np.isfinite(metrics["train/value_loss"])
        assert any(not torch.equal(a, b) for a, b in zip(before, critic.model.parameters(), strict=True))


def test_decentralized_critic_reads_exactly_the_agents_own_tokens(nav):
    _, make_env, tokenizer, policy = nav
    critic = critic_for(tokenizer, centralized=False)
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect([7], sample_seed=1)
    inputs = critic.inputs(batch, range(len(batch.episodes)))
    assert len(inputs.sequences) == len(batch.episodes)  # one forward per agent-episode
    for e, ep in enumerate(batch.episodes):
        seq, pos = inputs.sequences[e], inputs.positions[e]
        for k, i in enumerate(ep.turns):
            prompt = batch.turns[i].prompt_ids
            assert seq[: len(prompt)] == prompt and pos[k] == len(prompt) - 1
    # A causal trunk: the value before a turn does not change when later tokens change.
    seq = inputs.sequences[0]
    with torch.no_grad():
        full = critic.model.values([seq], [inputs.positions[0][:1]])
        cut = critic.model.values([seq[: inputs.positions[0][0] + 1]], [inputs.positions[0][:1]])
    assert torch.allclose(full, cut, atol=1e-5)


def test_only_unseen_cuts_bootstrap_from_the_state_they_were_left_in(nav):
    _, _, tokenizer, policy = nav
    make_env = partial(scenarios.make, "navigation", n_agents=3, split="train", max_turns=2)
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect([1, 2], sample_seed=0, record_state=True)
    truncated = [e for e, ep in enumerate(batch.episodes) if ep.reason == "max_turns"]
    assert truncated, "max_turns=2 must truncate some agents"
    # navigation shows "turn k of K": its budget ends the task, and no final state is ever read
    assert all(ep.budget_visible for ep in batch.episodes)
    for centralized in (True, False):
        assert all(r >= 0 for r in critic_for(tokenizer, centralized).inputs(batch, range(len(batch.episodes))).turns)
    for e in truncated:  # the same endings, had the cut come from outside (a budget the agent was not shown)
        batch.episodes[e].budget_visible = False
    for centralized in (True, False):
        inputs = critic_for(tokenizer, centralized).inputs(batch, range(len(batch.episodes)))
        assert {-1 - r for r in inputs.turns if r < 0} == set(truncated)
    assert all(batch.episodes[e].final_observation and batch.episodes[e].final_state for e in truncated)


def test_each_agent_is_played_and_scored_by_its_own_teams_model(tmp_path):
    cfg, make_env, tokenizer, predator = policy_for("predator_prey", 4, tmp_path)
    torch.manual_seed(1)
    prey_model = copy.deepcopy(predator.model)
    with torch.no_grad():
        for p in prey_model.parameters():
            p.add_(torch.randn_like(p) * 0.5)  # a clearly different model
    prey = LLMPolicy(prey_model, tokenizer)
    kind = scenarios.info("predator_prey").kind
    policies = PolicyMap({"team_predator": predator, "team_prey": prey},
                         partial(policy_id, "team", kind=kind))
    batch = RolloutWorker(make_env, policies, ChatFormat(tokenizer)).collect([0, 1], sample_seed=2)
    env = make_env()
    env.reset(seed=0)
    for ep in batch.episodes:
        assert ep.policy == f"team_{env.team_of(ep.agent)}"
    for pid, own, other in (("team_predator", predator, prey), ("team_prey", prey, predator)):
        part = subset(batch, lambda ep, pid=pid: ep.policy == pid)
        turns = part.turns
        assert turns and len(part.episodes) == 4
        args = ([t.prompt_ids for t in turns], [t.action_ids for t in turns], [t.allowed for t in turns])
        with torch.no_grad():
            mine, theirs = own.sequence_logprobs(*args), other.sequence_logprobs(*args)
        gap_own = max((mine.logprobs[r, : len(t.action_ids)].cpu() - torch.tensor(t.logprobs)).abs().max().item()
                      for r, t in enumerate(turns))
        gap_other = max((theirs.logprobs[r, : len(t.action_ids)].cpu() - torch.tensor(t.logprobs)).abs().max().item()
                        for r, t in enumerate(turns))
        assert gap_own < 1e-4 < gap_other


def test_loss_terms_are_named_weighted_logged_and_open(nav, tmp_path):
    cfg, make_env, tokenizer, policy = nav
    policy = LLMPolicy(copy.deepcopy(policy.model), tokenizer)
    chat = ChatFormat(tokenizer)
    worker = RolloutWorker(make_env, policy, chat)
    demos = conversations(chat, demonstration_episodes(worker, list(range(8))))
    rl = copy.deepcopy(cfg.rl)
    rl.ptx_coef, rl.value_coef, rl.entropy_coef = 0.7, 0.3, 0.01
    learner = Learner(policy, frozen_reference(policy), rl, aux_coef=0.001, critic=critic_for(tokenizer, False),
                      demonstrations=demos)
    learner.add_term("probe", lambda ctx: ctx.scores.logprobs.sum() * 0.0 + 2.0, weight=0.25)
    with pytest.raises(ValueError, match="already exists"):
        learner.add_term("kl", lambda ctx: torch.zeros(()), weight=1.0)
    batch = worker.collect([0, 0, 1, 1], groups=[0, 0, 1, 1], sample_seed=4)
    values, bootstrap = learner.critic.batch_values(batch)
    metrics = learner.update(batch, gae_advantages(batch, values, bootstrap, 1.0, 0.95))
    assert metrics["loss/probe"] == 2.0 and metrics["loss_weight/probe"] == 0.25
    assert metrics["loss_weight/ptx"] == 0.7 and metrics["loss_weight/value"] == 0.3
    assert metrics["loss_weight/entropy"] == -0.01 and metrics["loss_weight/moe_aux"] == 0.001
    for key in ("train/policy_loss", "train/value_loss", "train/ptx_loss", "train/kl", "train/entropy",
                "moe/aux_loss", "moe/rollout_train_logprob_gap", "moe/expert_load_max/layer_0"):
        assert np.isfinite(metrics[key]), key
    assert metrics["moe/rollout_train_logprob_gap"] < 1e-4  # same weights, same masks: same numbers
    total = sum(metrics[f"loss_weight/{k}"] * v for k, v in (
        ("policy", metrics["train/policy_loss"]), ("kl", metrics["train/kl"]),
        ("entropy", metrics["train/entropy"]), ("moe_aux", metrics["moe/aux_loss"]),
        ("ptx", metrics["train/ptx_loss"]), ("probe", 2.0)))
    assert metrics["train/loss"] == pytest.approx(total, rel=1e-4)  # means of a linear sum: exact
    # The value term steps the critic (no shared weights) in its own minibatches of whole teams:
    # 4 teams here, so min(critic.minibatches, 4) steps per epoch.
    steps = {int(st["step"]) for st in learner.critic.optimizer.state.values()}
    assert steps == {min(learner.critic.minibatches, 4) * rl.epochs}


def test_agent_specific_state_views_put_the_readers_own_line_at_its_read(nav):
    _, make_env, tokenizer, policy = nav
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect([2], sample_seed=0, record_state=True)
    agents = sorted({ep.agent for ep in batch.episodes})
    model = build_value_model("tiny-critic", len(tokenizer), tokenizer.pad_token_id, seed=0)
    for view in ("own_last", "own_team"):
        critic = Critic(model, tokenizer, ChatFormat(tokenizer), True, 1e-3, 1.0, state_view=view)
        inputs = critic.inputs(batch, range(len(batch.episodes)))
        assert sorted(r for r in inputs.turns if r >= 0) == list(range(len(batch.turns)))
        for row, seq in enumerate(inputs.sequences):
            # a read is a turn index, or -1 - e for episode e's truncation bootstrap
            episodes = [batch.turns[r].episode if r >= 0 else -1 - r for r in _reads_of(inputs, row)]
            readers = {batch.episodes[e].agent for e in episodes}
            assert len(readers) == 1  # a view is one agent's: no sharing of sequences across agents
            (agent,) = readers
            lines = tokenizer.decode(seq, skip_special_tokens=True).split("\n")
            # The reader's own state line comes last, then its id, where the value is read.
            assert lines[-1] == f"agent {agent}" and lines[-2].startswith(f"{agent}: ")
            assert inputs.positions[row] == [len(seq) - 1] * len(inputs.positions[row])
            held = [a for a in agents if a != agent and any(line.startswith(f"{a}: ") for line in lines)]
            assert held == ([a for a in agents if a != agent] if view == "own_last" else [])
            assert any(line.startswith("level=") for line in lines)  # the team's line stays in both views
    with pytest.raises(ValueError, match="state_view"):
        Critic(model, tokenizer, ChatFormat(tokenizer), True, 1e-3, 1.0, state_view="nope")


def test_with_own_view_reads_the_agents_conversation_with_the_state_before_each_turn(nav):
    _, _, tokenizer, policy = nav
    make_env = partial(scenarios.make, "navigation", n_agents=3, split="train", max_turns=5)
    batch = RolloutWorker(make_env, policy, ChatFormat(tokenizer)).collect([2], sample_seed=0, record_state=True)
    model = build_value_model("tiny-critic", len(tokenizer), tokenizer.pad_token_id, seed=0)
    critic = Critic(model, tokenizer, ChatFormat(tokenizer), True, 1e-3, 1.0, state_view="with_own")
    inputs = critic.inputs(batch, range(len(batch.episodes)))
    assert len(inputs.sequences) == len(batch.episodes)  # one forward per agent-episode
    for e, ep in enumerate(batch.episodes):
        seq, pos = inputs.sequences[e], inputs.positions[e]
        reads = _reads_of(inputs, e)
        assert [r for r in reads if r >= 0] == list(ep.turns)
        text = tokenizer.decode(seq)
        # Every turn's state comes before that turn's action, and the agent's own tokens are all there.
        for k, i in enumerate(ep.turns):
            before = tokenizer.decode(seq[: pos[k] + 1])
            lines = batch.turns[i].state.split("\n")  # the own_team view: team lines, then the agent's own
            own_team = [x for x in lines if not x.startswith("agent_")] + [x for x in lines if x.startswith(f"{ep.agent}: ")]
            assert before.endswith("\n".join(own_team) + f"\nagent {ep.agent}")
            assert tokenizer.decode(seq[pos[k] + 1 : pos[k] + 1 + len(batch.turns[i].action_ids)]) == \
                tokenizer.decode(batch.turns[i].action_ids)
        last = batch.turns[ep.turns[-1]]
        assert text.startswith(tokenizer.decode(last.prompt_ids[:5]))
    # Causal: the value before the first turn ignores everything after it.
    seq = inputs.sequences[0]
    with torch.no_grad():
        full = critic.model.values([seq], [inputs.positions[0][:1]])
        cut = critic.model.values([seq[: inputs.positions[0][0] + 1]], [inputs.positions[0][:1]])
    assert torch.allclose(full, cut, atol=1e-5)


def test_critic_minibatches_keep_each_team_together_and_cover_every_episode():
    from marl.engine.rollout import Episode, RolloutBatch

    episodes = [Episode(seed=0, group=g, agent=f"agent_{a}", env=env) for env, g in enumerate([0, 0, 1, 1, 2])
                for a in range(3)]
    batch = RolloutBatch([], episodes, 0, 0, 0.0, 0.0, 0.0)
    wanted = [e for e in range(len(episodes)) if e != 4]  # an agent-episode with no turns in the loss is left out
    for n in (1, 2, 3, 8):
        chunks = Critic.team_chunks(batch, wanted, n, np.random.default_rng(n))
        assert len(chunks) == min(n, 5)
        assert sorted(e for c in chunks for e in c) == wanted
        for chunk in chunks:  # a team (one env) never straddles two minibatches
            envs = {episodes[e].env for e in chunk}
            assert all(e in chunk for e in wanted if episodes[e].env in envs)


def test_critic_warmup_steps_the_critic_and_leaves_the_policy_untouched(nav):
    cfg, make_env, tokenizer, policy = nav
    policy = LLMPolicy(copy.deepcopy(policy.model), tokenizer)
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    learner = Learner(policy, frozen_reference(policy), copy.deepcopy(cfg.rl), aux_coef=0.001,
                      critic=critic_for(tokenizer, False))
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    critic_before = {k: v.clone() for k, v in learner.critic.model.state_dict().items()}
    kl_before = learner.kl.value
    batch = worker.collect([0, 1], sample_seed=2)
    values, bootstrap = learner.critic.batch_values(batch)
    metrics = learner.update(batch, gae_advantages(batch, values, bootstrap, 1.0, 0.95), train_policy=False)
    assert all(torch.equal(before[k], v) for k, v in policy.model.state_dict().items())
    assert not learner.optimizer.state  # the policy's Adam never stepped
    assert learner.kl.value == kl_before and metrics["train/critic_warmup"] == 1.0
    assert "train/policy_loss" not in metrics and np.isfinite(metrics["train/value_loss"])
    assert any(not torch.equal(critic_before[k], v) for k, v in learner.critic.model.state_dict().items())
    critic_free = Learner(policy, frozen_reference(policy), copy.deepcopy(cfg.rl), aux_coef=0.001)
    with pytest.raises(ValueError, match="needs a critic"):
        critic_free.update(batch, gae_advantages(batch, values, bootstrap, 1.0, 0.95), train_policy=False)


def test_own_and_state_critic_adds_an_own_part_and_a_state_part(nav, tmp_path):
    _, _, tokenizer, policy = nav
    chat = ChatFormat(tokenizer)
    make_env = partial(scenarios.make, "navigation", n_agents=3, split="train", max_turns=3)
    batch = RolloutWorker(make_env, policy, chat).collect([1, 2], sample_seed=0, record_state=True)
    assert any(ep.reason == "max_turns" for ep in batch.episodes)  # bootstrap reads are aligned too
    model = build_critic_model("tiny-critic", "own_and_state", len(tokenizer), tokenizer.pad_token_id, seed=0)
    fused = Critic(model, tokenizer, chat, True, 1e-3, 1.0, state_view="own_and_state")
    values, bootstrap = fused.batch_values(batch)
    assert not values.any() and not bootstrap.any()  # zero heads: it starts as a constant 0, like the others
    for part, bias in zip(model.parts, (0.3, -0.1), strict=True):
        torch.nn.init.normal_(part.head.weight, std=0.5, generator=torch.Generator().manual_seed(7))
        torch.nn.init.constant_(part.head.bias, bias)
    own = Critic(model.parts[0], tokenizer, chat, False, 1e-3, 1.0)
    state = Critic(model.parts[1], tokenizer, chat, True, 1e-3, 1.0)
    values, bootstrap = fused.batch_values(batch)
    (own_v, own_b), (state_v, state_b) = own.batch_values(batch), state.batch_values(batch)
    # Each read's value is the own conversation's part plus the global state's part for that same read.
    np.testing.assert_allclose(values, own_v + state_v, atol=1e-5)
    np.testing.assert_allclose(bootstrap, own_b + state_b, atol=1e-5)
    assert np.abs(state_v).max() > 1e-3 and np.abs(own_v - values).max() > 1e-3  # both parts count
    inputs = fused.inputs(batch, range(len(batch.episodes)))
    fused.predict(inputs).pow(2).mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in (model.parts[0].head.weight,
                                                                        model.parts[1].head.weight))
    # Saved and built again (a checkpoint's critic, or --critic.model <folder>): the same values.
    fused.optimizer.zero_grad(set_to_none=True)
    model.save(tmp_path / "critic")
    again = build_critic_model(str(tmp_path / "critic"), "own_and_state", len(tokenizer), tokenizer.pad_token_id)
    np.testing.assert_allclose(Critic(again, tokenizer, chat, True, 1e-3, 1.0, state_view="own_and_state")
                               .batch_values(batch)[0], values, atol=1e-5)
    with pytest.raises(ValueError, match="own_and_state"):
        Critic(model.parts[0], tokenizer, chat, True, 1e-3, 1.0, state_view="own_and_state")
    with pytest.raises(ValueError, match="SummedValueModel"):
        Critic(model, tokenizer, chat, True, 1e-3, 1.0, state_view="own_last")


def test_a_critic_keeps_no_batch_alive_and_reads_each_batch_afresh(nav):
    import gc
    import weakref

    _, make_env, tokenizer, policy = nav
    worker = RolloutWorker(make_env, policy, ChatFormat(tokenizer))
    critic = critic_for(tokenizer, centralized=True)
    first = worker.collect([1, 2], greedy=True, record_state=True)
    values, _ = critic.batch_values(first)
    gone = weakref.ref(first)
    del first
    gc.collect()
    assert gone() is None  # a finished iteration's records are freed before the next rollout
    second = worker.collect([3, 4], greedy=True, record_state=True)
    again, _ = critic.batch_values(second)
    fresh, _ = critic_for(tokenizer, centralized=True).batch_values(second)
    np.testing.assert_allclose(again, fresh, atol=1e-5)  # nothing read from the first batch's caches
    assert len(again) == len(second.turns) and values.shape[0] > 0
