"""The rollout's turn cache on a real multi-agent scenario: same episodes as re-reading every turn, less prefill."""

import numpy as np
import pytest

import comms
import scenarios
from marl.config import TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import build_policy
from marl.run.exploration import ExploreRate
from policies.chat import ChatFormat


def _shared_info_split():
    return comms.wrap(scenarios.make("info_split", n_agents=3, split="train"), "full")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    cfg = TrainConfig(seed=0, scenario="info_split", agents=3)
    cfg.policy.tokenizer_episodes = 60
    tokenizer, _, policy = build_policy(cfg, _shared_info_split, tmp_path_factory.mktemp("runs"),
                                        np.random.default_rng(0))
    return tokenizer, policy


def test_turn_cache_changes_nothing_but_the_prefill(setup):
    # (tool_use, one agent, goes through the cache in tests/marl/test_rl_step.py's logprob check)
    tokenizer, policy = setup
    batches = [RolloutWorker(_shared_info_split, policy, ChatFormat(tokenizer), turn_cache=on)
               .collect(list(range(6)), sample_seed=4) for on in (False, True)]
    plain, cached = batches
    assert [e.transcript for e in plain.episodes] == [e.transcript for e in cached.episodes]
    assert max(len(e.turns) for e in cached.episodes) >= 3  # several turns, so later ones used the cache
    worst = max(abs(a - b) for x, y in zip(plain.turns, cached.turns, strict=True)
                for a, b in zip(x.logprobs, y.logprobs, strict=True))
    assert worst < 1e-4
    assert plain.reused_prompt_tokens == 0 and cached.reused_prompt_tokens > 0
    # every call's prompts are counted, and the cache's share comes off what the model read
    for batch in batches:
        assert batch.prompt_tokens == sum(len(t.prompt_ids) for t in batch.turns if t.action_ids)
        assert batch.processed_tokens == batch.prompt_tokens - batch.reused_prompt_tokens + batch.generated_tokens
    assert cached.processed_tokens < plain.processed_tokens


def test_a_row_bound_plays_the_envs_in_parts_with_the_same_records(setup):
    # 5 envs x 3 agents under a bound of 6 rows: parts of 2 envs. The episodes are what one collection
    # plays (greedy), each team keeps an env index of its own, and turns point to their episodes.
    tokenizer, policy = setup
    seeds = [7, 7, 8, 9, 9]
    whole = RolloutWorker(_shared_info_split, policy, ChatFormat(tokenizer)).collect(seeds, greedy=True)
    worker = RolloutWorker(_shared_info_split, policy, ChatFormat(tokenizer), max_rows=6)
    parts = worker.collect(seeds, greedy=True)
    assert len(worker.envs) == 2  # never more envs (and KV-cache rows) at once than the bound allows
    assert [(e.seed, e.agent, e.transcript) for e in parts.episodes] == [
        (e.seed, e.agent, e.transcript) for e in whole.episodes]
    assert [e.env for e in parts.episodes] == [e.env for e in whole.episodes]
    assert (parts.prompt_tokens, parts.generated_tokens) == (whole.prompt_tokens, whole.generated_tokens)
    for e, ep in enumerate(parts.episodes):
        assert all(parts.turns[i].episode == e for i in ep.turns)
    with pytest.raises(ValueError, match="max_rows"):
        RolloutWorker(_shared_info_split, policy, ChatFormat(tokenizer), max_rows=-1)


def test_exploring_collections_mark_the_turns_that_explored(setup):
    # rl.explore reaches the policy through a collection; evaluation (greedy) never explores
    tokenizer, policy = setup
    worker = RolloutWorker(_shared_info_split, policy, ChatFormat(tokenizer))
    sampled = worker.collect(list(range(4)), sample_seed=4, explore=0.5)
    share = sum(t.explored for t in sampled.turns) / len(sampled.turns)
    assert 0.2 < share < 0.8
    assert not any(t.explored for t in worker.collect(list(range(4)), sample_seed=4).turns)
    assert not any(t.explored for t in worker.collect(list(range(2)), greedy=True, explore=0.5).turns)


def test_an_episode_unit_explores_a_team_as_often_as_one_agent(setup):
    # rl.explore_unit=episode: the per-action chance is the share over the learners' actions per episode
    tokenizer, policy = setup
    worker = RolloutWorker(_shared_info_split, policy, ChatFormat(tokenizer))
    per_episode = ExploreRate(0.5, "episode")
    assert per_episode.per_action() == 0.0  # nothing measured yet
    first = worker.collect(list(range(4)), sample_seed=4)
    assert per_episode.observe(first) == {"rollout/explored_share": 0.0, "rollout/explored_episodes": 0.0,
                                          "rollout/explore_chance": 0.0}
    acted = sum(1 for t in first.turns if t.action_ids)
    assert acted > 4 * 3 and per_episode.per_action() == pytest.approx(0.5 * 4 / acted)
    # per action, a team's episode holds an explored action far more often than an action explores
    per_action = ExploreRate(0.3, "action")
    measured = per_action.observe(worker.collect(list(range(4)), sample_seed=5, explore=per_action.per_action()))
    assert 0.1 < measured["rollout/explored_share"] < 0.5 and measured["rollout/explored_episodes"] == 1.0
    assert "rollout/explore_chance" not in measured and per_action.per_action() == 0.3
