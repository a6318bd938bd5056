"""Does bfloat16 autocast pay for the learner on this machine? Matmul rates and scoring forward+backward, fp32 vs bf16.

Two measurements, each a ratio from one run:
- a square matmul and a learner-shaped one ([tokens, hidden] x [hidden, 2 * hidden]) in float32 and in
  bfloat16 (CPUs with AMX or avx512_bf16 run the latter several times faster; others emulate it);
- one forward and backward of the learner's scoring forward (`policies.span_forward.decision_logits`, router
  logits on) on `--sequences` random sequences of 250-400 tokens, 10% of positions read, per preset, plain
  float32 against `torch.autocast(bfloat16)` (float32 weights and gradients, bfloat16 matmuls), best of
  `--repeats` after a warm-up; plus the relative error of one gradient against float32's.

    python benchmarks/precision_probe.py --presets tiny-moe small-moe
"""

from __future__ import annotations

import argparse
import random
import time

import torch

from policies.presets import build_model
from policies.span_forward import decision_logits


def best_seconds(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_rates(repeats: int) -> None:
    for name, (m, k, n) in (("1024 x 1024 x 1024", (1024, 1024, 1024)), ("4096 x 128 x 256", (4096, 128, 256))):
        rates = {}
        for dtype in (torch.float32, torch.bfloat16):
            a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
            rates[dtype] = 2 * m * k * n / best_seconds(lambda a=a, b=b: a @ b, repeats) / 1e9
        print(f"| matmul {name} | {rates[torch.float32]:.0f} | {rates[torch.bfloat16]:.0f} | "
              f"{rates[torch.bfloat16] / rates[torch.float32]:.2f}x |")


def scoring(preset: str, sequences: int, repeats: int, seed: int) -> None:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = build_model(preset, 1200, seed).train()
    seqs = [[rng.randrange(5, 1200) for _ in range(rng.randint(250, 400))] for _ in range(sequences)]
    rows, cols = [], []
    for r, s in enumerate(seqs):
        for c in rng.sample(range(1, len(s) - 1), len(s) // 10):
            rows.append(r)
            cols.append(c)
    probe = model.get_decoder().layers[0].self_attn.q_proj.weight

    def step(bf16: bool) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = decision_logits(model, seqs, rows, cols, shared_until=[0] * len(seqs), pad_id=0,
                                  device=torch.device("cpu"), with_router_logits=True)
            loss = torch.log_softmax(out.logits.float(), -1)[:, 7].mean()
        loss.backward()
        grad = probe.grad.detach().clone()
        model.zero_grad(set_to_none=True)
        return grad

    error = float((step(True) - step(False)).norm() / step(False).norm())
    fp32 = best_seconds(lambda: step(False), repeats)
    bf16 = best_seconds(lambda: step(True), repeats)
    print(f"| scoring fwd+bwd, {preset}, {sequences} sequences | {fp32:.2f} s | {bf16:.2f} s | {fp32 / bf16:.2f}x "
          f"(gradient relative error {error:.3f}) |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny-moe", "small-moe"])
    parser.add_argument("--sequences", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    print("| what | float32 | bfloat16 | bfloat16 speed-up |")
    print("|---|---|---|---|")
    matmul_rates(args.repeats * 5)
    for preset in args.presets:
        scoring(preset, args.sequences, args.repeats, args.seed)


if __name__ == "__main__":
    main()
