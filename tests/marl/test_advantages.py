"""Group baselines: per (seed, agent) normalization, zero-variance groups dropped, harness faults masked."""

import numpy as np
import pytest

from marl.engine.advantages import group_advantages
from marl.engine.rollout import Episode


def ep(group: int, ret: float, agent: str = "agent_0", reason: str = "failure") -> Episode:
    return Episode(seed=group, group=group, agent=agent, ret=ret, reason=reason)


def test_advantages_are_normalized_within_each_group():
    episodes = [ep(0, 1.0), ep(0, 0.0), ep(0, 0.0), ep(0, 1.0), ep(1, 5.0), ep(1, 3.0)]
    out = group_advantages(episodes)
    assert out.include.all()
    np.testing.assert_allclose(out.advantages[:4], [1, -1, -1, 1], atol=1e-5)
    # Group 1 has a different scale but the same normalized advantages: groups never mix.
    np.testing.assert_allclose(out.advantages[4:], [1, -1], atol=1e-5)


def test_zero_variance_groups_are_dropped_and_counted():
    episodes = [ep(0, 1.0), ep(0, 1.0), ep(1, 0.0), ep(1, 1.0)]
    out = group_advantages(episodes)
    assert out.zero_variance_groups == 1
    assert not out.include[:2].any() and out.include[2:].all()
    assert out.groups == 2


def test_agents_are_normalized_separately():
    # agent_1's returns are 100x larger; per-agent groups keep agent_0's advantages intact.
    episodes = [ep(0, 1.0, "agent_0"), ep(0, 0.0, "agent_0"), ep(0, 100.0, "agent_1"), ep(0, 0.0, "agent_1")]
    out = group_advantages(episodes)
    np.testing.assert_allclose(out.advantages, [1, -1, 1, -1], atol=1e-5)


@pytest.mark.parametrize("reason", ["timeout", "error"])
def test_harness_faults_are_out_of_loss_and_baseline(reason):
    # Without masking, the faulty episode's 0 would pull the baseline down and give the others credit.
    episodes = [ep(0, 1.0), ep(0, 0.0), ep(0, -3.0, reason=reason)]
    out = group_advantages(episodes)
    assert out.harness_faults == 1
    assert not out.include[2]
    np.testing.assert_allclose(out.advantages[:2], [1, -1], atol=1e-5)


def test_truncated_episodes_count_with_reward_so_far():
    episodes = [ep(0, 0.3, reason="max_turns"), ep(0, 1.2, reason="success")]
    out = group_advantages(episodes)
    assert out.include.all()
    assert out.advantages[0] < 0 < out.advantages[1]
