"""Alerts: each threshold raises once when its window crosses it, again only after it cleared; a run tags
them in MLflow, and one named in `guards.stop_on` ends RL with the run's checkpoint kept."""

import math

import pytest
from mlflow.tracking import MlflowClient
from run_helpers import tiny

from marl.config import ConfigError, GuardsConfig
from marl.run.alerts import Alerts
from marl.run.train import train


def feed(alerts: Alerts, rows: list[dict[str, float]]) -> list[list[str]]:
    return [[a.name for a in alerts.check(row, it)] for it, row in enumerate(rows, start=1)]


def test_kl_far_above_target_alerts_once_while_it_lasts_and_again_after_it_cleared():
    alerts = Alerts(GuardsConfig(kl_factor=10, window=2), target_kl=0.1)
    kl = [0.05, 0.5, 1.5, 2.0, 3.0, 0.1, 0.1, 5.0, 5.0]
    fired = feed(alerts, [{"train/kl": v} for v in kl])
    # windows of 2: means 0.275, 1.0, 1.75, 2.5, 1.55, 0.1, 2.55, 5.0 against a limit of 1.0
    assert fired == [[], [], [], ["kl"], [], [], [], ["kl"], []]
    assert alerts.fired == 2


def test_a_return_collapse_alerts_against_the_best_window_so_far():
    alerts = Alerts(GuardsConfig(reward_drop=0.5, window=2), target_kl=0.1)
    returns = [0.2, 0.8, 1.0, 0.9, 0.3, 0.1, 0.0]
    fired = feed(alerts, [{"rollout/return_mean": v} for v in returns])
    # means: -, 0.5, 0.9, 0.95, 0.6, 0.2 (0.75 below 0.95: alert), 0.05 (still on)
    assert fired == [[], [], [], [], [], ["reward"], []]


def test_entropy_floor_and_invalid_jump_alert_and_unmeasured_figures_leave_the_window_alone():
    alerts = Alerts(GuardsConfig(entropy_floor=0.05, invalid_jump=0.2, window=1), target_kl=0.1)
    rows = [{"train/entropy": 0.5, "rollout/invalid_action_rate": 0.05},
            {"train/entropy": math.nan, "rollout/invalid_action_rate": 0.1},  # a skipped update measures nothing
            {"train/entropy": 0.01, "rollout/invalid_action_rate": 0.4}]
    assert feed(alerts, rows) == [[], [], ["entropy", "invalid"]]


def test_zero_turns_an_alert_off_and_a_kl_alert_needs_a_target():
    off = Alerts(GuardsConfig(kl_factor=0, reward_drop=0, entropy_floor=0, invalid_jump=0, window=1), target_kl=0.1)
    wild = {"train/kl": 1e6, "rollout/return_mean": -1e6, "train/entropy": 0.0, "rollout/invalid_action_rate": 1.0}
    assert feed(off, [{"rollout/return_mean": 1.0, "rollout/invalid_action_rate": 0.0}, wild]) == [[], []]
    assert feed(Alerts(GuardsConfig(window=1), target_kl=0.0), [{"train/kl": 1e6}]) == [[]]


def test_the_alert_state_round_trips():
    a = Alerts(GuardsConfig(window=2), target_kl=0.1)
    feed(a, [{"train/kl": 5.0, "rollout/return_mean": 1.0}] * 3)
    b = Alerts(GuardsConfig(window=2), target_kl=0.1)
    b.load_state_dict(a.state_dict())
    assert b.state_dict() == a.state_dict()
    assert feed(b, [{"train/kl": 5.0}]) == [[]]  # still active: no second alert


def test_stop_on_names_known_alerts():
    with pytest.raises(ConfigError, match="unknown alerts"):
        GuardsConfig(stop_on=("kl", "loss"))
    assert GuardsConfig(stop_on=("all",)).stops("entropy")


def test_an_alert_in_stop_on_ends_rl_with_tags_a_checkpoint_and_a_finished_run(tmp_path, capsys):
    cfg = tiny(tmp_path)
    cfg.iterations, cfg.eval_episodes = 5, 0
    cfg.guards.entropy_floor, cfg.guards.window, cfg.guards.stop_on = 1e6, 1, ("entropy",)  # any entropy is below
    result = train(cfg)
    client = MlflowClient(cfg.tracking.tracking_uri)
    run = client.get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["stopped_by"] == "alert/entropy"
    assert run.data.tags["alert/entropy"].startswith("iteration 1: mean entropy")
    assert [m.step for m in client.get_metric_history(result.run_id, "alerts/count")] == [1]
    assert (result.checkpoint / "config.json").is_file()
    out = capsys.readouterr().out
    assert "WARNING alert entropy at RL iteration 1" in out
    # the run's kept console line of that iteration, on screen, in its log and as an artifact
    log = (result.checkpoint.parent / "console.log").read_text()
    assert "it 1/5  success " in log and "it 1/5  success " in out and "it 2/5" not in log
    assert "console.log" in [a.path for a in client.list_artifacts(result.run_id)]
