"""A scenario that raises in reset or step: the rollout replaces the environment, ends its agents' episodes as
a harness fault, counts the crash, and stops past the limit; the other environments play on unchanged."""

import pytest

import scenarios
from marl.engine.errors import EnvCrashError
from marl.engine.rollout import RolloutWorker, expert_actor


class Crashing:
    """A real environment whose `method` raises on its `on_call`-th call (every other attribute is the env's)."""

    def __init__(self, env, method: str, on_call: int) -> None:
        self.env, self.method, self.on_call, self.calls = env, method, on_call, 0

    def __getattr__(self, name):
        real = getattr(self.env, name)
        if name != self.method:
            return real

        def crashing(*args, **kwargs):
            self.calls += 1
            if self.calls == self.on_call:
                raise RuntimeError("simulated scenario bug")
            return real(*args, **kwargs)
        return crashing


class Flaky:
    """An info_split factory whose k-th environment built raises on one call of `step` or `reset`."""

    def __init__(self, step_crash: dict[int, int] | None = None, reset_crash: dict[int, int] | None = None) -> None:
        self.step_crash, self.reset_crash, self.built = step_crash or {}, reset_crash or {}, 0

    def __call__(self):
        env = scenarios.make("info_split", n_agents=3, split="train")
        k, self.built = self.built, self.built + 1
        if k in self.step_crash:
            return Crashing(env, "step", self.step_crash[k])
        if k in self.reset_crash:
            return Crashing(env, "reset", self.reset_crash[k])
        return env


def outcomes(batch):
    return [(ep.env, ep.agent, ep.reason, ep.harness_fault) for ep in batch.episodes]


def test_a_crash_in_step_ends_that_env_as_a_harness_fault_and_a_fresh_env_takes_its_place(caplog):
    clean = RolloutWorker(Flaky(), None, None).collect([0, 1, 2], actor=expert_actor)
    worker = RolloutWorker(Flaky(step_crash={1: 2}), None, None)
    batch = worker.collect([0, 1, 2], actor=expert_actor)
    assert worker.env_crashes == 1
    assert "environment crashed in step (seed 1): RuntimeError: simulated scenario bug" in caplog.text
    crashed = [ep for ep in batch.episodes if ep.env == 1]
    assert [ep.reason for ep in crashed] == ["error"] * 3 and all(ep.harness_fault for ep in crashed)
    assert all(len(ep.turns) == 1 for ep in crashed)  # the step that crashed left no turn
    others = [o for o in outcomes(batch) if o[0] != 1]
    assert others == [o for o in outcomes(clean) if o[0] != 1]
    assert outcomes(worker.collect([0, 1, 2], actor=expert_actor)) == outcomes(clean)  # the replacement plays clean


def test_a_crash_in_reset_is_retried_on_a_fresh_env_and_the_episode_plays_normally():
    clean = RolloutWorker(Flaky(), None, None).collect([5, 6], actor=expert_actor)
    worker = RolloutWorker(Flaky(reset_crash={0: 1}), None, None)
    assert outcomes(worker.collect([5, 6], actor=expert_actor)) == outcomes(clean)
    assert worker.env_crashes == 1


def test_past_the_limit_the_rollout_stops_with_a_message_naming_the_setting():
    worker = RolloutWorker(Flaky(step_crash={0: 1, 1: 1}), None, None, max_env_crashes=1)
    with pytest.raises(EnvCrashError, match="guards.max_env_crashes"):
        worker.collect([0, 1], actor=expert_actor)
