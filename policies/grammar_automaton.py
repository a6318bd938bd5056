"""An action grammar compiled to a token DFA without expanding it (for grammars too large to expand).

A template is a chain of parts (literal strings and slots). Every literal and every slot value is
tokenized on its own; each part becomes a trie over its values' ids, and the end of a value leads
(an epsilon move) into the next part's trie. Subset construction over token transitions, started
from every template's first part at once, turns this NFA into a DFA whose nodes are shared by many
actions (a DAG: an offer's third slot is one sub-automaton whatever the first two slots held), so
its size is about the sum of the parts' tries instead of the product of the slots' sizes.

Per-part tokenization equals tokenizing the whole action (`ChatFormat.encode_action`, the ids the
policy must produce) only when the tokenizer never merges across a part boundary. `compile_dfa`
checks this on a deterministic sample of whole actions per template and raises a ValueError naming
the boundary when it fails. Left out: DFA minimization (dropping finished-value states in the
closure already merges the equal futures of slot values) and regex or recursive grammars.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from transformers import PreTrainedTokenizerBase

from policies.per_tokenizer import PerTokenizer

if TYPE_CHECKING:  # plain data from scenarios; only its templates and Slot.values are read
    from scenarios.grammar import ActionGrammar, Part

SAMPLES_PER_TEMPLATE = 64
NState = tuple[int, int, int]  # (template, part, node of that part's trie)


@dataclass
class Automaton:
    """A token DFA (node 0 is the root) and the canonical ids of the actions it was checked on."""

    children: list[dict[int, int]]
    terminal: list[bool]
    depth: int  # longest action in tokens, end included
    samples: list[list[int]]  # canonical ids (no end) of the sampled actions


@dataclass
class Trie:
    """A prefix tree over sequences (token ids, or a string's characters); node 0 is the root."""

    children: list[dict]
    ends: list[bool]  # a sequence ends at this node


def trie_of(sequences: Iterable[Sequence]) -> tuple[Trie, list[int]]:
    """The trie of `sequences` and the node where each of them ends."""
    trie, ends = Trie([{}], [False]), []
    for seq in sequences:
        node = 0
        for item in seq:
            nxt = trie.children[node].get(item)
            if nxt is None:
                nxt = len(trie.children)
                trie.children[node][item] = nxt
                trie.children.append({})
                trie.ends.append(False)
            node = nxt
        trie.ends[node] = True
        ends.append(node)
    return trie, ends


def _values(part: Part) -> tuple[str, ...]:
    return (part,) if isinstance(part, str) else part.values


_VALUE_IDS: PerTokenizer[dict[str, list[int]]] = PerTokenizer()
VALUE_IDS_KEPT = 200_000
"""Part values whose ids are remembered per tokenizer (then forgotten all at once): a scenario's grammars change
every turn but reuse the same values (an offer's slots), and tokenizing them again was a large part of a
compile."""


def _value_ids(tokenizer: PreTrainedTokenizerBase, strings: set[str]) -> dict[str, list[int]]:
    """The ids of each string tokenized on its own (remembered for this tokenizer object)."""
    known = _VALUE_IDS.get(tokenizer) or {}
    new = sorted(strings.difference(known))
    if new:
        if len(known) + len(new) > VALUE_IDS_KEPT:
            known = {}
        known.update(zip(new, tokenizer(new, add_special_tokens=False)["input_ids"], strict=True))
        _VALUE_IDS.put(tokenizer, known)
    return {v: known[v] for v in strings}


def compile_dfa(grammar: ActionGrammar, tokenizer: PreTrainedTokenizerBase, end_id: int) -> Automaton:
    """Compile `grammar` part by part; raise ValueError when per-part ids differ from whole-action ids."""
    templates = [[_values(p) for p in t] for t in grammar.templates]
    if not templates:
        raise ValueError("the action grammar expands to no actions; give every agent at least one valid action")
    ids = _value_ids(tokenizer, {v for t in templates for values in t for v in values})
    if any(end_id in seq for seq in ids.values()):
        raise ValueError("an action's text encodes to the end-of-turn token; remove it from the grammar")
    samples = _check_boundaries(grammar, templates, ids, tokenizer)
    tries: dict[tuple[str, ...], Trie] = {}  # equal parts (e.g. every " " literal) share one trie
    for values in (values for t in templates for values in t):
        if values not in tries:
            tries[values] = trie_of(ids[v] for v in values)[0]
    parts = [[tries[values] for values in t] for t in templates]
    children, terminal = _determinize(parts)
    # the longest action: every part's longest value, in the template where they add up to most (a template
    # with an empty slot has no action)
    longest = max((sum(max(len(ids[v]) for v in values) for values in t) for t in templates if all(t)), default=0)
    return Automaton(children, terminal, longest + 1, samples)


def _closure(states: Sequence[NState], parts: list[list[Trie]]) -> tuple[frozenset[NState], bool]:
    """Follow value ends into the next part; returns (states with outgoing tokens, accepting).

    States without outgoing tokens are dropped: a finished value adds nothing but its epsilon move,
    and dropping it lets every value of a slot lead to the same DFA node (the DAG's sharing).
    """
    if len(states) == 1:  # a value going on (most moves): nothing to follow
        t, p, node = states[0]
        trie = parts[t][p]
        if not trie.ends[node]:
            return frozenset(states), False
    stack, seen, kept, accept = list(states), set(), set(), False
    while stack:
        state = stack.pop()
        if state in seen:
            continue
        seen.add(state)
        t, p, node = state
        trie = parts[t][p]
        if trie.children[node]:
            kept.add(state)
        if trie.ends[node]:
            if p + 1 == len(parts[t]):
                accept = True
            else:
                stack.append((t, p + 1, 0))
    return frozenset(kept), accept


def _determinize(parts: list[list[Trie]]) -> tuple[list[dict[int, int]], list[bool]]:
    """Subset construction; nodes are numbered in BFS order with sorted tokens (deterministic)."""
    starts = [(t, 0, 0) for t, chain in enumerate(parts) if chain]
    root, accept = _closure(starts, parts)
    accept = accept or any(not chain for chain in parts)  # an empty template is the empty action
    index = {(root, accept): 0}
    queue = [root]
    children: list[dict[int, int]] = [{}]
    terminal = [accept]
    for node, states in enumerate(queue):  # the queue grows while it is walked
        if len(states) == 1:  # inside one value of one part (most nodes): its trie's moves, one state each
            (t, p, n), = states
            steps = parts[t][p].children[n]
            moves = {tok: ((t, p, steps[tok]),) for tok in steps}
        else:
            moves = {}
            for t, p, n in sorted(states):
                for tok, nxt in parts[t][p].children[n].items():
                    moves.setdefault(tok, []).append((t, p, nxt))
        for tok in sorted(moves):
            key = _closure(moves[tok], parts)
            target = index.get(key)
            if target is None:
                target = index[key] = len(queue)
                queue.append(key[0])
                children.append({})
                terminal.append(key[1])
            children[node][tok] = target
    return children, terminal


def _sample_combos(sizes: Sequence[int], k: int) -> list[tuple[int, ...]]:
    """Up to `k` value-index combos: all of them if few, else each slot's first and last value
    (others random) plus seeded random ones; deterministic, so compiling twice checks the same actions."""
    if math.prod(sizes) <= k:
        return list(itertools.product(*(range(s) for s in sizes)))
    rng = random.Random(0)
    combos = dict.fromkeys([tuple(0 for _ in sizes), tuple(s - 1 for s in sizes)])  # an ordered set
    for j, s in enumerate(sizes):
        for v in (0, s - 1):
            combos[tuple(v if i == j else rng.randrange(size) for i, size in enumerate(sizes))] = None
    while len(combos) < k:  # terminates: there are more than k combos
        combos[tuple(rng.randrange(s) for s in sizes)] = None
    return list(combos)[:k]


class BoundaryMergeError(ValueError):
    """The tokenizer merges across a part boundary of the grammar: compile through characters instead."""


def _sampled_parts(templates: list[list[tuple[str, ...]]]) -> list[tuple[int, list[str]]]:
    return [(t, [values[i] for values, i in zip(templates[t], combo, strict=True)])
            for t in range(len(templates))
            for combo in _sample_combos([len(v) for v in templates[t]], SAMPLES_PER_TEMPLATE)]


def sampled_actions(grammar: ActionGrammar) -> list[str]:
    """A deterministic sample of the grammar's actions: every action of a small template, else each slot's
    first and last value and seeded random ones (what compilers check their automaton on)."""
    templates = [[_values(p) for p in t] for t in grammar.templates]
    return ["".join(vals) for _, vals in _sampled_parts(templates)]


def _check_boundaries(grammar: ActionGrammar, templates: list[list[tuple[str, ...]]],
                      ids: dict[str, list[int]], tokenizer: PreTrainedTokenizerBase) -> list[list[int]]:
    """Tokenize sampled whole actions; raise unless each equals the concatenation of its parts' ids.

    Returns the canonical ids of the samples (the caller checks that the automaton accepts them).
    """
    chosen = _sampled_parts(templates)
    canonical = tokenizer(["".join(vals) for _, vals in chosen], add_special_tokens=False)["input_ids"]
    for (t, vals), whole in zip(chosen, canonical, strict=True):
        if whole != [tok for v in vals for tok in ids[v]]:
            raise BoundaryMergeError(_merge_message(grammar.templates[t], t, vals, whole, ids))
    return [list(whole) for whole in canonical]


def _merge_message(template: Sequence[Part], t: int, vals: list[str], whole: list[int],
                   ids: dict[str, list[int]]) -> str:
    # Find the first part whose ids differ in context. Only its last id differing means it merged
    # with its right neighbour; otherwise its left neighbour changed how it is split.
    pos, k = 0, len(vals) - 1
    for i, v in enumerate(vals):
        if whole[pos:pos + len(ids[v])] != ids[v]:
            k = i
            break
        pos += len(ids[v])
    own = ids[vals[k]]
    with_right = k + 1 < len(vals) and (k == 0 or whole[pos:pos + len(own) - 1] == own[:-1])
    left = max(k if with_right else k - 1, 0)
    right = min(left + 1, len(vals) - 1)

    def name(i: int) -> str:
        part = template[i]
        return f"literal {part!r}" if isinstance(part, str) else f"slot {part.name!r} (value {vals[i]!r})"

    return (f"constrained decoding: template {t} of the action grammar cannot be compiled part by part: the "
            f"tokenizer merges across the boundary between {name(left)} and {name(right)} (action "
            f"{''.join(vals)!r}), so its ids differ from the concatenation of its parts' ids. The grammar has too "
            "many actions to expand; make its literals end and its slot values begin at token boundaries (e.g. "
            "add the slot values to the scenario's entity vocabulary), or decode without constraints "
            "(--policy.no-constrained)")
