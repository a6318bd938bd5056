"""Value head for critics: a small transformer trunk and a scalar head, read at chosen positions.

`ValueModel.values(sequences, positions)` runs one right-padded forward over token sequences and
returns the head's output at the given positions of each, so one forward over an agent's whole
conversation yields the value before every one of its turns (causal attention: the value at a
position sees only the tokens up to it). What the sequences hold (the agent's own conversation
for a decentralized critic, the scenario's global state plus the agent's id for a centralized
one) is the caller's choice; this module knows nothing of scenarios or agents.

`SummedValueModel` adds the values of several such models, each reading its own sequences (a
critic that reads two inputs, like an agent's own conversation and the global state, and learns
each part's share of the value; the caller aligns the reads).

Trunk presets are dense (no experts: a critic needs no routing and its load-balancing loss would
only add noise); a local folder or hub id of any `AutoModel` works too. Left out: sharing the
policy's trunk (a value loss flowing into the policy's weights is the instability PPO-for-LLM
setups keep a separate critic to avoid).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import AutoConfig, AutoModel

from policies import asked_columns

CRITIC_PRESETS: dict[str, dict[str, Any]] = {
    "tiny-critic": {
        "model_type": "qwen3",
        "hidden_size": 96,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 24,
        "intermediate_size": 192,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
    "small-critic": {
        "model_type": "qwen3",
        "hidden_size": 192,
        "num_hidden_layers": 3,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 48,
        "intermediate_size": 384,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
    },
}


class ValueModel(torch.nn.Module):
    """A transformer trunk (`AutoModel`, no LM head) and a linear value head on its last hidden state."""

    def __init__(self, trunk: torch.nn.Module, pad_id: int) -> None:
        super().__init__()
        self.trunk = trunk
        self.pad_id = pad_id
        hidden = trunk.config.hidden_size
        self.head = torch.nn.Linear(hidden, 1)
        # A zero head starts every value at 0: the first advantages are plain reward-to-go.
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def values(self, sequences: Sequence[Sequence[int]], positions: Sequence[Sequence[int]]) -> torch.Tensor:
        """Values at `positions[i]` of `sequences[i]`, flattened in order (grad flows if enabled)."""
        if len(sequences) != len(positions):
            raise ValueError("sequences and positions must have one entry per sequence")
        if not sequences:
            return torch.zeros(0, device=self.device)
        width = max(len(s) for s in sequences)
        limit = getattr(self.trunk.config, "max_position_embeddings", None)
        if limit is not None and width > limit:
            raise ValueError(f"a critic input has {width} tokens but the critic's trunk takes at most {limit}; "
                             "use a larger critic preset or shorter scenario states")
        n = len(sequences)
        ids = torch.full((n, width), self.pad_id, dtype=torch.long)
        attention = torch.zeros((n, width), dtype=torch.long)
        rows, cols = [], []
        for i, (seq, pos) in enumerate(zip(sequences, positions, strict=True)):
            ids[i, : len(seq)] = torch.tensor(list(seq), dtype=torch.long)
            attention[i, : len(seq)] = 1
            for p in pos:
                if not 0 <= p < len(seq):
                    raise ValueError(f"position {p} lies outside sequence {i} of length {len(seq)}")
                rows.append(i)
                cols.append(p)
        device = self.device
        where = (torch.tensor(rows, device=device), torch.tensor(cols, device=device))
        # nothing reads the last layer's output but at the value positions: run it there only where the trunk allows
        read = contextlib.nullcontext()
        if asked_columns.supports(self.trunk):
            asked = torch.zeros((n, width), dtype=torch.bool, device=device)
            asked[where] = True
            read = asked_columns.asked_columns_only(self.trunk, asked)
        with read:
            out = self.trunk(input_ids=ids.to(device), attention_mask=attention.to(device), use_cache=False)
        return self.head(out.last_hidden_state[where].float()).squeeze(-1)

    def save(self, folder: str | Path) -> Path:
        """Trunk with `save_pretrained` (safetensors) and the head beside it."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.trunk.save_pretrained(folder / "trunk")
        save_file({k: v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                  str(folder / "value_head.safetensors"))
        (folder / "value_model.json").write_text(json.dumps({"pad_id": self.pad_id}))
        return folder


SUMMED_FILE = "summed_value_model.json"


class SummedValueModel(torch.nn.Module):
    """Value models whose outputs are added: part k reads its own sequences; the sum is one value per read.

    Late fusion, chosen over one model reading a concatenation: each part keeps short inputs that
    a small trunk learns quickly, and a part whose input carries nothing stays near a constant
    instead of diluting the others (every head starts at zero, so the sum starts at 0 too).
    """

    def __init__(self, parts: Sequence[ValueModel]) -> None:
        super().__init__()
        if len(parts) < 2:
            raise ValueError(f"a summed value model needs at least 2 parts, got {len(parts)}")
        self.parts = torch.nn.ModuleList(parts)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def save(self, folder: str | Path) -> Path:
        """Each part with `ValueModel.save` in `part_<k>`, and a marker naming how many."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        for k, part in enumerate(self.parts):
            part.save(folder / f"part_{k}")
        (folder / SUMMED_FILE).write_text(json.dumps({"parts": len(self.parts)}))
        return folder


def build_value_model(spec: str, vocab_size: int, pad_id: int, seed: int = 0) -> ValueModel | SummedValueModel:
    """A critic from a preset name (random init, seeded), a folder written by `ValueModel.save` or
    `SummedValueModel.save`, or an AutoModel id."""
    folder = Path(spec).expanduser()
    if (folder / SUMMED_FILE).is_file():
        n = int(json.loads((folder / SUMMED_FILE).read_text())["parts"])
        return SummedValueModel([build_value_model(str(folder / f"part_{k}"), vocab_size, pad_id, seed + k)
                                 for k in range(n)])
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        if spec in CRITIC_PRESETS:
            fields = dict(CRITIC_PRESETS[spec])
            model_type = fields.pop("model_type")
            config = AutoConfig.for_model(model_type, vocab_size=vocab_size, pad_token_id=pad_id, **fields)
            return ValueModel(AutoModel.from_config(config), pad_id)
        if (folder / "value_model.json").is_file():
            from safetensors.torch import load_file

            model = ValueModel(AutoModel.from_pretrained(folder / "trunk"), pad_id)
            model.head.load_state_dict(load_file(str(folder / "value_head.safetensors")))
            return model
        if spec.startswith((".", "/", "~")) and not folder.is_dir():
            raise FileNotFoundError(f"critic spec {spec!r} looks like a path but no such folder exists; "
                                    f"use a preset ({', '.join(sorted(CRITIC_PRESETS))}) or a saved critic")
        trunk = AutoModel.from_pretrained(spec)
        if trunk.get_input_embeddings().weight.shape[0] < vocab_size:
            raise ValueError(f"critic {spec!r} has fewer embeddings than the tokenizer's {vocab_size} tokens")
        return ValueModel(trunk, pad_id)
