"""A run's pictures: the episode viewer shows every agent's turns of a real rollout; curves and the expert-load
heatmap are drawn from what a real sqlite MLflow store holds (and nothing is drawn from nothing)."""

import scenarios
from marl.engine.rollout import RolloutWorker, expert_actor
from marl.run.pictures import draw_curves, draw_expert_load, episode_viewer
from marl.run.tracking import Tracker


def test_the_episode_viewer_shows_each_agents_turns_rewards_and_ending_escaped():
    batch = RolloutWorker(lambda: scenarios.make("info_split", n_agents=3, split="basic"), None, None).collect(
        [4, 5], actor=expert_actor)
    page = episode_viewer(batch, "info_split <basic>", teams=1)
    assert "<title>info_split &lt;basic&gt;</title>" in page
    assert all(f"<th>{agent}</th>" in page for agent in ("agent_0", "agent_1", "agent_2"))
    team = [ep for ep in batch.episodes if ep.env == 0]
    assert page.count("<div class='rew'>") == sum(len(ep.turns) for ep in team)
    assert all(f"ended: {ep.reason}" in page for ep in team) and "seed 5" not in page  # one team asked for


def test_curves_and_the_expert_load_heatmap_come_from_the_runs_metrics(tmp_path):
    with Tracker(f"sqlite:///{tmp_path}/mlflow.db", "pics", "r", str(tmp_path / "mlruns")) as tr:
        assert draw_curves(tr.client, tr.run_id, tmp_path / "none.png") is None
        assert draw_expert_load(tr.client, tr.run_id, tmp_path / "none.png") is None
        for it in range(1, 6):
            tr.log_metrics({"rollout/success_rate": it / 5, "train/kl": 0.01 * it,
                            **{f"moe/expert_load/layer_{i}/expert_{j}": (0.7 if j == it % 2 else 0.3)
                               for i in range(2) for j in range(2)}}, step=it)
        assert draw_curves(tr.client, tr.run_id, tmp_path / "curves.png").stat().st_size > 5000
        assert draw_expert_load(tr.client, tr.run_id, tmp_path / "load.png").stat().st_size > 5000
    assert not (tmp_path / "none.png").exists()
