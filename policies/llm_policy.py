"""The LLM policy: batched (constrained) generation with a KV cache, and the matching scorer.

`generate` serves every env x agent of a turn in ONE batched call: left padding, explicit
position ids, a prefill forward then incremental decoding through the model's KV cache, with
per-sample masks from each grammar's `TokenTrie`. A token the grammar forces (the only one allowed
at its node: most of an action's punctuation and names) is appended without sampling and fed with
the sampled token before it in one chunk, so a forward is spent per decision, not per token. It returns the ids, the log-probabilities
under the exact (masked, temperature-scaled) distribution sampled from, and the allowed ids per
token. `sequence_logprobs` is the learner's side: one right-padded forward of prompt + action
under the same masks and temperature, with entropy and (for MoE models) router statistics.
Works with any `AutoModelForCausalLM`; router parts are skipped when the model has none.
The result records (`Generation`, `SequenceScores`) live in `policies/outputs.py` and the scoring
forward in `policies/scoring.py`; both names stay importable from here.
Each decoding forward runs through `policies/lean_forward.py` where the model's family has one (Qwen3-MoE: the
same logits to float tolerance without transformers' per-call machinery); `lean=False` keeps the model's own.
Rows that finished leave the batch once a quarter of it is done (`policies/row_parking.py`: the cache stays
where it is and the rows still deciding are copied out; a turn cache gets every row back), so late forwards
run on the rows still deciding.
An opponent head (`policies/opponent_head.py`), when the engine attaches one as `opponent_head`, reads
`span_logprobs(..., with_prompt_hidden=True)`; one that `feeds_prompt` also predicts in `generate`, from
the hidden state at each prompt's end, and its prediction's ids (`hint_text`) go after the prompt
before the action is written (`Generation.hints`). Left out: value heads, beam search, stop strings.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from policies.chat import ChatFormat
from policies.constrained import TokenTrie
from policies.lean_forward import LeanForward
from policies.lean_forward import supports as lean_supports
from policies.opponent_head import hint_text, shown_classes
from policies.outputs import Generation, SequenceScores
from policies.row_parking import DecodingRows
from policies.sampling import explore_first_decisions, exploring_rows, sample_categorical
from policies.scoring import score_spans
from policies.turn_cache import Prefill, TurnCache, fresh_prefill, left_padded

if TYPE_CHECKING:
    from scenarios.grammar import ActionGrammar

__all__ = ["Generation", "LLMPolicy", "SequenceScores"]  # the records are re-exported for callers

def _own_weights(method: Callable) -> Callable:
    """Run `method` with the policy's own weights on: for a LoRA adapter of a shared base (`policies.adapters`),
    that adapter (or none, for the base itself); a model of its own needs nothing."""
    @functools.wraps(method)
    def wrapper(self: LLMPolicy, *args: Any, **kwargs: Any) -> Any:
        activate = getattr(self.model, "activate", None)
        if activate is None:
            return method(self, *args, **kwargs)
        with activate():
            return method(self, *args, **kwargs)
    return wrapper


class LLMPolicy:
    """A causal LM acting through the chat layout of `ChatFormat`."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        constrained: bool = True,
        temperature: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | None = None,
        lean: bool = True,
    ) -> None:
        if temperature <= 0:
            raise ValueError(f"temperature={temperature} must be > 0; use generate(..., greedy=True) for argmax")
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
        self.model = model
        self.tokenizer = tokenizer
        self.chat = ChatFormat(tokenizer)
        self.constrained = constrained
        self.temperature = float(temperature)
        self.max_new_tokens = max_new_tokens
        self.end_id = self.chat.end_id
        self.pad_id = self.chat.pad_id
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        if self.vocab_size < len(tokenizer):
            raise ValueError(f"model vocabulary ({self.vocab_size}) is smaller than the tokenizer ({len(tokenizer)}); "
                             "build the model with vocab_size=len(tokenizer)")
        params = inspect.signature(model.forward).parameters
        # transformers 5.x renamed past_key_values -> cache (the old name is deprecated).
        self._cache_kwarg = "cache" if "cache" in params else "past_key_values"
        self._has_logits_to_keep = "logits_to_keep" in params
        self._has_router = hasattr(model.config, "output_router_logits")
        self._generator: torch.Generator | None = None
        self._seed = seed
        self._free_masks: dict[str, torch.Tensor] = {}
        # Decoding steps run through `LeanForward` where the model's family has one (the same logits to float
        # tolerance, less per-call overhead) unless `lean` is off; the learner always scores through the model's own forward.
        self.lean = lean
        self._lean: LeanForward | None = None
        self._lean_checked: Any = None  # the model `_lean` was decided for (a caller may swap `model`)
        self.opponent_head: torch.nn.Module | None = None
        """The opponent-model head trained beside this policy (see `policies/opponent_head.py`), if any."""

    # -- masks ---------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def free_mask(self, device: torch.device | None = None) -> torch.Tensor:
        """Bool [vocab]: what free decoding allows (all real tokens but pad/bos/role markers)."""
        device = device or self.device
        key = str(device)
        if key not in self._free_masks:
            mask = torch.zeros(self.vocab_size, dtype=torch.bool)
            mask[: len(self.tokenizer)] = True  # ids past the tokenizer are embedding padding
            mask[list(self.chat.structural_ids)] = False
            self._free_masks[key] = mask.to(device)
        return self._free_masks[key]

    def _tries(self, grammars: Sequence[ActionGrammar | None]) -> list[TokenTrie | None]:
        tries: list[TokenTrie | None] = []
        for g in grammars:
            if not self.constrained or g is None:
                tries.append(None)
                continue
            trie = TokenTrie.from_grammar(g, self.tokenizer, self.end_id)
            if trie.depth > self.max_new_tokens:
                raise ValueError(f"a grammar has an action of {trie.depth} tokens (with end) but max_new_tokens="
                                 f"{self.max_new_tokens}; raise max_new_tokens (--policy.max-new-tokens): a tokenizer "
                                 "without the scenario's entities as tokens writes longer actions")
            tries.append(trie)
        return tries

    def _rng(self, seed: int | None, device: torch.device) -> torch.Generator:
        if seed is not None:
            return torch.Generator(device=device).manual_seed(seed)
        if self._generator is None or self._generator.device != device:
            self._generator = torch.Generator(device=device)
            if self._seed is not None:
                self._generator.manual_seed(self._seed)
            else:
                self._generator.seed()
        return self._generator

    # -- rollout -------------------------------------------------------------------------
    @torch.inference_mode()
    @_own_weights
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        grammars: Sequence[ActionGrammar | None],
        greedy: bool = False,
        seed: int | None = None,
        turn_cache: TurnCache | None = None,
        keys: Sequence[Hashable] | None = None,
        hint_mix: Callable[[Sequence[int], torch.Tensor], torch.Tensor] | None = None,
        explore: float = 0.0,
    ) -> Generation:
        """Generate one action per prompt in one batched call (see module docstring).

        With `turn_cache` and one `keys` entry per prompt (e.g. `(env, agent)`), rows whose
        previous turn is in the cache prefill only their new tokens (`policies/turn_cache.py`).
        `hint_mix(rows, probs)`, where the opponent head is `in_match`: its probabilities (`[rows, slots,
        classes]`, rows by index) -> those the shown prediction is the argmax of (the match so far mixed in).
        `explore`: when sampling, the share of rows (each drawn on its own) whose first real decision is drawn
        uniformly among the tokens its grammar allows; the log-prob recorded is the policy's own."""
        if len(prompts) != len(grammars):
            raise ValueError(f"got {len(prompts)} prompts but {len(grammars)} grammars; pass one grammar "
                             "(or None for free text) per prompt")
        if any(len(p) == 0 for p in prompts):
            raise ValueError("empty prompt; build prompts with ChatFormat.first/next")
        n = len(prompts)
        if n == 0:
            return Generation([], [], [], [], [], [])
        device = self.device
        tries = self._tries(grammars)
        rng = self._rng(seed, device)

        # One table for the whole batch: row 0 = free, row 1 = done (pad only), then each
        # distinct trie's rows; a sample's state is one row index, so masking is one gather.
        free = self.free_mask(device)
        done = torch.zeros_like(free)
        done[self.pad_id] = True
        blocks, offsets = [free[None], done[None]], {}
        next_row = 2
        for trie in tries:
            if trie is not None and id(trie) not in offsets:
                offsets[id(trie)] = next_row
                blocks.append(trie.mask_table(self.vocab_size, device))
                next_row += trie.num_nodes
        table = torch.cat(blocks)
        nodes = [0] * n
        state = [0 if t is None else offsets[id(t)] for t in tries]

        lengths = [len(p) for p in prompts]
        if turn_cache is not None and keys is not None:
            pre = turn_cache.prefill(keys, prompts, self.pad_id, device)
        else:
            pre = fresh_prefill(prompts, self.pad_id, device)
        attention = pre.attention

        was_training = self.model.training
        self.model.eval()
        token_ids: list[list[int]] = [[] for _ in range(n)]
        logprobs: list[list[float]] = [[] for _ in range(n)]
        allowed: list[list[list[int]] | None] = [None if t is None else [] for t in tries]
        finished = [False] * n
        active = [True] * n
        fed = [0] * n  # generated tokens of each row already fed through the model (so in its KV cache)
        hints: list[list[int]] = [[] for _ in range(n)]
        pending = exploring_rows(0.0 if greedy else explore, [t is not None for t in tries], rng)  # rows to explore
        explored = list(pending)
        try:
            head = self.opponent_head
            hinted = head is not None and bool(getattr(head, "feeds_prompt", False))
            last, cache, attention, positions, hidden = self._prefill(prompts, pre, hidden=hinted)
            next_pos = positions[:, -1] + 1
            if hinted:  # the head's prediction, read where the prompt ends, goes in front of the action
                hints = self._hints(head, hidden, hint_mix)
                feed, chunk_mask = left_padded(hints, self.pad_id, device)
                attention = torch.cat([attention, chunk_mask.to(attention.dtype)], dim=1)
                hint_positions = next_pos[:, None] + (chunk_mask.cumsum(-1) - 1).clamp_min(0)
                next_pos = next_pos + chunk_mask.sum(-1)
                last, cache, _ = self._forward(feed, attention, hint_positions, cache)
            kept = turn_cache is not None and keys is not None
            rows = DecodingRows(n, cache, for_turn_cache=kept, idle_rows_free=self._lean_runs())
            for _ in range(self.max_new_tokens):  # every step adds at least one token to each active row
                live = rows.live
                logits = last.float() / self.temperature
                allow = table[torch.tensor([state[i] for i in live], device=device)]
                logp = F.log_softmax(logits.masked_fill(~allow, float("-inf")), dim=-1)
                if greedy:
                    chosen = logp.argmax(-1)
                else:
                    # one draw per row of the call, in the batch or not: what a row samples does not depend on
                    # which rows are still decoding (a turn cache or the forward in use changes that)
                    draws = torch.rand(n, generator=rng, device=device)
                    chosen = sample_categorical(logp.exp(), uniform=draws[torch.tensor(live, device=device)])
                    if any(pending):
                        chosen = explore_first_decisions(chosen, live, pending, lambda i: tries[i].allowed(nodes[i]),
                                                         torch.rand(n, generator=rng, device=device))
                chosen_logp = logp.gather(-1, chosen[:, None]).squeeze(-1)
                toks, lps = chosen.tolist(), chosen_logp.tolist()
                for j, i in enumerate(live):
                    if active[i]:
                        self._append(i, toks[j], lps[j], tries[i], nodes, token_ids, logprobs, allowed, finished)
                        if finished[i] or len(token_ids[i]) >= self.max_new_tokens:
                            active[i], state[i] = False, 1
                        elif tries[i] is not None:
                            state[i] = offsets[id(tries[i])] + nodes[i]
                if not any(active[i] for i in live):
                    break
                # finished rows leave the batch (and its cache) once enough are done; a turn cache gets them back
                attention, next_pos = rows.release(cache, attention, next_pos, active)
                live = rows.live
                # Each active row feeds its new tokens (the sampled one and any the grammar forced after it)
                # in one chunk; finished rows feed masked padding, so a turn cache keeps real tokens only.
                chunks = [token_ids[i][fed[i]:] if active[i] else [] for i in live]
                feed, chunk_mask = left_padded(chunks, self.pad_id, device)
                attention = torch.cat([attention, chunk_mask.to(attention.dtype)], dim=1)
                positions = next_pos[:, None] + (chunk_mask.cumsum(-1) - 1).clamp_min(0)
                next_pos = next_pos + chunk_mask.sum(-1)
                for j, i in enumerate(live):
                    fed[i] += len(chunks[j])
                last, cache, _ = self._forward(feed, attention, positions, cache)
        finally:
            self.model.train(was_training)
        if kept:
            attention = rows.restore(cache, attention)
            turn_cache.keep(keys, cache, attention, [list(p) + h + ids[:k] for p, h, ids, k in
                                                     zip(prompts, hints, token_ids, fed, strict=True)])

        texts = [self.chat.decode_action([t for t in ids if t != self.end_id]) for ids in token_ids]
        explored = [e and not p for e, p in zip(explored, pending, strict=True)]  # a row may have had no decision
        return Generation(token_ids, logprobs, texts, allowed, finished, lengths, hints, explored)

    def _hints(self, head: Any, hidden: torch.Tensor, hint_mix: Callable[..., torch.Tensor] | None = None
               ) -> list[list[int]]:
        """Each row's prediction as prompt ids (`hint_text` of the shown class of every slot)."""
        memo: dict[tuple[int, ...], list[int]] = {}
        return [list(memo.setdefault(tuple(row), self.chat.encode_text(hint_text(head.classes, row))))
                for row in shown_classes(head, hidden, hint_mix)]

    def _lean_runs(self) -> bool:
        """Whether decoding forwards go through `LeanForward` (known once a forward has asked)."""
        return self.lean and self._lean is not None and self._lean_checked is self.model

    def _forward(self, ids: torch.Tensor, attention: torch.Tensor, positions: torch.Tensor, cache: Any,
                 hidden: bool = False) -> tuple[torch.Tensor, Any, torch.Tensor | None]:
        """One cached forward: the logits at each row's last column, the cache after it and, when asked,
        the last hidden state there."""
        if self.lean and not hidden:
            if self._lean_checked is not self.model:
                self._lean = LeanForward(self.model) if lean_supports(self.model) else None
                self._lean_checked = self.model
            if self._lean is not None:
                last, cache = self._lean(ids, attention, positions, cache)
                return last, cache, None
        kwargs: dict = {"logits_to_keep": 1} if self._has_logits_to_keep else {}
        if cache is not None:
            kwargs[self._cache_kwarg] = cache
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=positions, use_cache=True,
                         output_hidden_states=hidden, **kwargs)
        last_hidden = out.hidden_states[-1][:, -1, :] if hidden else None
        return out.logits[:, -1, :], (out.cache if hasattr(out, "cache") else out.past_key_values), last_hidden

    def _prefill(self, prompts: Sequence[Sequence[int]], pre: Prefill, hidden: bool = False
                 ) -> tuple[torch.Tensor, Any, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """The first forward: (last logits, cache, attention, positions, last hidden state when asked). A fresh
        prefill runs each distinct prompt once (the rollouts of one task start alike) and copies its cache rows
        to every row that has it."""
        distinct: dict[tuple[int, ...], int] = {}
        index = [distinct.setdefault(tuple(p), len(distinct)) for p in prompts]
        if pre.cache is None and len(distinct) < len(prompts):
            once = fresh_prefill([list(k) for k in distinct], self.pad_id, pre.input_ids.device)
            last, cache, state = self._forward(once.input_ids, once.attention, once.positions, None, hidden)
            if hasattr(cache, "batch_select_indices"):  # else: a cache that cannot copy rows reads every prompt
                rows = torch.tensor(index, dtype=torch.long, device=last.device)
                cache.batch_select_indices(rows)
                return (last[rows], cache, once.attention[rows], once.positions[rows],
                        state[rows] if state is not None else None)
        last, cache, state = self._forward(pre.input_ids, pre.attention, pre.positions, pre.cache, hidden)
        return last, cache, pre.attention, pre.positions, state

    def _append(self, i: int, tok: int, logp: float, trie: TokenTrie | None, nodes: list[int],
                token_ids: list[list[int]], logprobs: list[list[float]], allowed: list, finished: list[bool]) -> None:
        """Append a sampled token to row i, then every token its grammar forces after it (the only id
        allowed at that node; its log-prob under the masked distribution is exactly 0), so a row spends
        a forward only on real decisions."""
        while True:
            token_ids[i].append(tok)
            logprobs[i].append(logp)
            if trie is not None:
                allowed[i].append(trie.allowed(nodes[i]))
            if tok == self.end_id:
                finished[i] = True
                return
            if trie is None:
                return
            nodes[i] = trie.children[nodes[i]][tok]
            options = trie.allowed(nodes[i])
            if len(options) != 1 or len(token_ids[i]) >= self.max_new_tokens:
                return
            tok, logp = options[0], 0.0

    # -- learning ------------------------------------------------------------------------
    def sequence_logprobs(
        self,
        prompts: Sequence[Sequence[int]],
        actions: Sequence[Sequence[int]],
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        with_router_logits: bool = False,
    ) -> SequenceScores:
        """Log-probs of `actions` after `prompts` under the masks and temperature used to sample them.

        `allowed[i]` is `Generation.allowed[i]` (None, or None for the whole argument, means free
        decoding's mask). Gradients flow if the caller's context enables them; the model's
        train/eval mode is left as the caller set it.
        """
        n = len(prompts)
        if len(actions) != n or (allowed is not None and len(allowed) != n):
            raise ValueError("prompts, actions and allowed must have one entry per sample")
        sequences = [list(p) + list(a) for p, a in zip(prompts, actions, strict=True)]
        spans = [[(len(p), len(a))] for p, a in zip(prompts, actions, strict=True)]
        span_allowed = [[None if allowed is None else allowed[i]] for i in range(n)]
        return self.span_logprobs(sequences, spans, span_allowed, with_router_logits)

    @_own_weights
    def span_logprobs(
        self,
        sequences: Sequence[Sequence[int]],
        spans: Sequence[Sequence[tuple[int, int]]],
        allowed: Sequence[Sequence[Sequence[Sequence[int]] | None]],
        with_router_logits: bool = False,
        with_prompt_hidden: bool = False,
        hint_lengths: Sequence[Sequence[int]] | None = None,
    ) -> SequenceScores:
        """Score several generated spans per sequence in ONE forward of the whole sequence.

        A multi-turn episode is one sequence whose action spans are `(start, length)`; since every
        turn's prompt is a prefix of the next, scoring the final sequence once gives each turn's
        logprobs without repeating the shared prefix. Rows of the result are the spans, in
        row-major order; `allowed[r][k]` is the allowed-id lists of span k of sequence r (None:
        free decoding). `with_prompt_hidden` adds each span's last prompt hidden state (`prompt_hidden`: an
        opponent head's input), read `hint_lengths[r][k]` ids before the span where a prediction was shown
        there (`Turn.hint_len`).
        """
        return score_spans(self.model, sequences, spans, allowed, free_mask=self.free_mask(self.device),
                           pad_id=self.pad_id, temperature=self.temperature,
                           with_router_logits=with_router_logits and self._has_router,
                           with_prompt_hidden=with_prompt_hidden, hint_lengths=hint_lengths)
