"""The chat layout as token ids: rollout prompts and SFT conversations from the same pieces.

Layout (special tokens from `policies.tokenizer`):

    <|bos|><|user|>{first observation}<|end|><|assistant|>{action}<|end|>
    <|tool|>{next observation}<|end|><|assistant|>{action}<|end|> ...

A turn's prompt is always the previous prompt + the previous action's ids + `next(obs)`; text is
never re-tokenized, so the ids the learner scores are exactly the ids the policy produced.
Pieces are encoded separately; special tokens bound every piece, so this equals encoding the
whole rendered conversation (and the tokenizer's chat_template) as well.
Left out: system prompts and multi-message turns (an observation is one message).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from transformers import PreTrainedTokenizerBase

from policies.tokenizer import ASSISTANT, BOS, END, PAD, TOOL, USER


class Conversation(NamedTuple):
    """A whole episode as ids: the 0/1 loss mask over them and where each action starts."""

    input_ids: list[int]
    mask: list[int]
    action_starts: list[int]
    """Index of each action's first id (the id before it ends the prompt the action answers)."""


class ChatFormat:
    """Builds prompt pieces and whole conversations as id lists for one tokenizer."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase) -> None:
        self.tokenizer = tokenizer
        ids = {}
        for name in (BOS, PAD, END, USER, ASSISTANT, TOOL):
            i = tokenizer.convert_tokens_to_ids(name)
            if i is None or i == tokenizer.unk_token_id or not isinstance(i, int):
                raise ValueError(
                    f"tokenizer has no {name!r} token; build it with policies.tokenizer.train_tokenizer "
                    "or add the chat special tokens to it"
                )
            ids[name] = i
        self.bos_id: int = ids[BOS]
        self.pad_id: int = ids[PAD]
        self.end_id: int = ids[END]
        self.user_id: int = ids[USER]
        self.assistant_id: int = ids[ASSISTANT]
        self.tool_id: int = ids[TOOL]

    @property
    def structural_ids(self) -> tuple[int, ...]:
        """Ids an action may never contain (free decoding masks them out; `end_id` is allowed)."""
        return (self.pad_id, self.bos_id, self.user_id, self.assistant_id, self.tool_id)

    def encode_text(self, text: str) -> list[int]:
        """Plain text to ids, no special tokens added."""
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def first(self, obs_text: str) -> list[int]:
        """Prompt of turn 1: bos, the user message, and the assistant header."""
        return [self.bos_id, self.user_id, *self.encode_text(obs_text), self.end_id, self.assistant_id]

    def next(self, obs_text: str) -> list[int]:
        """What follows an action: the tool message and the next assistant header."""
        return [self.tool_id, *self.encode_text(obs_text), self.end_id, self.assistant_id]

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
        if trained is not None and len(trained) != len(actions):
            raise ValueError(f"got {len(trained)} trained flags for {len(actions)} actions")
        if hints is not None and len(hints) != len(actions):
            raise ValueError(f"got {len(hints)} hints for {len(actions)} actions")
        if len(observations) not in (len(actions), len(actions) + 1) or not observations:
            raise ValueError(
                f"got {len(observations)} observations and {len(actions)} actions; a conversation needs "
                "one observation before each action (optionally one more at the end)"
            )
        input_ids: list[int] = []
        mask: list[int] = []
        starts: list[int] = []
        for turn, obs in enumerate(observations):
            prompt = self.first(obs) if turn == 0 else self.next(obs)
            input_ids += prompt
            mask += [0] * len(prompt)
            if turn < len(actions):
                if hints is not None:
                    input_ids += list(hints[turn])
                    mask += [0] * len(hints[turn])
                starts.append(len(input_ids))
                action = actions[turn]
                ids = self.encode_action(action) if isinstance(action, str) else list(action)
                input_ids += ids
                mask += [int(trained is None or bool(trained[turn]))] * len(ids)
        return Conversation(input_ids, mask, starts)
