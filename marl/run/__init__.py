"""The run around the engine: build the parts, warm start, train, evaluate, checkpoint, track in MLflow.

- `build`: the one place that builds scenario, comms, tokenizer, policy, policy map and critic from a config.
- `sft`: the warm start on scripted-expert demonstrations (a plain PyTorch loop); `warm_start`: it inside a run.
- `console`: progress bars and the kept per-iteration lines; `alerts`: thresholds that tag, warn and stop.
- `train`: `train(cfg)`, the whole pipeline inside one MLflow run.
- `remote`: RL rollouts on Ray actors (`rollout_workers`), collecting as the in-process worker does.
- `evaluate`: held-out evaluation on a split's evaluation seeds.
- `checkpoint`: folders of weights, tokenizer and a typed metadata record (`CheckpointMeta`).
- `tracking`: one MLflow run: params, batched metrics, artifacts, its end status.

It leaves out how a batch becomes an update (`marl.engine`) and parsing the command line (`marl.cli`).
"""
