"""What a training run shows on the console and keeps in its log: progress bars and one line per RL iteration.

Progress bars (SFT, RL, the final evaluation) vanish when their phase ends, so each RL iteration also
writes one summary line above the bar (success, return, KL, entropy, invalid actions, seconds) that
stays on screen, and every line the console says goes to `<run>/console.log` too, which the run logs
as an MLflow artifact. `quiet` hides the bars and the lines on the console; the log still gets the lines.
It leaves out warnings and errors (printed where they happen, also when quiet) and the metrics themselves.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, TextIO

from tqdm import tqdm

_COLUMNS = (("success", "rollout/success_rate", ".2f"), ("return", "rollout/return_mean", ".3f"),
            ("kl", "train/kl", ".4f"), ("entropy", "train/entropy", ".3f"),
            ("invalid", "rollout/invalid_action_rate", ".2f"))


def iteration_line(iteration: int, total: int, metrics: dict[str, float]) -> str:
    """`it 12/200  success 0.42  return 0.310  kl 0.0520  entropy 1.234  invalid 0.01  9.8s` (absent figures: -)."""
    cells = [f"it {iteration}/{total}"]
    for label, key, fmt in _COLUMNS:
        value = metrics.get(key)
        cells.append(f"{label} {format(value, fmt) if value is not None and math.isfinite(value) else '-'}")
    seconds = metrics.get("perf/rollout_seconds", 0.0) + metrics.get("perf/update_seconds", 0.0)
    cells.append(f"{seconds:.1f}s")
    return "  ".join(cells)


class Console:
    """A run's progress bars and kept lines; `log_to(path)` starts copying the lines into a file."""

    def __init__(self, quiet: bool = False) -> None:
        self.quiet = quiet
        self.log: TextIO | None = None
        self.path: Path | None = None

    def log_to(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.log = path.open("a", buffering=1)  # line-buffered: a killed run keeps every line it said

    def bar(self, **kwargs: Any) -> tqdm:
        """A tqdm bar that a quiet console hides (it still counts)."""
        return tqdm(disable=self.quiet, dynamic_ncols=True, **kwargs)

    def say(self, text: str) -> None:
        """A line kept on screen (above any bar) and in the log."""
        if self.log is not None:
            self.log.write(text + "\n")
        if not self.quiet:
            tqdm.write(text)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()
            self.log = None
