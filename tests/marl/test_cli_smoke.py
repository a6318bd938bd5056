"""End to end through the real CLI in a subprocess: `marl train` with a tiny budget, then `marl eval`.

Real parts only: the tool_use scenario, a tiny random-init MoE, the SFT warm start, a sqlite MLflow
store. Asserts what a user relies on: a FINISHED run with the named metrics, transcripts and the
checkpoint as artifacts, the printed `run_id:`/`checkpoint:` lines, and an eval JSON line.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

REQUIRED_METRICS = {
    "rollout/success_rate", "rollout/return_mean", "rollout/invalid_action_rate", "rollout/truncation_rate",
    "train/policy_loss", "train/kl", "train/entropy", "train/clip_frac", "train/grad_norm",
    "moe/aux_loss", "moe/expert_load_entropy", "progress/env_steps", "progress/agent_steps",
    "perf/tokens_per_s", "perf/env_steps_per_s", "perf/peak_rss_gb", "agent/agent_0/return",
    "eval/basic/success_rate", "eval/hard/success_rate", "eval/adversarial/success_rate",
}


def marl(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "marl.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.slow
def test_train_then_eval_through_the_cli(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    proc = marl("train", "--iterations", "2", "--sft.seconds", "4", "--sft.episodes", "64",
                "--rl.tasks-per-iteration", "2", "--rl.group-size", "2", "--eval-episodes", "3", "--eval-sampled",
                "--policy.tokenizer-episodes", "100", "--tracking-uri", uri, "--experiment", "smoke",
                "--artifact-location", str(tmp_path / "mlruns"), "--output-dir", str(tmp_path / "runs"),
                cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = dict(line.split(": ", 1) for line in proc.stdout.splitlines() if line.startswith(("run_id: ", "checkpoint: ")))
    run_id, checkpoint = lines["run_id"].split()[0], Path(lines["checkpoint"])
    assert (checkpoint / "model.safetensors").is_file() and (checkpoint / "marl_checkpoint.json").is_file()
    assert "mlflow ui" in proc.stdout

    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    missing = REQUIRED_METRICS - set(run.data.metrics)
    missing |= {f"eval_sampled/{s}/success_rate" for s in ("basic", "hard", "adversarial")} - set(run.data.metrics)
    assert not missing, f"metrics not logged: {sorted(missing)}"
    assert 0.2 < run.data.metrics["perf/peak_rss_gb"] < 64  # torch alone takes 0.2 GB: a real reading
    artifacts = {a.path for a in client.list_artifacts(run_id)}
    assert {"transcripts", "checkpoint", "pictures", "config.yaml", "console.log"} <= artifacts
    pictures = {a.path for a in client.list_artifacts(run_id, "pictures")}
    assert {"pictures/curves.png", "pictures/expert_load.png", "pictures/episodes_basic.html"} <= pictures
    assert run.data.tags["model_uri"].startswith("models:/")  # the policy logged as an MLflow model
    transcripts = {a.path for a in client.list_artifacts(run_id, "transcripts")}
    assert "transcripts/basic.txt" in transcripts

    proc = marl("eval", "--checkpoint", str(checkpoint), "--scenario", "tool_use", "--split", "hard",
                "--episodes", "5", "--seed", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["episodes"] == 5
    for key in ("success_rate", "return_mean", "invalid_action_rate"):
        assert 0.0 <= figures[key] <= 1.0 or key == "return_mean"
    # the evaluation is its own run (the store in the working directory is the training run's), a child of it
    evaluation = client.get_run(figures["run_id"])
    assert evaluation.data.tags["mlflow.parentRunId"] == run_id == figures["trained_run_id"]
    assert evaluation.data.metrics["eval/hard/success_rate"] == figures["success_rate"]
    # a checkpoint named through MLflow: the same figures
    proc = marl("eval", "--checkpoint", f"runs:/{run_id}", "--tracking-uri", uri, "--scenario", "tool_use",
                "--split", "hard", "--episodes", "5", "--seed", "1", "--no-track", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    again = json.loads(proc.stdout.strip().splitlines()[-1])
    assert again["success_rate"] == figures["success_rate"] and "run_id" not in again

    # Another scenario than the checkpoint's is refused by name, or played with a warning when asked for.
    proc = marl("eval", "--checkpoint", str(checkpoint), "--scenario", "navigation", "--episodes", "2", cwd=tmp_path)
    assert proc.returncode == 2 and "trained on tool_use" in proc.stderr and "--other-scenario" in proc.stderr
    proc = marl("eval", "--checkpoint", str(checkpoint), "--scenario", "navigation", "--other-scenario",
                "--episodes", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "warning" in proc.stderr and json.loads(proc.stdout.strip().splitlines()[-1])["trained_on"] == "tool_use"


def test_bad_config_exits_2_with_a_message(tmp_path):
    proc = marl("train", "--rl.group-size", "1", "--tracking-uri", f"sqlite:///{tmp_path}/m.db", cwd=tmp_path)
    assert proc.returncode == 2
    assert "rl.group_size" in proc.stderr
    assert not (tmp_path / "m.db").exists()  # validated before anything is written


def test_eval_of_a_missing_checkpoint_says_so(tmp_path):
    proc = marl("eval", "--checkpoint", str(tmp_path / "nope"), cwd=tmp_path)
    assert proc.returncode == 2
    assert "does not exist" in proc.stderr


def test_config_file_in_equals_form_is_read(tmp_path):
    (tmp_path / "c.yaml").write_text("rl:\n  group_size: 1\n")
    proc = marl("train", f"--config={tmp_path / 'c.yaml'}", "--tracking-uri", f"sqlite:///{tmp_path}/m.db",
                cwd=tmp_path)
    assert proc.returncode == 2 and "rl.group_size" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "expert", "--split", "hrad"], "--split 'hrad'"),
    (["--policy", "expert", "--agents", "99"], "--agents 99"),
    (["--policy", "oracle"], ("'oracle'", "--policy")),
])
def test_eval_rejects_bad_flags_with_a_message(tmp_path, args, message):
    proc = marl("eval", *args, cwd=tmp_path)
    fragments = (message,) if isinstance(message, str) else message  # a flag parser may wrap its message
    assert proc.returncode == 2 and all(f in proc.stderr for f in fragments), proc.stderr


def test_eval_of_the_expert_baseline_is_perfect(tmp_path):
    proc = marl("eval", "--policy", "expert", "--split", "adversarial", "--episodes", "20", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = json.loads(proc.stdout.strip().splitlines()[-1])
    assert figures["success_rate"] == 1.0 and figures["episodes"] == 20
    fresh = marl("eval", "--policy", "expert", "--split", "adversarial", "--episodes", "2", "--skip-seeds", "20",
                 cwd=tmp_path)
    assert json.loads(fresh.stdout.strip().splitlines()[-1])["first_seed"] == figures["first_seed"] + 20


def test_eval_writes_the_transcripts_it_scored(tmp_path):
    out = tmp_path / "t" / "held_out.jsonl"
    proc = marl("eval", "--policy", "expert", "--scenario", "info_split", "--agents", "3", "--split", "hard",
                "--episodes", "4", "--transcripts", str(out), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 12  # 4 seeds x 3 agents, one line each
    assert {r["agent"] for r in rows} == {"agent_0", "agent_1", "agent_2"} and len({r["seed"] for r in rows}) == 4
    assert all(r["reason"] == "success" for r in rows)  # the expert solves every task, as scored
    for r in rows:
        roles = [role for role, _ in r["transcript"]]
        assert roles[0] == "observation" and "action" in roles
        assert r["transcript"][0][1].startswith(f"you are {r['agent']}")


def test_scenarios_lists_tool_use(tmp_path):
    proc = marl("scenarios", cwd=tmp_path)
    assert proc.returncode == 0
    assert "tool_use" in proc.stdout and "single" in proc.stdout
