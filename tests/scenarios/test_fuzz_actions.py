"""Hostile action text never raises: the fuzz benchmark, run small, over every scenario at several team sizes."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def test_fuzzing_every_scenario_finds_no_exception(tmp_path):
    out = tmp_path / "fuzz.json"
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "fuzz_actions.py"), "--actions", "1500",
                           "--seed", "3", "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = json.loads(out.read_text())
    assert {r["scenario"] for r in rows} >= {"tool_use", "info_split", "bargaining", "repeated_game", "navigation",
                                             "predator_prey"}
    assert all(r["exceptions"] == 0 and r["hostile_actions"] >= 500 for r in rows)
    # Every generator fired somewhere, and almost everything hostile was marked invalid (a mutation may stay valid).
    assert all(sum(r["per_generator"][g] for r in rows) > 0 for g in rows[0]["per_generator"])
    assert all(r["invalid_share"] > 0.8 for r in rows)
