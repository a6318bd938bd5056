"""Resume points: a run continued from one ends bit-identical to a run never stopped; saves are atomic.

The in-process tests resume from an intermediate point of a finished run (what a killed run leaves);
the slow test kills real `marl train` subprocesses with SIGKILL at random moments and resumes them.
"""

import dataclasses
import json
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from mlflow.tracking import MlflowClient
from run_helpers import tiny
from safetensors.torch import load_file

from marl.config import CurriculumConfig, OpponentPoolConfig, TrainConfig
from marl.run import outputs as outputs_mod
from marl.run import resume as resume_mod
from marl.run.checkpoint import CheckpointError
from marl.run.resume import find_resume_point, load_resume_point, points
from marl.run.train import train


def weights(checkpoint: Path) -> dict[str, torch.Tensor]:
    out = {}
    for f in sorted(checkpoint.rglob("*.safetensors")):
        out.update({f"{f.relative_to(checkpoint)}:{k}": v for k, v in load_file(f).items()})
    return out


def assert_identical(a: Path | dict[str, torch.Tensor], b: Path) -> None:
    wa, wb = weights(a) if isinstance(a, Path) else a, weights(b)
    assert wa.keys() == wb.keys() and wa
    for key in wa:
        assert torch.equal(wa[key], wb[key]), key


def run_cfg(tmp_path, **fields):
    cfg = tiny(tmp_path, **fields)
    cfg.iterations, cfg.eval_episodes = 4, 0
    cfg.rl.ptx_coef = 0.1  # demonstrations drawn again on resume must be the same ones
    cfg.checkpoint.every, cfg.checkpoint.keep = 1, 10
    return cfg


@pytest.mark.parametrize("algo", ["grpo", pytest.param("mappo", marks=pytest.mark.slow)])
def test_a_run_resumed_from_a_middle_point_ends_bit_identical(tmp_path, algo):
    whole = train(run_cfg(tmp_path / "whole", algo=algo))
    run_dir = whole.checkpoint.parent
    found = points(run_dir / "resume")
    assert [p.name for p in found] == [f"it-{i:06d}" for i in range(5)]  # after SFT, then every iteration
    expected = weights(whole.checkpoint)
    shutil.rmtree(whole.checkpoint)  # the resumed run writes it again (its saved config names the same folder)
    for later in found[3:]:
        shutil.rmtree(later)
    resumed = train(dataclasses.replace(run_cfg(tmp_path / "other"), resume=str(found[2])))
    assert resumed.run_id == whole.run_id  # the same MLflow run, continued
    assert_identical(expected, resumed.checkpoint)
    client = MlflowClient(run_cfg(tmp_path / "whole").tracking.tracking_uri)
    run = client.get_run(whole.run_id)
    assert run.info.status == "FINISHED" and run.data.tags["resumed_after_iteration"] == "2"
    steps = [m.step for m in client.get_metric_history(whole.run_id, "progress/env_steps")]
    assert sorted(set(steps)) == [1, 2, 3, 4]


def test_a_run_with_an_opponent_pool_resumes_bit_identical_with_its_snapshots_and_records(tmp_path):
    def cfg_at(where):
        cfg = run_cfg(where, scenario="repeated_game", agents=2, scenario_options={"pairing": "self", "rounds": 3},
                      pool=OpponentPoolConfig(sampling="pfsp", snapshot_every=1, max_snapshots=2, eval_episodes=2))
        cfg.rl.ptx_coef = 0.0
        return cfg
    whole = train(cfg_at(tmp_path / "whole"))
    found = points(whole.checkpoint.parent / "resume")
    expected, pool = weights(whole.checkpoint), json.loads((whole.checkpoint / "pool" / "pool.json").read_text())
    assert len(load_resume_point(found[2]).state["pool"]["snapshots"]) == 2  # snapshots after iterations 1 and 2
    shutil.rmtree(whole.checkpoint)
    for later in found[3:]:
        shutil.rmtree(later)
    resumed = train(dataclasses.replace(cfg_at(tmp_path / "other"), resume=str(found[2])))
    assert_identical(expected, resumed.checkpoint)  # the learner and every snapshot in the pool
    assert json.loads((resumed.checkpoint / "pool" / "pool.json").read_text()) == pool


@pytest.mark.slow
def test_a_curriculum_run_resumed_after_a_promotion_brings_its_newcomers_back_identical(tmp_path):
    """Under agent mapping a promotion adds policies and learners; the resumed run rebuilds them from the point."""
    def cfg_at(where):
        cfg = run_cfg(where, scenario="repeated_game", policy_mapping="agent",
                      curriculum=CurriculumConfig(stages=("agents=2", "agents=3"), promote_at=0.05, demote_at=0.0,
                                                  hysteresis=0.0, window=4, min_episodes=2))
        cfg.scenario_options, cfg.rl.ptx_coef = {"rounds": 3}, 0.0
        return cfg

    whole = train(cfg_at(tmp_path / "whole"))
    found = points(whole.checkpoint.parent / "resume")
    assert len(load_resume_point(found[2]).state["learners"]) == 3  # agent_2 joined at the first promotion
    expected = weights(whole.checkpoint)
    moves = json.loads((whole.checkpoint / "curriculum.json").read_text())
    shutil.rmtree(whole.checkpoint)
    resumed = train(dataclasses.replace(cfg_at(tmp_path / "other"), resume=str(found[2])))
    assert_identical(expected, resumed.checkpoint)
    again = json.loads((resumed.checkpoint / "curriculum.json").read_text())
    assert again["history"] == moves["history"] and again["trace"] == moves["trace"] and moves["promotions"] >= 1


def test_keep_prunes_old_points_and_a_kill_during_a_save_leaves_the_previous_one(tmp_path, monkeypatch):
    cfg = run_cfg(tmp_path)
    cfg.checkpoint.every, cfg.checkpoint.keep = 2, 2
    cfg.checkpoint.eval_every, cfg.checkpoint.eval_episodes, cfg.eval_splits = 2, 3, ("basic", "hard")
    cfg.checkpoint.eval_skip_seeds = 40
    played = []
    real_evaluate = outputs_mod.evaluate
    monkeypatch.setattr(outputs_mod, "evaluate", lambda worker, seeds, **kw: (played.append(list(seeds)),
                                                                              real_evaluate(worker, seeds, **kw))[1])
    result = train(cfg)
    run_dir = result.checkpoint.parent
    # each evaluation during training plays the 3 seeds after the first 40 of each split
    periodic = [seeds for seeds in played if len(seeds) == 3]
    assert len(periodic) == 4 and all(s == list(range(s[0], s[0] + 3)) for s in periodic)
    assert {s[0] % 1_000_000 for s in periodic} == {40}
    assert [p.name for p in points(run_dir / "resume")] == ["it-000002", "it-000004"]
    # held-out evaluation during training, and the best checkpoint by it
    client = MlflowClient(cfg.tracking.tracking_uri)
    assert [m.step for m in client.get_metric_history(result.run_id, "eval/mean_success_rate")] == [2, 4]
    tags = client.get_run(result.run_id).data.tags
    assert tags["best_iteration"] in ("2", "4") and (run_dir / "best" / "marl_checkpoint.json").is_file()
    best = json.loads((run_dir / "best" / "marl_checkpoint.json").read_text())
    assert str(best["iteration"]) == tags["best_iteration"]
    good = find_resume_point(run_dir)  # a run folder finds its newest point
    assert good.name == "it-000004"
    with pytest.raises(CheckpointError, match="holds no resume point"):
        find_resume_point(tmp_path)
    before = load_resume_point(good)

    def dies(*args, **kwargs):
        raise KeyboardInterrupt("killed mid-save")

    monkeypatch.setattr(resume_mod.torch, "save", dies)
    with pytest.raises(KeyboardInterrupt):
        resume_mod.save_resume_point(run_dir, dict(before.info, iteration=5), before.state, before.tokenizer(), keep=2)
    assert (run_dir / "resume" / "it-000005.tmp").is_dir()  # the torn write is there ...
    assert find_resume_point(run_dir) == good  # ... and never taken for a point, nor does it prune one
    assert load_resume_point(run_dir).iteration == 4
    assert [p.name for p in points(run_dir / "resume")] == ["it-000002", "it-000004"]


_KILL_MID_SAVE = """
import os, signal, sys
from pathlib import Path
from marl.run import resume

run_dir, stage = Path(sys.argv[1]), sys.argv[2]
point = resume.load_resume_point(run_dir)
real_save, real_fsync = resume.torch.save, resume._fsync

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def half_written(obj, path):  # the state file torn halfway, then the process is gone
    real_save(obj, path)
    data = Path(path).read_bytes()
    Path(path).write_bytes(data[: len(data) // 2])
    die()

def fsync_then_die(path):
    real_fsync(path)
    if (stage == "before-rename" and path.name.endswith(".tmp")) or (stage == "before-prune" and path.name == "resume"):
        die()

resume.torch.save = half_written if stage == "mid-state" else real_save
resume._fsync = fsync_then_die
resume.save_resume_point(run_dir, dict(point.info, iteration=point.iteration + 1), point.state, point.tokenizer(), keep=1)
"""


def test_a_sigkill_at_each_stage_of_a_save_leaves_a_loadable_point(tmp_path):
    """A real SIGKILL in a subprocess, mid-way through writing the state, after the folder is complete but before
    its rename, and after the rename but before old points are pruned: the newest loadable point is intact."""
    cfg = run_cfg(tmp_path)
    cfg.iterations, cfg.checkpoint.every = 1, 1
    run_dir = train(cfg).checkpoint.parent
    assert find_resume_point(run_dir).name == "it-000001"
    for stage, newest in (("mid-state", 1), ("before-rename", 1), ("before-prune", 2)):
        killed = subprocess.run([sys.executable, "-c", _KILL_MID_SAVE, str(run_dir), stage], capture_output=True,
                                text=True, timeout=300)
        assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
        point = load_resume_point(run_dir)  # reads the whole state back
        assert point.iteration == newest and point.state["learners"], stage
    assert [p.name for p in points(run_dir / "resume")] == ["it-000000", "it-000001", "it-000002"]
    point = load_resume_point(run_dir)
    pid, learner = next(iter(point.state["learners"].items()))
    name = next(iter(learner["policy"]))
    learner["policy"][name] = torch.full_like(learner["policy"][name], float("nan"))
    with pytest.raises(CheckpointError, match=f"non-finite values \\(learners/{pid}/policy/{name}\\)"):
        resume_mod.save_resume_point(run_dir, dict(point.info, iteration=3), point.state, point.tokenizer(), keep=1)
    assert [p.name for p in points(run_dir / "resume")] == ["it-000000", "it-000001", "it-000002"]


def _train_argv(tmp_path: Path) -> list[str]:
    return [sys.executable, "-m", "marl.cli", "train", "--scenario", "tool_use", "--iterations", "12",
            "--sft.seconds", "600", "--sft.max-steps", "12", "--sft.episodes", "16", "--sft.batch-size", "4",
            "--policy.device", "cpu", "--policy.tokenizer-episodes", "40", "--rl.tasks-per-iteration", "2",
            "--rl.group-size", "2", "--eval-episodes", "0", "--checkpoint.every", "1",
            "--output-dir", str(tmp_path / "runs"), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
            "--artifact-location", str(tmp_path / "mlruns")]


def _only_run(tmp_path: Path) -> Path:
    runs = [p for p in (tmp_path / "runs").iterdir() if p.is_dir() and p.name != "tokenizers"]
    assert len(runs) == 1
    return runs[0]


def _wait_for_first_point(where: Path, proc: subprocess.Popen, timeout: float = 300) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = where / "runs"
        for run in runs.iterdir() if runs.is_dir() else ():
            if run.name != "tokenizers" and points(run / "resume"):
                return run
        assert proc.poll() is None, "the run ended before its first resume point"
        time.sleep(0.05)
    raise AssertionError("no resume point within the timeout")


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> dict[str, torch.Tensor]:
    """The final weights of the subprocess run never stopped."""
    where = tmp_path_factory.mktemp("whole")
    subprocess.run(_train_argv(where), check=True, capture_output=True, timeout=600)
    return weights(_only_run(where) / "checkpoint")


@pytest.mark.slow
def test_sigterm_writes_a_point_ends_killed_and_the_resumed_run_finishes_identical(tmp_path, uninterrupted):
    proc = subprocess.Popen(_train_argv(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_dir = _wait_for_first_point(tmp_path, proc)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130 and "continue it with: marl train --resume" in err, err[-2000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    run = client.search_runs([client.get_experiment_by_name("marl").experiment_id])[0]
    assert run.info.status == "KILLED"
    stopped = load_resume_point(run_dir).iteration
    assert stopped >= 1 and not (run_dir / "checkpoint").exists()
    resumed = subprocess.run([*_train_argv(tmp_path), "--resume", str(run_dir)], capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert client.get_run(run.info.run_id).info.status == "FINISHED"
    assert_identical(uninterrupted, run_dir / "checkpoint")


@pytest.mark.slow
def test_sigkill_at_random_moments_then_resume_ends_bit_identical(tmp_path, uninterrupted):
    expected = uninterrupted
    rng = random.Random(7)
    for k in range(3):
        where = tmp_path / f"killed{k}"
        proc = subprocess.Popen(_train_argv(where), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        run_dir = _wait_for_first_point(where, proc)
        time.sleep(rng.uniform(0.0, 3.0))  # somewhere in RL: mid-rollout, mid-update or mid-save
        assert proc.poll() is None, "the run finished before the kill: lengthen it"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not (run_dir / "checkpoint").exists()
        killed_at = find_resume_point(run_dir).name
        resumed = subprocess.run([*_train_argv(where), "--resume", str(run_dir)], capture_output=True, text=True,
                                 timeout=600)
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert f"after RL iteration {int(killed_at.removeprefix('it-'))}" in resumed.stdout
        assert_identical(expected, run_dir / "checkpoint")


def test_a_runs_uri_finds_the_runs_folder_or_its_logged_points_and_the_run_resumes_from_it(tmp_path):
    cfg = run_cfg(tmp_path)
    cfg.iterations, cfg.checkpoint.log_to_mlflow = 2, True
    whole = train(cfg)
    run_dir, uri = whole.checkpoint.parent, cfg.tracking.tracking_uri
    assert load_resume_point(f"runs:/{whole.run_id}", uri).folder == run_dir / "resume" / "it-000002"
    shutil.rmtree(run_dir)  # another machine: only the MLflow store has the points
    point = load_resume_point(f"runs:/{whole.run_id}/resume/it-000001", uri)
    assert point.iteration == 1 and point.folder != run_dir / "resume" / "it-000001"
    assert load_resume_point(f"runs:/{whole.run_id}", uri).iteration == 2  # the newest logged
    with pytest.raises(CheckpointError, match="no run 'nosuchrun'"):
        load_resume_point("runs:/nosuchrun", uri)
    resumed = train(dataclasses.replace(run_cfg(tmp_path), resume=f"runs:/{whole.run_id}/resume/it-000001"))
    assert resumed.run_id == whole.run_id
    assert MlflowClient(uri).get_run(whole.run_id).info.status == "FINISHED"


@pytest.mark.slow
def test_a_run_killed_before_its_first_point_starts_over_in_the_same_mlflow_run(tmp_path, uninterrupted):
    proc = subprocess.Popen(_train_argv(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not list((tmp_path / "runs").glob("*/run.json")):  # the run has started: model building or SFT
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    run_dir = _only_run(tmp_path)
    assert not points(run_dir / "resume")
    resumed = subprocess.run([*_train_argv(tmp_path), "--resume", str(run_dir)], capture_output=True, text=True,
                             timeout=600)
    assert resumed.returncode == 0 and "over from the beginning" in resumed.stdout, resumed.stderr[-3000:]
    client = MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    (run,) = client.search_runs([client.get_experiment_by_name("marl").experiment_id])
    assert run.info.run_id == run_dir.name and run.info.status == "FINISHED" and run.data.tags["restarted"] == "true"
    assert_identical(uninterrupted, run_dir / "checkpoint")


def test_a_run_past_its_warm_start_without_points_is_not_started_over(tmp_path):
    cfg = TrainConfig().resolved()
    resume_mod.write_run_start(tmp_path / "run", "abc", cfg)
    point = load_resume_point(tmp_path / "run")  # killed in SFT: it starts over, same run, same config
    assert point.restart and point.run_id == "abc" and point.config() == cfg
    resume_mod.write_run_start(tmp_path / "run", "abc", cfg, past_sft=True)
    with pytest.raises(CheckpointError, match="got past SFT"):
        load_resume_point(tmp_path / "run")
