"""How well can each critic input be learned? Explained variance of fresh critics on held-out rollouts.

An algorithm comparison mixes two questions: does a critic's input carry what the value depends
on, and can a small critic learn to read it in the updates it gets? This probe answers the second
for several inputs on the same rollouts, with nothing else moving: it plays a fixed policy
(sampled, as in training) on training seeds and on held-out seeds, recording the global state,
then trains a fresh critic per input on the Monte-Carlo returns-to-go of the training rollouts
(the targets GAE tends to with lambda = 1 and no truncation bootstrap) and prints the explained
variance on the held-out rollouts after every epoch. Budgets are in epochs, so the figures do not
depend on what else the machine runs.

    python benchmarks/critic_probe.py --checkpoint runs/<run_id>/checkpoint --agents 3 \\
        --train-tasks 48 --group 4 --heldout-tasks 32 --epochs 8

Inputs (`--inputs`): `own` (the agent's own conversation, `ippo`'s), `state` (the global state then
`agent <id>`, `mappo`'s), plus the views of `marl.engine.critic.STATE_VIEWS`. `--critic-model` picks the
trunk (a preset, or a checkpoint folder: e.g. the policy's own, as a warm-started critic).
"""

from __future__ import annotations

import argparse
import copy
import pickle
import time
from pathlib import Path

import numpy as np
import torch

from marl.engine.advantages import explained_variance
from marl.engine.critic import Critic, build_critic_model
from marl.engine.rollout import RolloutBatch, RolloutWorker
from marl.run.build import env_factory, load_policy


def returns_to_go(batch: RolloutBatch) -> np.ndarray:
    """Per turn: the sum of the agent's rewards from that turn to the end of its episode."""
    out = np.zeros(len(batch.turns))
    for ep in batch.episodes:
        running = 0.0
        for i in reversed(ep.turns):
            running += batch.turns[i].reward
            out[i] = running
    return out


def fit(critic: Critic, train: RolloutBatch, heldout: RolloutBatch, epochs: int, minibatch: int,
        rng: np.random.Generator) -> list[tuple[float, float, float]]:
    """Train on `train`'s returns-to-go; per epoch (train EV, held-out EV, seconds)."""
    target_train, target_held = returns_to_go(train), returns_to_go(heldout)
    held_inputs = critic.inputs(heldout, range(len(heldout.episodes)))
    held_target = np.array([target_held[r] for r in held_inputs.turns])
    out = []
    for _ in range(epochs):
        start = time.perf_counter()
        preds, targets = [], []
        # Minibatches of whole teams (as the learner steps the critic), about `minibatch` agent-episodes each.
        n = max(1, -(-len(train.episodes) // minibatch))
        for chosen in critic.team_chunks(train, range(len(train.episodes)), n, rng):
            inputs = critic.inputs(train, chosen)
            if not inputs.turns:
                continue
            target = torch.tensor([target_train[r] for r in inputs.turns], dtype=torch.float32)
            values = critic.predict(inputs)
            loss = torch.nn.functional.mse_loss(values, target.to(values.device))
            loss.backward()
            critic.step()
            preds.append(values.detach().cpu().numpy())
            targets.append(target.numpy())
        seconds = time.perf_counter() - start
        with torch.no_grad():
            critic.model.eval()
            held = critic.predict(held_inputs).cpu().numpy()
            critic.model.train()
        out.append((explained_variance(np.concatenate(preds), np.concatenate(targets)),
                    explained_variance(held, held_target), seconds))
    return out


def main() -> None:
    from marl.engine.critic import STATE_VIEWS

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--agents", type=int, default=None)
    parser.add_argument("--train-tasks", type=int, default=48)
    parser.add_argument("--group", type=int, default=4, help="rollouts per task seed (sampled)")
    parser.add_argument("--heldout-tasks", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--minibatch", type=int, default=32, help="agent-episodes per critic step (whole teams)")
    parser.add_argument("--learning-rate", type=float, default=1e-3)
    parser.add_argument("--critic-model", default="tiny-critic")
    parser.add_argument("--inputs", nargs="+", default=["own", "state", *STATE_VIEWS])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rollouts", type=Path, default=None, help="a pickle of the rollouts: read when it "
                        "exists, else written (to probe more inputs on the very same rollouts)")
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    policy, chat, meta = load_policy(args.checkpoint)
    scenario = meta.scenario
    agents = args.agents or meta.agents
    make_env = env_factory(scenario, agents, "train", meta.scenario_options)
    if meta.comms.get("topology", "none") != "none":
        raise SystemExit("this probe plays without comms; train the checkpoint without --comms.topology")
    worker = RolloutWorker(make_env, policy, chat)
    rng = np.random.default_rng(args.seed)
    seeds = rng.choice(2**31 - 1, size=args.train_tasks + args.heldout_tasks, replace=False).tolist()
    train_seeds = [s for s in seeds[: args.train_tasks] for _ in range(args.group)]
    held_seeds = [s for s in seeds[args.train_tasks :] for _ in range(args.group)]
    start = time.perf_counter()
    if args.rollouts is not None and args.rollouts.exists():
        train, heldout = pickle.loads(args.rollouts.read_bytes())
    else:
        train = worker.collect(train_seeds, sample_seed=args.seed, record_state=True)
        heldout = worker.collect(held_seeds, sample_seed=args.seed + 1, record_state=True)
        if args.rollouts is not None:
            args.rollouts.write_bytes(pickle.dumps((train, heldout)))
    rets = [ep.ret for ep in train.episodes]
    print(f"{scenario} x{agents}: {len(train.episodes)} train / {len(heldout.episodes)} held-out agent-episodes, "
          f"{len(train.turns)} / {len(heldout.turns)} turns, return mean {np.mean(rets):.3f} sd {np.std(rets):.3f} "
          f"({time.perf_counter() - start:.0f} s of rollouts)", flush=True)

    tokenizer = policy.tokenizer
    print("| input | critic | " + " | ".join(f"ep {e + 1}" for e in range(args.epochs)) + " | s/epoch |")
    print("|---|---|" + "---|" * (args.epochs + 1))
    for name in args.inputs:
        view = None if name in ("own", "state") else name
        model = build_critic_model(args.critic_model, view, len(tokenizer), tokenizer.pad_token_id, seed=args.seed)
        critic = Critic(model, tokenizer, chat, centralized=name != "own", learning_rate=args.learning_rate,
                        max_grad_norm=1.0, state_view=view)
        curve = fit(critic, copy.copy(train), copy.copy(heldout), args.epochs, args.minibatch,
                    np.random.default_rng(args.seed))
        cells = " | ".join(f"{held:.2f}" for _, held, _ in curve)
        print(f"| {name} | {Path(args.critic_model).name} | {cells} | {np.mean([s for *_, s in curve]):.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
