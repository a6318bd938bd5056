"""Rollout decoding (`LLMPolicy.generate`) against transformers' `generate` on the same model, prompts and batch.

Per preset and batch size, both sample `--new-tokens` tokens at temperature 1 after the same random
prompts of `--prompt-tokens` tokens, with a KV cache:
- free: no mask. transformers' side runs `generate(min_new_tokens=max_new_tokens)`, ours counts the tokens
  it did generate (a random-init model rarely samples the end token early).
- constrained: every row writes a `tool_use` action under its grammar; ours walks the grammar's token trie
  (forced tokens fed in one chunk after each decision), transformers' side gets the same trie through
  `prefix_allowed_tokens_fn`, one forward per token. Both stop a row at the action's end token.
Each cell is the best of `--repeats` timed calls after one warm-up call, in generated tokens per second;
the ratio is ours over transformers' measured in this one run. `--bound` adds the fp32 matmul rate of
this machine (a square matmul) and each row's share of it: the matmul FLOPs the lean forward ran in the whole
call (the prompts' tokens, read in the first forward, and the generated ones; work it skips, such as the last
layer's queries and experts for columns whose output nobody reads, does not count) over its time.

    python benchmarks/decode_vs_hf.py --presets tiny-moe small-moe --batches 1 16 64 256
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from marl.config import TrainConfig
from marl.run.build import build_policy, train_env_factory
from policies.constrained import TokenTrie
from policies.lean_forward import LeanForward
from policies.llm_policy import LLMPolicy


def matmul_gflops(size: int = 1024, repeats: int = 5) -> float:
    """fp32 GFLOP/s of a square matmul on this machine (the best of `repeats`)."""
    a, b = torch.randn(size, size), torch.randn(size, size)
    a @ b
    best = min(_timed(lambda: a @ b) for _ in range(repeats))
    return 2 * size ** 3 / best / 1e9


def layer_flops(model: torch.nn.Module, context: float) -> tuple[float, float]:
    """Matmul FLOPs one column costs in one decoder layer: (its key and value projections, everything else:
    the query and output projections, attention over `context` columns, the router and its experts)."""
    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    kv = 2.0 * c.hidden_size * head_dim * 2 * c.num_key_value_heads
    rest = 2.0 * (c.hidden_size * head_dim * 2 * c.num_attention_heads + 2 * c.num_attention_heads * head_dim * context
                  + c.num_experts_per_tok * 3 * c.hidden_size * c.moe_intermediate_size + c.hidden_size * c.num_experts)
    return kv, rest


def executed_flops(model: torch.nn.Module, calls: list[tuple[int, int, int, int]]) -> float:
    """Matmul FLOPs the lean forward ran over `calls` (rows, real columns, past columns, width each): every real
    column through all layers but the last, whose keys and values only it computes; each row's last column
    through the last layer and the output layer (embedding lookups are free)."""
    layers = model.config.num_hidden_layers
    head = 2.0 * model.config.hidden_size * model.get_output_embeddings().weight.shape[0]
    total = 0.0
    for rows, columns, past, width in calls:
        kv, rest = layer_flops(model, past + width / 2)  # a column attends to half the chunk on average
        _, last_rest = layer_flops(model, past + width)
        total += columns * ((layers - 1) * (kv + rest) + kv) + rows * (last_rest + head)
    return total


@contextlib.contextmanager
def recording_calls(calls: list[tuple[int, int, int, int]]):
    """Record (rows, real columns, past columns, width) of every lean forward call made inside."""
    original = LeanForward.__call__

    def record(self, ids, attention, positions, cache):
        rows, width = ids.shape
        calls.append((rows, int(attention[:, -width:].sum()), attention.shape[1] - width, width))
        return original(self, ids, attention, positions, cache)

    LeanForward.__call__ = record
    try:
        yield
    finally:
        LeanForward.__call__ = original


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def hf_prefix_fn(trie: TokenTrie, prompt_len: int, end_id: int):
    """`prefix_allowed_tokens_fn` walking `trie` over what a row generated so far."""
    def allowed(_: int, ids: torch.Tensor) -> list[int]:
        node = 0
        for tok in ids[prompt_len:].tolist():
            if tok == end_id:
                return [end_id]
            node = trie.children[node][tok]
        return trie.allowed(node)
    return allowed


def hf_generate(policy: LLMPolicy, prompts: torch.Tensor, new_tokens: int, trie: TokenTrie | None) -> int:
    """transformers' sampling with its KV cache; returns the tokens generated."""
    kwargs = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=new_tokens,
                  pad_token_id=policy.pad_id, attention_mask=torch.ones_like(prompts))
    if trie is None:
        kwargs.update(min_new_tokens=new_tokens, eos_token_id=None)
    else:
        kwargs.update(eos_token_id=policy.end_id,
                      prefix_allowed_tokens_fn=hf_prefix_fn(trie, prompts.shape[1], policy.end_id))
    with torch.inference_mode():
        out = policy.model.generate(prompts, **kwargs)
    new = out[:, prompts.shape[1]:]
    if trie is None:
        return int(new.numel())
    # tokens up to and including each row's end token
    ends = (new == policy.end_id).int()
    return int(sum(int(r.argmax()) + 1 if r.any() else new.shape[1] for r in ends))


def ours_generate(policy: LLMPolicy, prompts: torch.Tensor, grammar, lean: bool = True) -> int:
    """The rollout's decoding; `lean=False` runs each step through the model's own forward instead."""
    before, policy.lean = policy.lean, lean
    try:
        gen = policy.generate(prompts.tolist(), [grammar] * prompts.shape[0])
    finally:
        policy.lean = before
    return sum(len(ids) for ids in gen.token_ids)


def best_rate(name: str, policy: LLMPolicy, prompts: torch.Tensor, grammar, trie: TokenTrie | None,
              new_tokens: int, repeats: int) -> tuple[float, float]:
    """Generated tokens/s of one side (`hf`, ours through the `model` forward, `ours`), best of `repeats`, and
    that call's seconds."""
    def run() -> int:
        if name == "hf":
            return hf_generate(policy, prompts, new_tokens, trie)
        return ours_generate(policy, prompts, grammar, lean=name == "ours")

    run()  # warm-up
    best, best_seconds = 0.0, 0.0
    for _ in range(repeats):
        t0 = time.perf_counter()
        tokens = run()
        seconds = time.perf_counter() - t0
        if tokens / seconds > best:
            best, best_seconds = tokens / seconds, seconds
    return best, best_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny-moe", "small-moe"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 16, 64, 256])
    parser.add_argument("--prompt-tokens", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["free", "constrained"], choices=["free", "constrained"])
    parser.add_argument("--bound", action="store_true", help="also measure the fp32 matmul rate and each share")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    # this machine's matmul rate drifts: the bound is the best of several measurements, before and after the rows
    bound = matmul_gflops(repeats=10) if args.bound else None
    header = ("| preset | params | mode | batch | transformers tok/s | ours, model forward tok/s | ours tok/s | "
              "ours / transformers |" + (" ours GFLOP/s | share of bound |" if bound else ""))
    rows: list[tuple[str, float | None]] = []  # each table row, and its achieved GFLOP/s when measuring the bound
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets:
            cfg = TrainConfig(seed=args.seed, scenario="tool_use")
            cfg.policy.model, cfg.policy.tokenizer_episodes, cfg.policy.max_new_tokens = preset, 200, args.new_tokens
            make = train_env_factory(cfg, "train")
            tokenizer, model, policy = build_policy(cfg, make, Path(tmp), np.random.default_rng(args.seed))
            model.eval()
            env = make()
            env.reset(seed=args.seed)
            grammar = env.action_grammar(env.agents[0])
            trie = TokenTrie.from_grammar(grammar, tokenizer, policy.end_id)
            usable = np.flatnonzero(policy.free_mask(torch.device("cpu")).numpy())
            params = sum(p.numel() for p in model.parameters()) / 1e6
            for mode in args.modes:
                for batch in args.batches:
                    prompts = torch.from_numpy(np.random.default_rng(batch).choice(usable, (batch, args.prompt_tokens)))
                    g = None if mode == "free" else grammar
                    t = None if mode == "free" else trie
                    rates, seconds = {}, {}
                    for name in ("hf", "model", "ours"):
                        rates[name], seconds[name] = best_rate(name, policy, prompts, g, t, args.new_tokens,
                                                               args.repeats)
                    row = (f"| {preset} | {params:.1f}M | {mode} | {batch} | {rates['hf']:,.0f} | {rates['model']:,.0f} | "
                           f"{rates['ours']:,.0f} | "
                           f"{rates['ours'] / rates['hf']:.2f}x |")
                    achieved = None
                    if bound:  # the work of one call (sampling varies the forwards a little from call to call)
                        calls: list[tuple[int, int, int, int]] = []
                        with recording_calls(calls):
                            ours_generate(policy, prompts, g)
                        achieved = executed_flops(model, calls) / seconds["ours"] / 1e9
                    rows.append((row, achieved))
                    print(row + (f" {achieved:.1f} GFLOP/s" if achieved else ""), flush=True)
    if bound:
        bound = max(bound, matmul_gflops(repeats=10))
        print(f"fp32 matmul bound: {bound:.0f} GFLOP/s (1024x1024, best of 10 before and 10 after the rows)")
    print(header)
    print("|---|---|---|---|---|---|---|---|" + ("---|---|" if bound else ""))
    for row, achieved in rows:
        print(row + (f" {achieved:.1f} | {achieved / bound:.0%} |" if bound else ""))


if __name__ == "__main__":
    main()
