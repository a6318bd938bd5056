"""Overlaid learning curves of compared runs: one PNG per metric, one colour per group.

Each group's curve is the mean over its runs at every step some of them logged (with a band of one
standard deviation where two or more did), over thin lines of the runs themselves, so a reader sees
both the trend and how far the seeds disagree. It leaves out choosing runs and groups
(`marl.run.compare`); matplotlib is imported only when a figure is drawn.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from marl.run.compare import Comparison, metric_histories


def curve_file(metric: str) -> str:
    return metric.replace("/", "__") + ".png"


def learning_curves(client: MlflowClient, comp: Comparison, runs: list[Run], metrics: list[str],
                    folder: Path) -> list[Path]:
    """A PNG per metric that some run logged at two steps or more; the paths written."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for metric in metrics:
        histories = metric_histories(client, runs, metric)
        if not any(len(h) > 1 for h in histories.values()):
            continue
        fig, ax = plt.subplots(figsize=(7.5, 4.2))
        for k, group in enumerate(comp.groups):
            colour = f"C{k % 10}"
            mine = [histories[r] for r in group.runs if r in histories]
            if not mine:
                continue
            for h in mine:
                ax.plot([s for s, _ in h], [v for _, v in h], color=colour, alpha=0.25, linewidth=0.8)
            steps = sorted({s for h in mine for s, _ in h})
            at = [[v for h in mine for s2, v in h if s2 == s] for s in steps]
            mean = [statistics.fmean(v) for v in at]
            ax.plot(steps, mean, color=colour, linewidth=2, label=f"{group.name} (n={len(mine)})")
            band = [(s, m, statistics.stdev(v)) for s, m, v in zip(steps, mean, at, strict=True) if len(v) > 1]
            if band:
                ax.fill_between([s for s, _, _ in band], [m - d for _, m, d in band], [m + d for _, m, d in band],
                                color=colour, alpha=0.15, linewidth=0)
        ax.set(xlabel="step (RL iteration)", ylabel=metric, title=metric)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        path = folder / curve_file(metric)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
