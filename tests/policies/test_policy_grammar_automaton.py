"""Part-wise grammar DFA: the 8-agent bargaining offers (too many to expand) decode exactly the grammar."""

import gc
import math

import numpy as np
import pytest
import torch
from policy_helpers import ActionGrammar, Slot, grammars

import scenarios
from policies.chat import ChatFormat
from policies.constrained import EXPAND_LIMIT, TokenTrie
from policies.grammar_automaton import BoundaryMergeError, compile_dfa
from policies.llm_policy import LLMPolicy
from policies.presets import build_model
from policies.tokenizer import load_or_train_tokenizer


def _expert_corpus() -> list[str]:
    """Observations and actions of scripted 8-agent bargaining episodes, as `marl train` collects them."""
    texts = []
    for split in ("basic", "hard"):
        env = scenarios.make("bargaining", n_agents=8, seed=0, split=split)
        for seed in range(6):
            obs, _ = env.reset(seed=seed)
            texts += [o["text"] for o in obs.values()]
            while env.agents:
                actions = {a: env.expert_action(a) for a in env.agents}
                obs, *_ = env.step(actions)
                texts += list(actions.values()) + [o["text"] for o in obs.values()]
    return texts


@pytest.fixture(scope="module")
def btok(tmp_path_factory):
    entities = scenarios.make("bargaining", n_agents=8).entity_vocabulary()
    return load_or_train_tokenizer(tmp_path_factory.mktemp("tokenizers"), _expert_corpus, entities, 1024)


def _proposer_grammars(n_agents: int, seeds=range(3)) -> list[tuple[object, str, ActionGrammar, dict]]:
    """(env, proposer, grammar, first observations) per split and seed; the proposer's grammar has the offer slots."""
    out = []
    for split in ("basic", "hard"):
        for seed in seeds:
            env = scenarios.make("bargaining", n_agents=n_agents, seed=seed, split=split)
            obs, _ = env.reset()
            for agent in env.agents:
                g = env.action_grammar(agent)
                if any(isinstance(p, Slot) for t in g.templates for p in t):
                    out.append((env, agent, g, obs))
    return out


def _size(g: ActionGrammar) -> int:
    return sum(math.prod(len(p.values) for p in t if isinstance(p, Slot)) for t in g.templates)


def _sample(g: ActionGrammar, rng: np.random.Generator) -> str:
    template = g.templates[int(rng.integers(len(g.templates)))]
    return "".join(p if isinstance(p, str) else p.values[int(rng.integers(len(p.values)))] for p in template)


def _paths(trie: TokenTrie) -> set[tuple[int, ...]]:
    out, stack = set(), [((), 0)]
    while stack:
        prefix, node = stack.pop()
        for tok in trie.allowed(node):
            if tok == trie.end_id:
                out.add(prefix)
            else:
                stack.append(((*prefix, tok), trie.advance(node, tok)))
    return out


def test_bargaining_8_agents_compiles_to_small_dfa_accepting_valid_actions(btok):
    chat, rng = ChatFormat(btok), np.random.default_rng(0)
    for env, agent, g, _ in _proposer_grammars(8):
        assert _size(g) > 10 * EXPAND_LIMIT  # far past any expansion
        trie = TokenTrie.from_grammar(g, btok, chat.end_id)
        assert trie.num_nodes < 20_000 and trie.depth <= 48  # marl's default max_new_tokens
        table = trie.mask_table(len(btok))
        for text in [env.expert_action(agent)] + [_sample(g, rng) for _ in range(100)]:
            assert text in g
            ids = chat.encode_action(text)
            assert trie.accepts(ids), text
            node = 0
            for tok in ids[:-1]:  # every canonical token is allowed, and the mask row is the allowed list
                assert tok in trie.allowed(node) and table[node, tok]
                assert int(table[node].sum()) == len(trie.allowed(node))
                node = trie.advance(node, tok)
            assert trie.is_terminal(node) and trie.advance(node, chat.end_id) is None


def test_bargaining_dfa_rejects_everything_else(btok):
    """accepts(ids) holds exactly when ids are the canonical ids of a grammar action, on junk and near misses."""
    chat, rng = ChatFormat(btok), np.random.default_rng(1)
    digits = [btok.convert_tokens_to_ids(str(d)) for d in range(10)]
    for _, _, g, _ in _proposer_grammars(8, seeds=[0]):
        trie = TokenTrie.from_grammar(g, btok, chat.end_id)
        candidates = [[int(t) for t in rng.integers(len(btok), size=int(rng.integers(1, 45)))] + [chat.end_id]
                      for _ in range(200)]
        for _ in range(300):
            ids = chat.encode_action(_sample(g, rng))
            i = int(rng.integers(len(ids) - 1))
            kind = rng.integers(5)
            if kind == 0:  # another digit: a group's counts no longer add up (or a literal breaks)
                ids[i] = digits[(digits.index(ids[i]) + 1) % 10] if ids[i] in digits else digits[0]
            elif kind == 1:
                del ids[i]
            elif kind == 2:
                ids.insert(i, int(rng.choice(digits)))
            elif kind == 3:
                ids = ids[:-1]  # no end
            else:
                ids = ids[:i] + [chat.end_id]  # ends early
            candidates.append(ids)
        rejected = 0
        for ids in candidates:
            body = ids[:-1] if ids and ids[-1] == chat.end_id else None
            text = None if body is None or chat.end_id in body else chat.decode_action(body)
            valid = text is not None and text in g and chat.encode_action(text) == ids
            assert trie.accepts(ids) == valid, (ids, text)
            rejected += not valid
        assert rejected >= 450


def _small_grammars(btok) -> list[tuple[ActionGrammar, object]]:
    bargaining = [(g, btok) for _, _, g, _ in _proposer_grammars(2, seeds=[0, 1])]
    return bargaining + [(ActionGrammar((("yes", Slot("x", ("", " please", " please now"))), ("no",))), btok)]


def test_small_grammars_same_language_both_ways(btok, tokenizer):
    cases = _small_grammars(btok) + [(g, tokenizer) for g in grammars()]
    for g, tok in cases:
        end = ChatFormat(tok).end_id
        trie = TokenTrie.from_grammar(g, tok, end, cache=False)
        dfa = TokenTrie.from_grammar(g, tok, end, cache=False, expand_limit=0)
        assert trie.num_nodes == 1 + sum(len(ch) for ch in trie.children)  # a tree: the expansion path
        canonical = {tuple(ChatFormat(tok).encode_action(a)[:-1]) for a in g.expand()}
        assert _paths(trie) == _paths(dfa) == canonical
        assert dfa.depth == trie.depth and dfa.num_nodes <= trie.num_nodes


@pytest.mark.parametrize("collecting", [True, False])
def test_a_compile_leaves_the_cycle_collector_as_it_found_it(btok, collecting):
    end = ChatFormat(btok).end_id
    g = _proposer_grammars(8, seeds=[1])[0][2]
    was = gc.isenabled()
    try:
        (gc.enable if collecting else gc.disable)()
        TokenTrie.from_grammar(g, btok, end, cache=False)
        assert gc.isenabled() is collecting
        with pytest.raises(ValueError, match="no actions"):  # a failing compile too
            TokenTrie.from_grammar(ActionGrammar(()), btok, end, cache=False, expand_limit=0)
        assert gc.isenabled() is collecting
    finally:
        (gc.enable if was else gc.disable)()


def test_cache_keeps_each_path(btok):
    end = ChatFormat(btok).end_id
    g = _proposer_grammars(8, seeds=[0])[0][2]
    same = ActionGrammar(tuple(g.templates))
    assert TokenTrie.from_grammar(g, btok, end) is TokenTrie.from_grammar(same, btok, end)
    small = _small_grammars(btok)[0][0]
    assert TokenTrie.from_grammar(small, btok, end) is not TokenTrie.from_grammar(small, btok, end, expand_limit=0)
    assert _size(small) <= EXPAND_LIMIT


def test_boundary_merge_is_named_and_compiled_through_characters(tokenizer):
    end = ChatFormat(tokenizer).end_id
    encode = tokenizer.encode
    assert encode("Result", add_special_tokens=False) != encode("Res", add_special_tokens=False) + \
        encode("ult", add_special_tokens=False)  # premise: BPE merges across this split
    small = ActionGrammar((("Res", Slot("rest", ("ult", "ults"))),))
    with pytest.raises(BoundaryMergeError, match="boundary between literal 'Res' and slot 'rest'"):
        compile_dfa(small, tokenizer, end)
    results = ChatFormat(tokenizer).encode_action("Results")
    assert TokenTrie.from_grammar(small, tokenizer, end).accepts(results)
    assert TokenTrie.from_grammar(small, tokenizer, end, expand_limit=0).accepts(results)  # via characters
    # Too large to expand, and only the slot's last value merges: the sample includes it.
    values = tuple(f"x{i}" for i in range(2 * EXPAND_LIMIT)) + ("ult",)
    large = ActionGrammar((("ok",), ("Res", Slot("v", values))))
    with pytest.raises(BoundaryMergeError, match="template 1 .*'Res' and slot 'v' \\(value 'ult'\\)"):
        compile_dfa(large, tokenizer, end)
    trie = TokenTrie.from_grammar(large, tokenizer, end)
    assert trie.accepts(ChatFormat(tokenizer).encode_action("Result"))
    assert trie.accepts(ChatFormat(tokenizer).encode_action("Resx7"))
    assert not trie.accepts(ChatFormat(tokenizer).encode_action("Resx"))


@pytest.fixture(scope="module")
def bpolicy(btok):
    model = build_model("tiny-moe", len(btok), seed=0, pad_token_id=btok.pad_token_id,
                        bos_token_id=btok.bos_token_id, eos_token_id=btok.eos_token_id)
    return LLMPolicy(model, btok, constrained=True, temperature=1.0, max_new_tokens=48, seed=0)


def test_llm_policy_decodes_only_valid_bargaining_actions_at_8_agents(bpolicy):
    prompts, batch = [], []
    for env, proposer, _, obs in _proposer_grammars(8, seeds=range(2)):
        other = next(a for a in env.agents if a != proposer)  # a wait / respond grammar rides along
        for agent in (proposer, other):
            prompts.append(bpolicy.chat.first(obs[agent]["text"]))
            batch.append(env.action_grammar(agent))
    assert sum(_size(g) > EXPAND_LIMIT for g in batch) == 4
    for greedy, seed in ((True, 0), (False, 1)):
        gen = bpolicy.generate(prompts, batch, greedy=greedy, seed=seed)
        for g, text, ids, fin in zip(batch, gen.texts, gen.token_ids, gen.finished, strict=True):
            assert fin and text in g, text
            assert ids == bpolicy.chat.encode_action(text)  # the canonical ids, as the learner sees them
    scores = bpolicy.sequence_logprobs(prompts, gen.token_ids, gen.allowed)
    for i, lps in enumerate(gen.logprobs):
        torch.testing.assert_close(scores.logprobs[i, : len(lps)], torch.tensor(lps), atol=1e-4, rtol=0)
