"""Our RL stage against TRL's GRPOTrainer on single-agent `tool_use`: training seconds to a held-out success.

Both arms start from the same SFT checkpoint and share the model, the learning rate, the batch shape
(`--tasks` tasks x `--group` sampled episodes a batch, two optimizer steps a batch) and the held-out
evaluation (greedy, constrained decoding, `--eval-episodes` seeds of `--split` after its first `--skip-seeds`),
which is timed apart from training on both sides:
- ours: `marl train --policy.model CKPT --sft.seconds 0 ... --checkpoint.eval-every K`; its curve is
  `eval/<split>/success_rate` against `perf/train_seconds` (the RL clock without those evaluations).
- trl: `GRPOTrainer` with a `rollout_func` (TRL's hook for environments of one's own) that plays the same
  kind of episodes: every turn one batched transformers `generate` over each live episode's whole
  conversation, sampling under the action grammar through `prefix_allowed_tokens_fn` (the same actions
  ours may write), the observations fed back as environment tokens (`env_mask` 0, out of the loss), the
  episode's return as the reward. A callback evaluates every `--eval-seconds` of training time, with the
  clock stopped, and ends training at the target.
Prints both curves, each arm's training seconds to `--target`, and ours / trl from this one run.

    python benchmarks/trl_vs_ours.py --checkpoint runs/<id>/checkpoint --target 0.9 --budget 900
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

from marl.config import TrainConfig
from marl.engine.rollout import RolloutWorker
from marl.run.build import load_policy, train_env_factory, train_seeds
from marl.run.evaluate import evaluate
from policies.constrained import TokenTrie
from policies.turn_cache import left_padded

EXPERIMENT = "trl-vs-ours"


def held_out(policy, chat, scenario: str, split: str, episodes: int, skip: int = 0) -> float:
    """Greedy success on `episodes` held-out seeds of `split` after its first `skip` (the model left in eval mode
    meanwhile)."""
    cfg = TrainConfig(scenario=scenario)
    make = train_env_factory(cfg.validate().resolved(), split)
    was = policy.model.training
    policy.model.eval()
    try:
        figures, _ = evaluate(RolloutWorker(make, policy, chat), make().eval_seeds(split, episodes, skip=skip),
                              greedy=True)
    finally:
        policy.model.train(was)
    return figures["success_rate"]


def ours(args: argparse.Namespace, workdir: Path) -> list[tuple[float, float]]:
    """Our RL stage in its own process; the curve read back from its MLflow run."""
    import mlflow

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    flags = ["--scenario", "tool_use", "--policy.model", str(Path(args.checkpoint).resolve()), "--sft.seconds", "0",
             "--iterations", "100000", "--rl.seconds", str(args.budget), "--rl.tasks-per-iteration", str(args.tasks),
             "--rl.group-size", str(args.group), "--rl.learning-rate", str(args.lr), "--checkpoint.eval-every",
             str(args.eval_every), "--checkpoint.eval-episodes", str(args.eval_episodes), "--checkpoint.eval-skip-seeds",
             str(args.skip_seeds), "--eval-splits", args.split,
             "--eval-episodes", "0", "--seed", str(args.seed), "--tracking-uri", uri, "--output-dir",
             str(workdir / "runs"), "--run-name", "ours", "--quiet", *shlex.split(args.ours_flags)]
    subprocess.run([sys.executable, "-m", "marl.cli", "train", *flags], check=True,
                   env={**os.environ, "MLFLOW_EXPERIMENT_NAME": EXPERIMENT})
    client = mlflow.MlflowClient(uri)
    run = client.search_runs([client.get_experiment_by_name(EXPERIMENT).experiment_id],
                             "attributes.run_name = 'ours'", order_by=["attributes.start_time DESC"])[0]
    success = {m.step: m.value for m in client.get_metric_history(run.info.run_id, f"eval/{args.split}/success_rate")}
    clock = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "perf/train_seconds")}
    start = held_out(*load_policy(args.checkpoint, "cpu")[:2], "tool_use", args.split, args.eval_episodes,
                     args.skip_seeds)
    return [(0.0, start)] + [(clock[step], success[step]) for step in sorted(success) if step in clock]


def play(trainer, prompts: list[str], make, chat, max_new_tokens: int) -> dict:
    """TRL's `rollout_func`: one episode per prompt (a task seed), turn by turn in batched `generate` calls."""
    model, tokenizer = trainer.model, trainer.processing_class
    envs = [make() for _ in prompts]
    agents, first, completion, env_mask, returns, live = [], [], [], [], [], []
    for env, prompt in zip(envs, prompts, strict=True):
        observations, _ = env.reset(seed=int(prompt))
        agent = env.agents[0]
        agents.append(agent)
        first.append(chat.first(observations[agent]["text"]))
        completion.append([])
        env_mask.append([])
        returns.append(0.0)
        live.append(True)
    was = model.training
    model.eval()
    try:
        while any(live):
            rows = [i for i, on in enumerate(live) if on]
            contexts = [first[i] + completion[i] for i in rows]
            tries = [TokenTrie.from_grammar(envs[i].action_grammar(agents[i]), tokenizer, chat.end_id) for i in rows]
            ids, mask = left_padded(contexts, chat.pad_id, "cpu")
            width = ids.shape[1]

            def allowed(row: int, sequence: torch.Tensor, tries=tries, width=width) -> list[int]:
                node = 0
                for tok in sequence[width:].tolist():
                    if tok == chat.end_id:
                        return [chat.pad_id]
                    node = tries[row].children[node][tok]
                return tries[row].allowed(node)

            with torch.inference_mode():
                out = model.generate(ids, attention_mask=mask, do_sample=True, temperature=1.0, top_k=0, top_p=1.0,
                                     max_new_tokens=max_new_tokens, eos_token_id=chat.end_id, pad_token_id=chat.pad_id,
                                     prefix_allowed_tokens_fn=allowed)
            for j, i in enumerate(rows):
                action = out[j, width:].tolist()
                action = action[: action.index(chat.end_id) + 1] if chat.end_id in action else action
                env = envs[i]
                observations, rewards, terminations, truncations, _ = env.step(
                    {agents[i]: chat.decode_action([t for t in action if t != chat.end_id])})
                completion[i] += action
                env_mask[i] += [1] * len(action)
                returns[i] += float(rewards.get(agents[i], 0.0))
                if terminations.get(agents[i]) or truncations.get(agents[i]) or agents[i] not in env.agents:
                    live[i] = False
                else:
                    nxt = chat.next(observations[agents[i]]["text"])
                    completion[i] += nxt
                    env_mask[i] += [0] * len(nxt)
    finally:
        model.train(was)
    return {"prompt_ids": first, "completion_ids": completion, "logprobs": None, "env_mask": env_mask,
            "episode_return": returns}


def trl(args: argparse.Namespace, workdir: Path, budget: float) -> list[tuple[float, float]]:
    """TRL's GRPOTrainer from the same checkpoint, evaluated every `--eval-seconds` of training, for at most
    `budget` training seconds."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    policy, chat, meta = load_policy(args.checkpoint, "cpu")
    cfg = TrainConfig(scenario="tool_use", seed=args.seed).validate().resolved()
    make = train_env_factory(cfg, "train")
    seeds = train_seeds(np.random.default_rng(args.seed), 50_000)
    data = Dataset.from_dict({"prompt": [str(s) for s in seeds]})
    curve = [(0.0, held_out(policy, chat, "tool_use", args.split, args.eval_episodes, args.skip_seeds))]

    class Clock(TrainerCallback):
        """Training seconds with the evaluations left out; evaluates and stops at the target."""

        def __init__(self) -> None:
            self.start, self.paused, self.next_eval = None, 0.0, args.eval_seconds

        def on_train_begin(self, *_, **__) -> None:
            self.start = time.perf_counter()

        def on_step_end(self, _args, state, control, **__) -> None:
            trained = time.perf_counter() - self.start - self.paused
            if trained >= self.next_eval or trained >= budget:
                t0 = time.perf_counter()
                curve.append((trained, held_out(policy, chat, "tool_use", args.split, args.eval_episodes,
                                                args.skip_seeds)))
                print(f"trl: {trained:.0f} s, step {state.global_step}: {args.split} {curve[-1][1]:.3f}", flush=True)
                self.paused += time.perf_counter() - t0
                self.next_eval = trained + args.eval_seconds
                control.should_training_stop = curve[-1][1] >= args.target or trained >= budget

    config = GRPOConfig(
        output_dir=str(workdir / "trl"), use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False,
        per_device_train_batch_size=args.tasks * args.group // 2, steps_per_generation=2,
        num_generations=args.group, max_completion_length=4096, learning_rate=args.lr, lr_scheduler_type="constant",
        warmup_steps=0, beta=args.kl, max_grad_norm=1.0, temperature=1.0, max_steps=100_000, logging_steps=10,
        report_to="none", save_strategy="no", eval_strategy="no", seed=args.seed, mask_truncated_completions=False,
        disable_dropout=True)

    def reward(completions, episode_return, **_):
        return list(episode_return)

    trainer = GRPOTrainer(model=policy.model, reward_funcs=reward, args=config, train_dataset=data,
                          processing_class=policy.tokenizer, callbacks=[Clock()],
                          rollout_func=lambda prompts, tr: play(tr, prompts, make, chat, meta.max_new_tokens))
    trainer.train()
    return curve


def seconds_to(curve: list[tuple[float, float]], target: float) -> float | None:
    return next((t for t, s in curve if s >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True, help="SFT checkpoint both arms start from")
    parser.add_argument("--target", type=float, default=0.9)
    parser.add_argument("--split", default="basic")
    parser.add_argument("--budget", type=float, default=900.0, help="training seconds at most per arm")
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--skip-seeds", type=int, default=0,
                        help="held-out seeds passed over first (both arms): seeds no development run played")
    parser.add_argument("--eval-every", type=int, default=5, help="ours: RL iterations between evaluations")
    parser.add_argument("--eval-seconds", type=float, default=20.0, help="trl: training seconds between evaluations")
    parser.add_argument("--tasks", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-4)
    parser.add_argument("--kl", type=float, default=0.01, help="TRL's beta (ours: its adaptive KL from rl.kl_coef)")
    parser.add_argument("--ours-flags", default="", help="more `marl train` flags for our arm")
    parser.add_argument("--arms", nargs="+", default=["ours", "trl"], choices=["ours", "trl"])
    parser.add_argument("--trl-budget-factor", type=float, default=0.0,
                        help="when ours reached the target after t s, train TRL for at most this many times t (enough "
                             "to decide whether ours <= 1/factor of TRL's seconds); 0: TRL gets --budget")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", default="runs/bench/trl")
    args = parser.parse_args()
    workdir = Path(args.workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed)
    curves, budgets = {}, {"ours": args.budget, "trl": args.budget}
    for arm in args.arms:
        if arm == "ours":
            curves[arm] = ours(args, workdir)
            t = seconds_to(curves[arm], args.target)
            if args.trl_budget_factor > 0 and t is not None:
                budgets["trl"] = min(args.budget, max(args.trl_budget_factor * t, args.eval_seconds))
        else:
            curves[arm] = trl(args, workdir, budgets["trl"])
    (workdir / f"curves-s{args.seed}.json").write_text(json.dumps(curves, indent=1))
    for arm, curve in curves.items():
        shown = ", ".join(f"{t:.0f}s {s:.2f}" for t, s in curve)
        print(f"{arm}: {shown}")
    if any(curve[0][1] >= args.target for curve in curves.values()):
        print(f"the start checkpoint already reaches {args.split} >= {args.target}: give a weaker start (shorter SFT)")
        return
    reached = {arm: seconds_to(curve, args.target) for arm, curve in curves.items()}
    for arm, t in reached.items():
        print(f"{arm}: {args.split} >= {args.target} after " + (f"{t:.0f} s of training" if t is not None
                                                                  else f"never within {curves[arm][-1][0]:.0f} s"))
    if len(reached) == 2 and None not in reached.values():
        print(f"ours / trl: {reached['ours'] / max(reached['trl'], 1e-9):.2f}x the training seconds")
    elif len(reached) == 2 and reached["ours"] is not None:
        print(f"ours / trl: < {reached['ours'] / curves['trl'][-1][0]:.2f}x the training seconds (TRL not there "
              f"after {curves['trl'][-1][0]:.0f} s)")
    elif len(curves) == 2:
        # Where an arm misses the target, compare at the best level both reached above the start instead;
        # the start level itself is reached at 0 s by both and says nothing.
        start = curves["ours"][0][1]
        common = min(max(s for _, s in curve) for curve in curves.values())
        if common <= start:
            print(f"best level both reached: none above the start ({args.split} {start:.2f})")
            return
        at = {arm: seconds_to(curve, common) for arm, curve in curves.items()}
        print(f"best level both reached: {args.split} {common:.2f}, ours after {at['ours']:.0f} s, trl after "
              f"{at['trl']:.0f} s: ours / trl {at['ours'] / max(at['trl'], 1e-9):.2f}x")


if __name__ == "__main__":
    main()
