"""SFT steps per second on the same demonstrations, this tree against another, side by side.

Per scenario, one process plays `--episodes` scripted-expert demonstrations (seeded, so both trees train on
the same conversations), then times `--steps` SFT steps of the default warm start (tiny preset, default batch)
from the same random-init model, and prints one JSON line: seconds, steps per second and the mean loss over
the steps (the same steps on the same batches: the losses should agree to float noise).

With `--vs TREE` the same measurement runs in fresh processes alternately on this tree's code and on TREE's,
`--rounds` times each, and the steps-per-second ratio is taken pair by pair.

    python benchmarks/sft_speed.py --scenarios tool_use info_split navigation --vs ../baseline --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the benchmarks beside this one
from tree_pairs import add_pair_arguments, pairs  # noqa: E402


def measure(args: argparse.Namespace) -> dict[str, dict[str, float]]:
    """One process's figures on the code importable here (its own tree or PYTHONPATH's)."""
    import numpy as np
    from env_throughput import agent_count

    from marl.config import TrainConfig
    from marl.engine.rollout import RolloutWorker
    from marl.run.build import build_policy, train_env_factory
    from marl.run.sft import demonstration_episodes, run_sft
    from marl.run.warm_start import demonstrations
    from policies.chat import ChatFormat

    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.scenarios:
            cfg = TrainConfig(seed=args.seed, scenario=name, agents=agent_count(name, args.agents))
            cfg.policy.tokenizer_episodes = 200
            cfg = cfg.validate().resolved()
            make = train_env_factory(cfg, "train")
            tokenizer, model, policy = build_policy(cfg, make, Path(tmp), np.random.default_rng(args.seed))
            chat = ChatFormat(tokenizer)
            worker = RolloutWorker(make, policy, chat)
            columns = demonstrations(chat, demonstration_episodes(
                worker, list(range(100_000, 100_000 + args.episodes))))
            cfg.sft.max_steps, cfg.sft.seconds = args.steps, 1e9
            t0 = time.perf_counter()
            figures = run_sft(model, tokenizer, columns, cfg.sft, cfg.seed, lambda *_: None)
            seconds = time.perf_counter() - t0
            out[name] = {"seconds": seconds, "steps_per_s": figures["sft/steps"] / seconds,
                         "mean_loss": figures["sft/mean_loss"],
                         "tokens": float(sum(len(ids) for ids in columns["input_ids"]))}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenarios", nargs="+", default=["tool_use", "info_split", "navigation"])
    parser.add_argument("--agents", type=int, default=3, help="team size, where the scenario takes one")
    parser.add_argument("--episodes", type=int, default=400, help="demonstration episodes per scenario")
    parser.add_argument("--steps", type=int, default=40, help="timed SFT steps per scenario")
    add_pair_arguments(parser)
    args = parser.parse_args()
    if args.child or args.vs is None:
        print(json.dumps(measure(args)), flush=True)
        return
    argv = ["--scenarios", *args.scenarios, "--agents", str(args.agents), "--episodes", str(args.episodes),
            "--steps", str(args.steps), "--seed", str(args.seed)]
    measured = pairs(__file__, args.vs, argv, args.rounds)
    print("\n| scenario | SFT steps/s, this / baseline (pairs) | this tree steps/s | mean loss, this / baseline |")
    print("|---|---|---|---|")
    for name in args.scenarios:
        each = [a[name]["steps_per_s"] / b[name]["steps_per_s"] for a, b in measured]
        ours = statistics.median(a[name]["steps_per_s"] for a, _ in measured)
        loss = measured[0][0][name]["mean_loss"], measured[0][1][name]["mean_loss"]
        print(f"| {name} | {statistics.median(each):.2f}x ({', '.join(f'{x:.2f}' for x in each)}) | {ours:.2f} | "
              f"{loss[0]:.4f} / {loss[1]:.4f} |")


if __name__ == "__main__":
    main()
