"""The console a user watches: one kept line per RL iteration, bars that a quiet run hides, a log file."""

import math

from marl.run.console import Console, iteration_line


def test_an_iteration_line_shows_the_figures_a_user_watches_and_dashes_for_unmeasured_ones():
    metrics = {"rollout/success_rate": 0.4166, "rollout/return_mean": 0.31, "train/kl": math.nan,
               "train/entropy": 1.2344, "perf/rollout_seconds": 7.5, "perf/update_seconds": 2.3}
    assert iteration_line(12, 200, metrics) == \
        "it 12/200  success 0.42  return 0.310  kl -  entropy 1.234  invalid -  9.8s"


def test_a_quiet_console_prints_nothing_but_its_log_keeps_every_line(tmp_path, capsys):
    console = Console(quiet=True)
    console.log_to(tmp_path / "run" / "console.log")
    bar = console.bar(total=3, desc="rl")
    bar.update(3)
    bar.close()
    console.say("it 1/3  success 0.50")
    console.close()
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert (tmp_path / "run" / "console.log").read_text() == "it 1/3  success 0.50\n"


def test_a_console_keeps_its_lines_on_screen(capsys):
    Console().say("eval: eval/basic/success_rate=0.700")
    assert "eval: eval/basic/success_rate=0.700" in capsys.readouterr().out
