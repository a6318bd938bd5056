"""The learning engine: plain data in (episodes as token ids, logprobs, rewards), parameter updates out.

- `rollout`: play many scenario episodes at once, one batched policy call per turn.
- `policy_map`: which model acts for which agent.
- `advantages`, `algorithms`: group baselines and GAE; the registered algorithms.
- `critic`: what a value function reads, its values and its loss.
- `losses`, `learner`: the loss terms and the PPO-clip update that sums them.
- `data_parallel`: the learner's policy steps shared over torch.distributed processes (torchrun).
- `errors`: the errors the engine raises on purpose.

It leaves out where configs come from, building models and scenarios (`marl.run.build`), the run
around the engine (`marl.run`: warm start, the training loop, checkpoints, MLflow) and the command line.
"""
