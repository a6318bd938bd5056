"""Pictures of one run, logged as its artifacts: learning curves, expert load over training, an episode viewer.

- `curves.png`: training success, return, KL and entropy by RL iteration, read back from the run's metrics;
- `expert_load.png`: a heatmap of each MoE layer's share of tokens per expert (rows) by RL iteration
  (columns), from `moe/expert_load/layer_<i>/expert_<j>`: collapse onto one expert shows as one bright row;
- `episodes_<split>.html`: a self-contained page per evaluation split: each played team's episode turn by
  turn, per agent what it saw (shared messages included, as the agent saw them), what it wrote and the
  reward it got, and how each agent's episode ended.
The comm graph is drawn by `comms.draw` when the run starts. It leaves out comparisons across runs
(`marl.run.compare_figures`); matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import html
import re
from pathlib import Path

from mlflow.tracking import MlflowClient

from marl.engine.rollout import Episode, RolloutBatch

CURVES = ("rollout/success_rate", "rollout/return_mean", "train/kl", "train/entropy")
_LOAD_KEY = re.compile(r"^moe/expert_load/layer_(\d+)/expert_(\d+)$")


def _history(client: MlflowClient, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def draw_curves(client: MlflowClient, run_id: str, path: Path) -> Path | None:
    """The run's training curves, one panel per figure it logged (None: no RL iteration logged)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    series = {key: _history(client, run_id, key) for key in CURVES}
    series = {k: v for k, v in series.items() if v}
    if not series:
        return None
    fig, axes = plt.subplots(1, len(series), figsize=(3.6 * len(series), 3.2), squeeze=False)
    for ax, (key, points) in zip(axes[0], series.items(), strict=True):
        ax.plot([s for s, _ in points], [v for _, v in points], linewidth=1.4)
        ax.set(title=key, xlabel="RL iteration")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def draw_expert_load(client: MlflowClient, run_id: str, path: Path) -> Path | None:
    """Expert load by layer over training as a heatmap (None where the run logged no expert load)."""
    keys = sorted((int(m[1]), int(m[2]), k) for k in client.get_run(run_id).data.metrics
                  if (m := _LOAD_KEY.match(k)))
    if not keys:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [dict(_history(client, run_id, key)) for _, _, key in keys]
    steps = sorted({s for row in rows for s in row})
    grid = np.array([[row.get(s, np.nan) for s in steps] for row in rows])
    fig, ax = plt.subplots(figsize=(min(14.0, 3 + 0.08 * len(steps)), 1.2 + 0.28 * len(keys)))
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis", vmin=0.0,
                      extent=(steps[0] - 0.5, steps[-1] + 0.5, len(keys) - 0.5, -0.5))
    ax.set_yticks(range(len(keys)), [f"layer {i} / expert {j}" for i, j, _ in keys], fontsize=7)
    ax.set(xlabel="RL iteration", title="share of tokens routed to each expert")
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def episode_viewer(batch: RolloutBatch, title: str, teams: int = 8) -> str:
    """A self-contained HTML page of the first `teams` environments' episodes, turn by turn per agent."""
    by_env: dict[int, list[Episode]] = {}
    for ep in batch.episodes:
        by_env.setdefault(ep.env, []).append(ep)
    parts = [f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>", _STYLE,
             f"<h1>{html.escape(title)}</h1>"]
    for episodes in list(by_env.values())[:teams]:
        endings = ", ".join(f"{ep.agent}: {ep.reason} ({ep.ret:+.3f})" for ep in episodes)
        parts.append(f"<details open><summary>seed {episodes[0].seed} &middot; {html.escape(endings)}</summary>")
        parts.append("<table><tr><th>turn</th>" + "".join(f"<th>{html.escape(ep.agent)}</th>" for ep in episodes)
                     + "</tr>")
        steps = max(len(ep.turns) for ep in episodes)
        # each agent's transcript split once: what it saw before each turn, what it wrote
        split = [([text for role, text in ep.transcript if role == "observation"],
                  [text for role, text in ep.transcript if role == "action"]) for ep in episodes]
        for t in range(steps + 1):
            cells = []
            for ep, (seen, acted) in zip(episodes, split, strict=True):
                cell = ""
                if t < len(seen):
                    cell += f"<div class='obs'>{html.escape(seen[t])}</div>"
                if t < len(acted):
                    turn = batch.turns[ep.turns[t]]
                    flag = " invalid" if turn.invalid else ""
                    cell += (f"<div class='act{flag}'>{html.escape(acted[t])}</div>"
                             f"<div class='rew'>reward {turn.reward:+.3f}{flag}</div>")
                elif t == len(acted) and t <= len(seen):
                    cell += f"<div class='end'>ended: {html.escape(ep.reason)}</div>"
                cells.append(f"<td>{cell}</td>")
            parts.append(f"<tr><td>{t + 1}</td>{''.join(cells)}</tr>")
        parts.append("</table></details>")
    return "\n".join(parts)


_STYLE = """<style>
body{font-family:system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border:1px solid #ccc;padding:4px 6px;vertical-align:top;max-width:32em}
.obs{white-space:pre-wrap;font-family:monospace;font-size:12px;color:#333}
.act{white-space:pre-wrap;font-family:monospace;font-size:12px;background:#eef6ff;margin-top:4px;padding:2px}
.act.invalid{background:#ffecec}.rew{font-size:11px;color:#666}.end{font-weight:bold;color:#444}
summary{cursor:pointer;font-weight:bold}
</style>"""
