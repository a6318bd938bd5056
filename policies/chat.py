"""The chat layout as token ids, read off the tokenizer's own chat template.

A turn's prompt is always the previous prompt + the previous action's ids + `next(obs)`; text is
never re-tokenized, so the ids the learner scores are exactly the ids the policy produced. The
pieces come from rendering the template around sentinel messages (`TemplatePieces`):

    first(obs)  = head + obs + opener            e.g. <|bos|><|user|>{obs}<|end|><|assistant|>
    action      = {action} + end                 e.g. {action}<|end|>
    next(obs)   = between + obs + later_opener   e.g. <|tool|>{obs}<|end|><|assistant|>

`end` is the special token that closes an assistant turn (generation stops on it). Later
observations use the template's `tool` role when it has one that renders prefix-stably, else `user`
(templates that insist on alternating user/assistant turns). The derivation is checked at
construction: a five-message conversation rendered whole must equal the pieces joined, so a
template that rewrites earlier turns (one that drops past reasoning, say) is refused with a message.
An observation is encoded together with the template text around it (which starts after a special
token and ends at the generation prompt), so a prompt's ids are exactly those of encoding the whole
rendered conversation; an action is encoded on its own, then its end token.
Left out: system prompts, multi-message turns (an observation is one message) and tool-call
formats of the template (an action is the assistant message's plain content).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from transformers import PreTrainedTokenizerBase

# Sentinels: plain ASCII words no template trims, escapes or recognizes.
_OBS = ("MARLOBSONE", "MARLOBSTWO", "MARLOBSTHREE")
_ACT = ("MARLACTONE", "MARLACTTWO")


class Conversation(NamedTuple):
    """A whole episode as ids: the 0/1 loss mask over them and where each action starts."""

    input_ids: list[int]
    mask: list[int]
    action_starts: list[int]
    """Index of each action's first id (the id before it ends the prompt the action answers)."""


class Dialogue(NamedTuple):
    """What `ChatFormat.conversation` lays out: observations, actions (text or ids), trained flags, hints."""

    observations: Sequence[str]
    actions: Sequence[str | Sequence[int]]
    trained: Sequence[bool] | None = None
    hints: Sequence[Sequence[int]] | None = None


def _check(ep: Dialogue) -> None:
    if ep.trained is not None and len(ep.trained) != len(ep.actions):
        raise ValueError(f"got {len(ep.trained)} trained flags for {len(ep.actions)} actions")
    if ep.hints is not None and len(ep.hints) != len(ep.actions):
        raise ValueError(f"got {len(ep.hints)} hints for {len(ep.actions)} actions")
    if len(ep.observations) not in (len(ep.actions), len(ep.actions) + 1) or not ep.observations:
        raise ValueError(
            f"got {len(ep.observations)} observations and {len(ep.actions)} actions; a conversation needs "
            "one observation before each action (optionally one more at the end)"
        )


class TemplatePieces(NamedTuple):
    """The text a chat template puts around observations and actions."""

    head: str
    """Before the first observation (bos, the user header)."""
    opener: str
    """After an observation, up to where the assistant's action begins (the generation prompt)."""
    end: str
    """Right after an action: the special token that closes an assistant turn."""
    between: str
    """After `end`, before the next observation (its header)."""
    later_opener: str
    """After a later observation, up to where the action begins (a tool message may close differently)."""
    observation_role: str
    """Role of the observations after the first (`tool` or `user`)."""


def _render(tokenizer: PreTrainedTokenizerBase, roles: Sequence[str], texts: Sequence[str]) -> str:
    messages = [{"role": r, "content": t} for r, t in zip(roles, texts, strict=True)]
    out = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    if not isinstance(out, str):
        raise ValueError(f"the chat template rendered {type(out).__name__}, not text")
    return out


def _split_once(text: str, sentinel: str, what: str) -> tuple[str, str]:
    if text.count(sentinel) != 1:
        raise ValueError(f"the chat template does not render {what} verbatim exactly once")
    before, after = text.split(sentinel)
    return before, after


def _pieces_for_role(tokenizer: PreTrainedTokenizerBase, role: str) -> TemplatePieces:
    one = _render(tokenizer, ["user"], _OBS[:1])
    head, opener = _split_once(one, _OBS[0], "an observation")
    roles2 = ["user", "assistant", role]
    two = _render(tokenizer, roles2, [_OBS[0], _ACT[0], _OBS[1]])
    if not two.startswith(one):
        raise ValueError("the chat template renders the first turn differently once a reply follows it")
    reply, later_opener = _split_once(two[len(one):], _OBS[1], "an observation")
    action, after_action = _split_once(reply, _ACT[0], "an action")
    if action:
        raise ValueError(f"the chat template puts text before an action ({action[:40]!r}) that the generation "
                         "prompt does not hold")
    # The template text right after an action starts with the special token that closes the turn.
    ids = tokenizer.encode(after_action, add_special_tokens=False)
    if not ids or ids[0] not in special_ids(tokenizer):
        raise ValueError("the chat template does not close an assistant turn with a special token, so generation "
                         f"could not stop on it (after a reply it renders {after_action[:40]!r})")
    end = tokenizer.decode(ids[:1], skip_special_tokens=False)
    if not after_action.startswith(end):
        raise ValueError("the chat template's end-of-turn token does not decode to its own text")
    pieces = TemplatePieces(head, opener, end, after_action[len(end):], later_opener, role)
    five = _render(tokenizer, [*roles2, "assistant", role], [_OBS[0], _ACT[0], _OBS[1], _ACT[1], _OBS[2]])
    joined = (head + _OBS[0] + opener + _ACT[0] + end + pieces.between + _OBS[1] + later_opener
              + _ACT[1] + end + pieces.between + _OBS[2] + later_opener)
    if five != joined:
        raise ValueError("the chat template rewrites earlier turns as a conversation grows (not prefix-stable)")
    return pieces


def special_ids(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """Ids of the tokenizer's special tokens (named ones and added tokens marked special)."""
    return set(tokenizer.all_special_ids) | {i for i, t in tokenizer.added_tokens_decoder.items() if t.special}


def template_pieces(tokenizer: PreTrainedTokenizerBase) -> TemplatePieces:
    """The pieces of `tokenizer`'s chat template; later observations as `tool` messages where the template
    renders them prefix-stably, else as `user` messages. Raises ValueError saying what the template lacks."""
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("the tokenizer has no chat template; load one that has (tokenizer.chat_template) or set it "
                         "before building the policy")
    problems = []
    for role in ("tool", "user"):
        try:
            return _pieces_for_role(tokenizer, role)
        except Exception as exc:  # a template may raise on a role it does not know (jinja raise_exception)
            problems.append(f"as {role}: {exc}")
    raise ValueError("cannot lay out a multi-turn conversation with this chat template; " + "; ".join(problems))


def _batch_backend(tokenizer: PreTrainedTokenizerBase, probe: str) -> Any | None:
    """A fast tokenizer's Rust tokenizer, which encodes a batch without transformers' per-text bookkeeping, where
    it gives the ids transformers does on `probe`; else None (the tokenizer's own call is used)."""
    backend = getattr(tokenizer, "backend_tokenizer", None) if getattr(tokenizer, "is_fast", False) else None
    if backend is None:
        return None
    try:
        same = backend.encode_batch([probe], add_special_tokens=False)[0].ids == \
            list(tokenizer.encode(probe, add_special_tokens=False))
    except Exception:  # a backend that will not encode this way: keep transformers' path
        return None
    return backend if same else None


class ChatFormat:
    """Builds prompt pieces and whole conversations as id lists for one tokenizer and its chat template."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        self.pieces = template_pieces(tokenizer)
        p = self.pieces
        self._backend = _batch_backend(tokenizer, p.head + "Task: Paris  on\nmon? 21C" + p.opener)
        self._opener = self.encode_text(p.opener)
        end = self.encode_text(p.end)
        if len(end) != 1 or not self._opener or self.encode_text(p.later_opener)[-1:] != self._opener[-1:]:
            raise ValueError("the chat template's end-of-turn text must be one token, and every prompt must end "
                             "with the same non-empty generation prompt")
        self.end_id: int = end[0]
        special = special_ids(tokenizer)
        special.discard(self.end_id)
        self._structural = tuple(sorted(special))
        pad = tokenizer.pad_token_id
        self.pad_id: int = pad if pad is not None else (tokenizer.eos_token_id if tokenizer.eos_token_id is not None
                                                         else self.end_id)

    @property
    def assistant_id(self) -> int:
        """The last id of every prompt (the assistant header's last token): an action starts after it."""
        return self._opener[-1]

    @property
    def structural_ids(self) -> tuple[int, ...]:
        """Ids an action may never contain (free decoding masks them out; `end_id` is allowed)."""
        return self._structural

    def encode_text(self, text: str) -> list[int]:
        """Plain text to ids, no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False)) if text else []

    def encode_texts(self, texts: Sequence[str]) -> list[list[int]]:
        """Many plain texts to ids in one tokenizer call (a fast tokenizer encodes a batch at once), each
        distinct text once (demonstrations repeat most of their messages); each list equals `encode_text` of
        its text and is a list of its own."""
        if not texts:
            return []
        distinct = list(dict.fromkeys(texts))
        if self._backend is not None:
            encoded = [e.ids for e in self._backend.encode_batch(distinct, add_special_tokens=False)]
        else:
            encoded = self.tokenizer(distinct, add_special_tokens=False)["input_ids"]
        ids_of = dict(zip(distinct, encoded, strict=True))
        return [list(ids_of[text]) if text else [] for text in texts]

    def _prompt_text(self, turn: int, obs_text: str) -> str:
        p = self.pieces
        return p.head + obs_text + p.opener if turn == 0 else p.between + obs_text + p.later_opener

    def first(self, obs_text: str) -> list[int]:
        """Prompt of turn 1: the template's head, the observation, and the assistant header."""
        return self.encode_text(self._prompt_text(0, obs_text))

    def next(self, obs_text: str) -> list[int]:
        """What follows an action's end token: the next observation's message and the assistant header."""
        return self.encode_text(self._prompt_text(1, obs_text))

    def first_many(self, obs_texts: Sequence[str]) -> list[list[int]]:
        """`first` of each observation, in one tokenizer call."""
        return self.encode_texts([self._prompt_text(0, t) for t in obs_texts])

    def next_many(self, obs_texts: Sequence[str]) -> list[list[int]]:
        """`next` of each observation, in one tokenizer call."""
        return self.encode_texts([self._prompt_text(1, t) for t in obs_texts])

    def encode_action(self, text: str) -> list[int]:
        """An action as generation would produce it: its ids then `end_id` (for demonstrations)."""
        return [*self.encode_text(text), self.end_id]

    def decode_action(self, ids: Sequence[int]) -> str:
        """Action ids back to text (drops `end_id` and other special tokens)."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False)

    def conversation(
        self, observations: Sequence[str], actions: Sequence[str | Sequence[int]],
        trained: Sequence[bool] | None = None, hints: Sequence[Sequence[int]] | None = None,
    ) -> Conversation:
        """A whole episode as one id list plus a 0/1 mask that is 1 on action tokens, and where actions start.

        `observations[i]` is the message before `actions[i]`; a trailing observation with no
        action after it is allowed (it is appended as a prompt, masked 0). An action given as text
        is encoded with `encode_action`; one given as ids (from a rollout) is used untouched.
        `trained[i]` False masks action i out too (it stays in the context of later turns). `hints[i]`
        (ids, masked 0) go between the prompt and action i: what the agent was shown before acting (an
        opponent model's prediction), so `action_starts` lie after them.
        """
        return self.conversations([Dialogue(observations, actions, trained, hints)])[0]

    def conversations(self, episodes: Sequence[Dialogue]) -> list[Conversation]:
        """`conversation` of each episode, every prompt and every action given as text of all of them encoded in
        one tokenizer call (a batch of demonstrations tokenizes at once)."""
        texts: list[str] = []
        for ep in episodes:
            _check(ep)
            texts += [self._prompt_text(turn, obs) for turn, obs in enumerate(ep.observations)]
            texts += [str(a) for a in ep.actions if isinstance(a, str)]
        encoded = iter(self.encode_texts(texts))
        out = []
        for ep in episodes:
            prompts = [next(encoded) for _ in ep.observations]
            written = {k: [*next(encoded), self.end_id] for k, a in enumerate(ep.actions) if isinstance(a, str)}
            out.append(self._assemble(ep, prompts, written))
        return out

    @staticmethod
    def _assemble(ep: Dialogue, prompts: list[list[int]], written: dict[int, list[int]]) -> Conversation:
        input_ids: list[int] = []
        mask: list[int] = []
        starts: list[int] = []
        for turn, prompt in enumerate(prompts):
            input_ids += prompt
            mask += [0] * len(prompt)
            if turn < len(ep.actions):
                if ep.hints is not None:
                    input_ids += list(ep.hints[turn])
                    mask += [0] * len(ep.hints[turn])
                starts.append(len(input_ids))
                ids = written[turn] if turn in written else list(ep.actions[turn])
                input_ids += ids
                mask += [int(ep.trained is None or bool(ep.trained[turn]))] * len(ids)
        return Conversation(input_ids, mask, starts)

    def describe(self) -> dict[str, Any]:
        """The layout in words, for logs: the template's pieces and the observation role."""
        return self.pieces._asdict()
