"""What constrained decoding costs with a user's tokenizer: compiling `bargaining`'s offer grammars through their
characters, and a decoding step under them against free decoding, on the same model, prompts and batch.

A byte-level BPE trained offline (no entity tokens, the tests' `hf_helpers.bpe_tokenizer`) merges across the
offer grammar's parts, so these grammars go through `policies.char_automaton`. Per team size: the grammar's
action count, the compile time (the vocabulary's character trie is built once per tokenizer, timed apart),
the DFA's nodes, then ms per generated token of a batch decoding those offers against the same batch decoding
freely for as many tokens (both on a random-init tiny Qwen3-MoE, best of `--repeats` after a warm-up); the
ratio is constrained over free, from one run.

    python benchmarks/char_automaton_cost.py --agents 3 5 8 --batch 32 [--vocab-size 8000]
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "policies"))
from hf_helpers import bpe_tokenizer  # noqa: E402

import scenarios  # noqa: E402
from policies import char_automaton  # noqa: E402
from policies.constrained import EXPAND_LIMIT, TokenTrie, clear_cache  # noqa: E402
from policies.grammar_automaton import BoundaryMergeError, compile_dfa  # noqa: E402
from policies.llm_policy import LLMPolicy  # noqa: E402
from policies.presets import build_model  # noqa: E402


def offer_grammar(agents: int):
    """The proposer's grammar (the one with offer slots) and first observation of a `bargaining` team."""
    env = scenarios.make("bargaining", n_agents=agents, seed=0, split="basic")
    obs, _ = env.reset()
    for agent in env.agents:
        grammar = env.action_grammar(agent)
        if any(not isinstance(p, str) for t in grammar.templates for p in t):
            return grammar, obs[agent]["text"]
    raise RuntimeError("no proposer at the first turn")


def action_count(grammar) -> int:
    return sum(math.prod(1 if isinstance(p, str) else len(p.values) for p in t) for t in grammar.templates)


def compiled_as(grammar, tok, actions: int) -> str:
    if actions <= EXPAND_LIMIT:
        return "trie"
    try:
        compile_dfa(grammar, tok, 0)
        return "parts"
    except BoundaryMergeError:
        return "characters"


def timed(fn, repeats: int) -> float:
    fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def row(n: int, tok, model, batch: int, repeats: int) -> str:
    """One table row: team size `n`'s offer grammar compiled and decoded."""
    grammar, text = offer_grammar(n)
    actions = action_count(grammar)

    def compile_once():
        clear_cache()
        return TokenTrie.from_grammar(grammar, tok, 0, cache=False)

    compile_s = timed(compile_once, repeats)
    trie = compile_once()
    policy = LLMPolicy(model, tok, constrained=True, max_new_tokens=trie.depth + 8, seed=0)
    prompts = [policy.chat.first(f"{text} (row {k})") for k in range(batch)]
    gen = policy.generate(prompts, [grammar] * batch, seed=0)
    tokens = gen.total_new_tokens
    constrained = timed(lambda: policy.generate(prompts, [grammar] * batch, seed=0), repeats)
    free_policy = LLMPolicy(model, tok, constrained=False, max_new_tokens=max(gen.num_new_tokens), seed=0)
    free_gen = free_policy.generate(prompts, [None] * batch, seed=0)
    free = timed(lambda: free_policy.generate(prompts, [None] * batch, seed=0), repeats)
    per_c, per_f = 1e3 * constrained / tokens, 1e3 * free / max(free_gen.total_new_tokens, 1)
    return (f"| {n} | {actions} | {compiled_as(grammar, tok, actions)} | {1e3 * compile_s:.1f} | {trie.num_nodes} | "
          f"{per_c:.3f} | {per_f:.3f} | "
          f"{per_c / per_f:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, nargs="+", default=[3, 5, 8])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--vocab-size", type=int, default=600,
                        help="BPE size; above the tests' corpus, the repository's own text trains it (a larger vocabulary)")
    args = parser.parse_args()
    torch.set_num_threads(2)
    root = Path(__file__).resolve().parents[1]
    texts = None if args.vocab_size <= 600 else [line for f in sorted(root.rglob("*.[pm][yd]")) if ".venv" not in f.parts
                                                  for line in f.read_text(errors="ignore").splitlines()]
    tok = bpe_tokenizer("qwen3_moe", texts, vocab_size=args.vocab_size)
    start = time.perf_counter()
    char_automaton.vocabulary_trie(tok)
    print(f"vocabulary trie: {len(tok)} tokens in {1e3 * (time.perf_counter() - start):.1f} ms (once per tokenizer)")
    model = build_model("tiny-moe", len(tok), seed=0, pad_token_id=tok.pad_token_id)
    print("| agents | actions | compiled as | compile ms | nodes | ms/token constrained | ms/token free | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for n in args.agents:
        print(row(n, tok, model, args.batch, args.repeats))

if __name__ == "__main__":
    main()
