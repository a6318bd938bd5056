"""Start each whole-token entity's embedding from its spelling, so related entities start related.

The offline tokenizer keeps scenario entities as single tokens (`270EUR`, `EUR`, `FL12`), which a
random init makes unrelated: nothing tells the model that `270EUR` is a euro amount, so "the amount
in EUR" has to be learned token by token. Here an entity's row becomes a mix of its own random
row and the mean of the rows of the pieces the same BPE spells it with when entities are not kept
whole (`2 7 0 E U R`), rescaled to the row's norm. Entities that share pieces (a currency and its
amounts, flight ids with the same digits) then share a component, while the random part keeps
every entity distinguishable (`FL12` and `FL21` spell with the same pieces).

Left out: anything for pretrained checkpoints (their embeddings already mean something) and for
untied output embeddings (only the input rows are set; the presets tie them).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerFast


def spelling_ids(tokenizer: PreTrainedTokenizerFast, text: str) -> list[int]:
    """Ids of the BPE pieces of ``text`` with added (entity) tokens ignored."""
    backend = tokenizer.backend_tokenizer
    pieces = [p for p, _ in backend.pre_tokenizer.pre_tokenize_str(text)] if backend.pre_tokenizer else [text]
    return [t.id for p in pieces for t in backend.model.tokenize(p)]


@torch.no_grad()
def init_entities_from_spelling(model: PreTrainedModel, tokenizer: PreTrainedTokenizerFast,
                                entities: Iterable[str], weight: float = 0.5) -> int:
    """Mix each entity's embedding row with its spelling's mean row (``weight`` of the latter); returns rows set."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight={weight} must be in [0, 1]")
    emb = model.get_input_embeddings().weight
    unk = tokenizer.unk_token_id
    done = 0
    for entity in entities:
        row = tokenizer.convert_tokens_to_ids(entity)
        if row is None or row == unk or row >= emb.shape[0]:
            continue
        pieces = [i for i in spelling_ids(tokenizer, entity) if i != row and i < emb.shape[0]]
        if not pieces:
            continue
        norm = emb[row].norm()
        spelled = emb[pieces].mean(0)
        mixed = (1.0 - weight) * emb[row] / norm.clamp_min(1e-12) + weight * spelled / spelled.norm().clamp_min(1e-12)
        emb[row] = mixed * (norm / mixed.norm().clamp_min(1e-12))
        done += 1
    return done
