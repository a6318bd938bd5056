"""RL iterations with a LoRA adapter per agent on a real-shaped MoE (random init), with tokens/s and memory.

Builds a Qwen3-MoE checkpoint at `--shape` (random init; `1b`: about 0.85B parameters, 64 experts of which 8 are
active, the class of small open MoE models; `tiny` for a CPU check of the script itself) with a byte-level BPE
trained offline and a ChatML template (`tests/policies/hf_helpers.py`), saves both with `save_pretrained`, then
runs `marl train` on it through the public path: `info_split` with 4 agents, one LoRA adapter per agent, a few
SFT steps and `--iterations` RL iterations. It prints the run's parameter counts, rollout tokens per second
(generated and processed), seconds per iteration and peak memory (GPU: `torch.cuda.max_memory_allocated`; CPU:
the process's peak resident set). It measures no learning.

    python benchmarks/lora_moe_run.py --shape 1b --device cuda --iterations 3     # on a GPU machine
    python benchmarks/lora_moe_run.py --shape tiny --device cpu --iterations 2    # the script itself, on a CPU
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from pathlib import Path

import mlflow
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "policies"))
from hf_helpers import FAMILIES, bpe_tokenizer, save_checkpoint  # noqa: E402

from marl.config import TrainConfig  # noqa: E402
from marl.run.train import train  # noqa: E402

SHAPES = {
    "tiny": dict(FAMILIES["qwen3_moe"]["config"]),
    # Qwen3-MoE layout at about 0.85B parameters (0.15B active): 16 layers, 64 experts, top-8.
    "1b": dict(hidden_size=1024, intermediate_size=2816, moe_intermediate_size=256, num_hidden_layers=16,
               num_attention_heads=16, num_key_value_heads=4, head_dim=64, num_experts=64, num_experts_per_tok=8,
               norm_topk_prob=True, tie_word_embeddings=True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="lora-moe-"))
    FAMILIES["qwen3_moe"]["config"] = SHAPES[args.shape]
    tok = bpe_tokenizer("qwen3_moe", vocab_size=2000)
    folder = save_checkpoint(work / "model", "qwen3_moe", tok)
    cfg = TrainConfig(scenario="info_split", agents=4, policy_mapping="agent", iterations=args.iterations,
                      eval_episodes=0, output_dir=str(work / "runs"))
    cfg.policy.model, cfg.policy.device, cfg.policy.max_new_tokens = str(folder), args.device, 96
    cfg.lora.rank, cfg.lora.learning_rate = args.rank, 1e-3
    cfg.sft.seconds, cfg.sft.max_steps, cfg.sft.episodes, cfg.sft.batch_size = 10_000.0, 5, 40, 4
    cfg.rl.seconds, cfg.rl.tasks_per_iteration, cfg.rl.group_size = 10_000.0, 4, 4
    cfg.tracking.tracking_uri = f"sqlite:///{work}/mlflow.db"
    cfg.tracking.log_model = False
    if args.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    result = train(cfg)
    wall = time.perf_counter() - start
    client = mlflow.MlflowClient(result.tracking_uri)
    run = client.get_run(result.run_id)

    def history(key: str) -> list[float]:
        return [m.value for m in client.get_metric_history(result.run_id, key)]

    print(f"shape {args.shape}: {int(run.data.params['model.parameters']):,} parameters, "
          f"{int(run.data.params['lora.trainable_parameters']):,} in each agent's adapter (rank {args.rank}); "
          f"device {run.data.params['device']}")
    for key in ("perf/tokens_per_s", "perf/processed_tokens_per_s", "perf/rollout_seconds",
                "perf/update_seconds"):
        values = history(key)
        if values:
            print(f"{key}: " + " / ".join(f"{v:.1f}" for v in values))
    if args.device.startswith("cuda"):
        print(f"peak GPU memory allocated: {torch.cuda.max_memory_allocated() / 2 ** 30:.2f} GiB")
    print(f"peak resident memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB; "
          f"whole run {wall:.0f} s; workdir {work}")


if __name__ == "__main__":
    main()
