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


def test_a_harness_fault_masks_the_whole_team_where_the_team_shares_one_outcome(monkeypatch):
    # info_split with every world tool down: whoever calls one ends with `error`, and in a cooperative
    # team every teammate's episode (whatever its own ending) leaves the loss and the group baselines too.
    from functools import partial

    import scenarios
    from marl.engine.rollout import RolloutWorker, expert_actor
    from scenarios.tool_use import tools

    def down(world, args):
        raise RuntimeError("backend down")

    for name in list(tools.BACKENDS):
        monkeypatch.setitem(tools.BACKENDS, name, down)
    worker = RolloutWorker(partial(scenarios.make, "info_split", n_agents=3, split="basic"), None, None)
    batch = worker.collect([1, 1, 2, 2], groups=[0, 0, 1, 1], actor=expert_actor)
    faulted_envs = {e.env for e in batch.episodes if e.reason in ("error", "timeout")}
    assert faulted_envs and any(e.reason not in ("error", "timeout") for e in batch.episodes if e.env in faulted_envs)
    assert all(e.harness_fault == (e.env in faulted_envs) for e in batch.episodes)
    out = group_advantages(batch.episodes)
    assert out.harness_faults == sum(e.env in faulted_envs for e in batch.episodes)
    assert not any(out.include[i] for i, e in enumerate(batch.episodes) if e.env in faulted_envs)


@pytest.mark.parametrize(("kind", "masked"), [("cooperative", {"a", "b", "c"}), ("mixed", {"a", "b"}),
                                             ("competitive", {"a"}), ("single", {"a"})])
def test_which_teammates_a_fault_masks(kind, masked):
    from marl.engine.rollout import mark_harness_faults

    team = {"a": "predator", "b": "predator", "c": "prey"}
    episodes = [Episode(seed=0, group=0, agent=a, env=0, team=team[a] if kind == "mixed" else "",
                        reason="error" if a == "a" else "success") for a in "abc"]
    mark_harness_faults(episodes, [kind])
    assert {e.agent for e in episodes if e.harness_fault} == masked
