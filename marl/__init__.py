"""marl: the engine and the run of multi-agent RL for LLM agents, and the `marl` command.

Its rooms, each importing only those listed after it:
- `marl.cli`: the command line (`marl scenarios | train | eval | compare`);
- `marl.run`: the run around the engine (build the parts from a config, warm start, training loop,
  evaluation, checkpoints, MLflow tracking);
- `marl.engine`: the learning engine (rollout, policy mapping, advantages, algorithms, critics,
  losses, learner);
- `marl.config`: typed configuration, checked when built.
Beneath them all: `policies`, `comms` and `scenarios`, which never import `marl`.
"""
