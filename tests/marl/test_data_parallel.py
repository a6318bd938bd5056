"""The learner's data parallelism, launched by torchrun: two processes step the policy as one does."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pytest
from safetensors.torch import load_file

# no SFT and no evaluation: the step from the random-init model is what the two launches must agree on
FLAGS = ["--iterations", "1", "--eval-episodes", "0", "--sft.seconds", "0", "--policy.device", "cpu",
         "--policy.tokenizer-episodes", "40",
         "--rl.tasks-per-iteration", "2", "--rl.group-size", "2", "--rl.minibatches", "1",
         # one episode a micro-batch: several micro-batches a step, so each process scores a share
         "--rl.micro-batch-tokens", "64", "--no-log-model", "--quiet", "--experiment", "ddp"]


def run(tmp_path: Path, name: str, processes: int) -> tuple[dict, dict]:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"] \
        if processes > 1 else [sys.executable]
    # one thread a process on both sides: torchrun's default, and a matmul's sums then run in the same order
    done = subprocess.run([*launcher, "-m", "marl.cli", "train", *FLAGS, "--tracking-uri", uri, "--output-dir",
                           str(tmp_path / name), "--run-name", name], env={**os.environ, "OMP_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{name} ended with {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    client = mlflow.MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name("ddp").experiment_id],
                             f"attributes.run_name = '{name}'")[0]
    weights = load_file(next((tmp_path / name).glob("*/checkpoint/model.safetensors")))
    return run.data.metrics, weights


@pytest.mark.slow
def test_two_learner_processes_take_the_step_one_process_takes(tmp_path):
    one, w_one = run(tmp_path, "one", 1)
    two, w_two = run(tmp_path, "two", 2)
    # the same gradient (process 1's share added into process 0's: alone, process 0's would be about half)
    assert two["train/grad_norm"] == pytest.approx(one["train/grad_norm"], rel=1e-4)
    for key in ("train/policy_loss", "train/kl", "train/entropy", "train/decision_tokens"):
        assert two[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key
    # Adam's first step moves each weight by the learning rate times its gradient's sign, so weights whose
    # gradient is float noise may go either way; every other weight takes the same step
    moved = sum(int(((w_one[k] - w_two[k]).abs() > 1e-7).sum()) for k in w_one)
    total = sum(t.numel() for t in w_one.values())
    assert moved / total < 0.01, f"{moved} of {total} weights took another step"
