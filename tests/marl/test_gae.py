"""Per-turn GAE and the running baseline: hand-computed cases, endings, masks and per-agent normalization."""

import numpy as np
import pytest

from marl.engine.advantages import RunningBaseline, bootstrap_needed, discounted_to_go, gae, gae_advantages
from marl.engine.rollout import Episode, RolloutBatch, Turn


def test_gae_matches_a_hand_computed_terminal_case():
    # gamma 0.9, lambda 0.8; terminal, so the value after the last turn is 0:
    # d2 = 1 - 0.8 = 0.2; d1 = 0.9*0.8 - 0.6 = 0.12; d0 = 0.9*0.6 - 0.5 = 0.04; gl = 0.72
    adv, ret = gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.8], bootstrap=0.0, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(adv, [0.04 + 0.72 * 0.264, 0.12 + 0.72 * 0.2, 0.2], atol=1e-12)
    np.testing.assert_allclose(ret, adv + [0.5, 0.6, 0.8], atol=1e-12)


def test_gae_bootstraps_a_truncation_from_the_value():
    # Same turns, truncated: the value 0.5 of the state left behind enters the last delta.
    adv, _ = gae([0.0, 0.0, 1.0], [0.5, 0.6, 0.8], bootstrap=0.5, gamma=0.9, lam=0.8)
    d2 = 1.0 + 0.9 * 0.5 - 0.8
    d1 = 0.12 + 0.72 * d2
    np.testing.assert_allclose(adv, [0.04 + 0.72 * d1, d1, d2], atol=1e-12)


def test_gae_with_lambda_one_and_no_discount_is_return_minus_value():
    adv, ret = gae([0.2, -0.1, 1.0], [0.3, 0.1, 0.4], bootstrap=0.0, gamma=1.0, lam=1.0)
    np.testing.assert_allclose(ret, [1.1, 0.9, 1.0], atol=1e-12)
    np.testing.assert_allclose(adv, [0.8, 0.8, 0.6], atol=1e-12)


def test_the_empirical_return_is_the_discounted_reward_earned_from_each_turn_on():
    np.testing.assert_allclose(discounted_to_go([0.0, 0.5, 1.0], 0.9), [0.45 + 0.81, 0.5 + 0.9, 1.0])


def make_batch(specs):
    """specs: list of (agent, reason, rewards) -> a RolloutBatch with one turn per reward."""
    turns, episodes = [], []
    for e, (agent, reason, rewards) in enumerate(specs):
        ids = []
        for r in rewards:
            ids.append(len(turns))
            turns.append(Turn(episode=e, prompt_ids=[1], action_ids=[2], logprobs=[0.0], allowed=None,
                              reward=r, invalid=False))
        episodes.append(Episode(seed=e, group=0, agent=agent, turns=ids, ret=sum(rewards), reason=reason))
    return RolloutBatch(turns, episodes, 0, 0, 0.0, 0.0, 0.0)


def test_only_cuts_the_agent_could_not_see_read_their_bootstrap():
    batch = make_batch([("agent_0", "success", [0.0, 1.0]), ("agent_0", "max_turns", [0.0, 0.0]),
                        ("agent_0", "failure", [0.0, 0.0])])
    values = np.zeros(6)
    bootstrap = np.array([7.0, 0.5, 7.0])  # 7.0 would show up if a terminal episode read it
    out = gae_advantages(batch, values, bootstrap, gamma=1.0, lam=1.0, normalize_key=lambda a: a)
    np.testing.assert_allclose(out.returns, [1.0, 1.0, 0.5, 0.5, 0.0, 0.0])
    assert [bootstrap_needed(ep) for ep in batch.episodes] == [False, True, False]
    # The targets of the cut episode carry its bootstrap (mean 3/6); what was earned does not (2/6).
    assert out.metrics()["train/empirical_return_mean"] == pytest.approx(2 / 6)
    assert out.metrics()["train/return_target_mean"] == pytest.approx(3 / 6)
    # A budget the agent was shown ends the task: valued like a terminal ending, nothing after it.
    batch.episodes[1].budget_visible = True
    seen = gae_advantages(batch, values, bootstrap, gamma=1.0, lam=1.0, normalize_key=lambda a: a)
    np.testing.assert_allclose(seen.returns, [1.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    assert not any(bootstrap_needed(ep) for ep in batch.episodes)


@pytest.mark.parametrize("reason", ["timeout", "error"])
def test_harness_faults_are_out_of_the_loss_and_the_normalization(reason):
    batch = make_batch([("agent_0", "success", [1.0]), ("agent_0", "failure", [0.0]), ("agent_0", reason, [-50.0])])
    out = gae_advantages(batch, np.zeros(3), np.zeros(3), 1.0, 1.0)
    assert out.harness_faults == 1
    assert out.include.tolist() == [True, True, False]
    np.testing.assert_allclose(out.advantages[:2], [1.0, -1.0], atol=1e-5)  # -50 never entered the stats


def test_advantages_are_normalized_per_agent_not_across_agents():
    batch = make_batch([("agent_0", "success", [1.0]), ("agent_0", "failure", [0.0]),
                        ("agent_1", "success", [100.0]), ("agent_1", "failure", [0.0])])
    out = gae_advantages(batch, np.zeros(4), np.zeros(4), 1.0, 1.0)
    np.testing.assert_allclose(out.advantages, [1, -1, 1, -1], atol=1e-5)
    by_role = gae_advantages(batch, np.zeros(4), np.zeros(4), 1.0, 1.0, normalize_key=lambda a: "team")
    # One key for both agents: agent_0's signal is crushed by agent_1's scale (why we never do this).
    assert abs(by_role.advantages[0] - by_role.advantages[1]) < 0.1


def test_agents_that_finish_early_have_no_turns_after_their_end():
    # agent_0 succeeds after one turn; agent_1 plays three. agent_0's advantage depends on its own turn
    # only, and none of agent_1's later rewards leak into it.
    batch = make_batch([("agent_0", "success", [1.0]), ("agent_1", "failure", [0.0, 0.0, 5.0])])
    out = gae_advantages(batch, np.zeros(4), np.zeros(2), 1.0, 1.0)
    assert out.include.sum() == 4
    np.testing.assert_allclose(out.returns, [1.0, 5.0, 5.0, 5.0])


def test_running_baseline_is_per_role_and_moves_slowly():
    eps = [Episode(seed=0, group=0, agent=a, ret=r, reason="success") for a, r in
           [("agent_0", 1.0), ("agent_0", 3.0), ("agent_1", -10.0), ("agent_1", -12.0)]]
    baseline = RunningBaseline(momentum=0.9)
    first = baseline(eps, role_of=lambda a: a)
    np.testing.assert_allclose(first.advantages, [-1, 1, 1, -1], atol=1e-5)  # each role against itself
    assert first.include.all() and first.groups == 0
    later = [Episode(seed=1, group=0, agent="agent_0", ret=5.0, reason="success")]
    second = baseline(later, role_of=lambda a: a)
    assert second.advantages[0] > 0  # 5 beats the running mean of 2
    assert baseline.mean["agent_0"] == pytest.approx(0.9 * 2.0 + 0.1 * 5.0)
    fault = [Episode(seed=2, group=0, agent="agent_0", ret=-99.0, reason="timeout")]
    before = dict(baseline.mean)
    assert baseline(fault, role_of=lambda a: a).harness_faults == 1
    assert baseline.mean == before


def test_running_baseline_never_divides_by_a_zero_spread():
    baseline = RunningBaseline(momentum=0.9)
    failures = [Episode(seed=0, group=0, agent="agent_0", ret=0.0, reason="failure") for _ in range(2)]
    first = baseline(failures, role_of=lambda a: a)
    np.testing.assert_allclose(first.advantages, [0.0, 0.0])
    mixed = [Episode(seed=1, group=0, agent="agent_0", ret=r, reason="success") for r in (1.0, 0.0)]
    second = baseline(mixed, role_of=lambda a: a)
    assert np.all(np.abs(second.advantages) <= 1.0)  # centred only: never a 1e6 spike


def test_explained_variance_is_measured_on_the_batch_with_the_values_gae_used():
    batch = make_batch([("agent_0", "success", [0.0, 1.0]), ("agent_1", "failure", [0.0, 0.0]),
                        ("agent_0", "success", [0.5, 0.5])])
    returns_to_go = np.array([1.0, 1.0, 0.0, 0.0, 1.0, 0.5])
    bootstrap = np.zeros(3)
    exact = gae_advantages(batch, returns_to_go, bootstrap, gamma=1.0, lam=0.95)
    assert exact.metrics()["train/explained_variance"] == pytest.approx(1.0)  # values = targets
    blind = gae_advantages(batch, np.zeros(6), bootstrap, gamma=1.0, lam=1.0)
    assert blind.metrics()["train/explained_variance"] == pytest.approx(0.0)  # explains nothing
    off = gae_advantages(batch, returns_to_go + np.array([0.5, -0.5, 0.5, -0.5, 0.5, -0.5]), bootstrap, 1.0, 1.0)
    assert off.metrics()["train/explained_variance"] < 0  # worse than the mean
