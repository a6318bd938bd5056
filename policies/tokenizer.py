"""Offline byte-level BPE tokenizer for text scenarios, with entities kept whole.

Trains on a scenario's own text (no download), then:
- splits every digit into its own token (BPE merges numbers inconsistently otherwise),
- adds every scenario entity as ONE token that wins even inside JSON or next to punctuation
  (a tiny model learns to copy one token easily; spelling a string out it hardly learns),
- adds the chat special tokens (see `SPECIAL_TOKENS`) and a Jinja `chat_template` laid out
  exactly like `policies.chat.ChatFormat`.
The result is a `PreTrainedTokenizerFast` that round-trips ASCII text exactly.
Left out: normalization (none: text must come back byte for byte) and non-ASCII tuning.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Sequence

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# Bump when anything that changes the produced ids changes (cache key).
FORMAT_VERSION = 1

BOS = "<|bos|>"
PAD = "<|pad|>"
END = "<|end|>"  # ends every turn, including an action: the eos of generation
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL = "<|tool|>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, END, USER, ASSISTANT, TOOL)

# Same layout as ChatFormat: bos, then per message "<role marker>content<|end|>"; an assistant
# turn is opened by the marker that follows the previous message. The `generation` block lets
# `return_assistant_tokens_mask=True` mark the action tokens (content + end).
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}"
    "{% elif message['role'] == 'tool' %}<|tool|>{{ message['content'] }}<|end|>"
    "{% else %}<|user|>{{ message['content'] }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def _entity_list(entities: Iterable[str]) -> list[str]:
    out = sorted({e for e in entities})
    for e in out:
        if not e:
            raise ValueError("entity vocabulary contains an empty string; remove it")
        if e in SPECIAL_TOKENS:
            raise ValueError(f"entity {e!r} collides with a chat special token; rename it")
    return out


def _strip_entities(texts: Iterable[str], entities: Sequence[str]) -> Iterable[str]:
    # Entities become whole tokens anyway; keeping them in the BPE corpus would spend merges
    # (vocabulary) on strings that are never split.
    if not entities:
        yield from texts
        return
    pattern = re.compile("|".join(re.escape(e) for e in sorted(entities, key=len, reverse=True)))
    for text in texts:
        yield pattern.sub("\n", text)


def train_tokenizer(
    texts: Iterable[str], entities: Iterable[str] = (), vocab_size: int = 1024
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts` and add `entities` as whole tokens.

    `vocab_size` is the size of the BPE part (bytes, merges and the chat special tokens); the
    entities come on top, so `len(tokenizer) == vocab_size + len(entities)` at most (fewer merges
    if the corpus is too small to fill the budget).
    """
    entity_list = _entity_list(entities)
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size={vocab_size} is too small: a byte-level BPE needs at least "
                         f"{256 + len(SPECIAL_TOKENS)} (256 bytes + special tokens)")
    tok = Tokenizer(models.BPE())
    # Digits first (each its own piece), then GPT-2 style byte-level splitting of the rest.
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\d"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_strip_entities(texts, entity_list), trainer=trainer)
    # normalized=False: match the raw text; single_word=False: match inside JSON and punctuation.
    tok.add_tokens([AddedToken(e, single_word=False, lstrip=False, rstrip=False, normalized=False)
                    for e in entity_list])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token=BOS,
        eos_token=END,
        pad_token=PAD,
        extra_special_tokens=[USER, ASSISTANT, TOOL],
        clean_up_tokenization_spaces=False,  # exact round trip: never "fix" spaces
        padding_side="left",
        model_max_length=1_000_000,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _texts_digest(texts: Iterable[str]) -> tuple[str, list[str]]:
    h = hashlib.sha256()
    kept: list[str] = []
    for t in texts:
        kept.append(t)
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest(), kept


def tokenizer_cache_key(texts_digest: str, entities: Iterable[str], vocab_size: int) -> str:
    """Content hash naming a cached tokenizer folder."""
    payload = json.dumps(
        {"v": FORMAT_VERSION, "texts": texts_digest, "entities": _entity_list(entities),
         "vocab_size": vocab_size},
        sort_keys=True,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def load_or_train_tokenizer(
    cache_dir: str | os.PathLike[str],
    texts_fn: Callable[[], Iterable[str]],
    entities: Iterable[str],
    vocab_size: int = 1024,
) -> PreTrainedTokenizerFast:
    """Return the tokenizer for (texts, entities, vocab_size), training and caching it on a miss.

    `texts_fn` is always called (its texts are part of the cache key, so a changed scenario
    corpus gets a fresh tokenizer); the folder is `<cache_dir>/tokenizer-<hash>`.
    """
    entity_list = _entity_list(entities)
    digest, texts = _texts_digest(texts_fn())
    folder = os.path.join(os.fspath(cache_dir), f"tokenizer-{tokenizer_cache_key(digest, entity_list, vocab_size)}")
    if os.path.isfile(os.path.join(folder, "tokenizer.json")):
        return PreTrainedTokenizerFast.from_pretrained(folder)
    tokenizer = train_tokenizer(texts, entity_list, vocab_size)
    os.makedirs(cache_dir, exist_ok=True)
    # Write to a temporary folder then rename, so a crash never leaves a half-written cache hit.
    tmp = tempfile.mkdtemp(prefix=".tokenizer-", dir=cache_dir)
    try:
        tokenizer.save_pretrained(tmp)
        try:
            os.rename(tmp, folder)
        except OSError:  # another process won the race: use its copy
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PreTrainedTokenizerFast.from_pretrained(folder)
