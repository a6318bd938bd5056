"""LoRA adapters (peft) per policy on one frozen base model, each seen as a model of its own.

`SharedBase` wraps a model in peft once and holds one named adapter per policy (agent, team or the one
shared policy). `AdapterView` is one adapter as the rest of the code sees a model: calling it, or
`activate()` around code that reaches into the base's modules, runs the base with that adapter on; its
`parameters()` and `state_dict()` are the adapter's alone (what an optimizer steps and a resume point
keeps); `copy.deepcopy` of a view makes a new adapter with the same weights on the same base (a further
policy of a mapping, a frozen snapshot), never a second base. `BaseView` is the base with every adapter
off: the KL reference, for free. A checkpoint keeps the base as a plain `save_pretrained` folder (no LoRA
names in it) and each adapter in peft's own format (`adapter_config.json`, `adapter_model.safetensors`),
so `PeftModel.from_pretrained(base, folder)` reads it outside this project too.
Left out: merging adapters into the base, mixed-adapter batches (each policy's rows generate apart, as
without adapters), quantized bases, and LoRA on fused expert weights (peft's target_parameters).
"""

from __future__ import annotations

import contextlib
import copy
import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch
from transformers import PreTrainedModel

ADAPTER_CONFIG = "adapter_config.json"


class SharedBase:
    """One frozen base model carrying a LoRA adapter per name."""

    def __init__(self, model: PreTrainedModel, rank: int, alpha: float, dropout: float = 0.0,
                 targets: Sequence[str] = ("all-linear",), first: str = "policy", peft_model: Any = None) -> None:
        """Adapters of rank `rank` on `targets` (peft's target_modules; `all-linear` also reaches a MoE's experts
        and router in peft's MoE support), the first named `first`; or an existing `peft_model` as it is."""
        from peft import LoraConfig, get_peft_model

        for p in model.parameters():
            p.requires_grad_(False)
        if peft_model is None:
            modules: Any = targets[0] if list(targets) == ["all-linear"] else list(targets)
            config = LoraConfig(r=rank, lora_alpha=alpha, lora_dropout=dropout, target_modules=modules, bias="none")
            peft_model = get_peft_model(model, config, adapter_name=_checked(first))
        self.peft = peft_model
        self._copies = itertools.count(1)

    @property
    def names(self) -> list[str]:
        """Names of the adapters the base carries."""
        return list(self.peft.peft_config)

    def view(self, name: str) -> AdapterView:
        """The adapter `name` as a model."""
        if name not in self.peft.peft_config:
            raise KeyError(f"no adapter {name!r}; the base carries {self.names}")
        return AdapterView(self, name)

    def add(self, name: str, copy_from: str | None = None) -> AdapterView:
        """A new adapter `name`: LoRA's own init (a zero update), or the weights of adapter `copy_from`."""
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        self.peft.add_adapter(_checked(name), copy.deepcopy(self.peft.peft_config[self.names[0]]))
        if copy_from is not None:
            set_peft_model_state_dict(self.peft, get_peft_model_state_dict(self.peft, adapter_name=copy_from),
                                      adapter_name=name)
        for p in self._adapter_parameters(name):
            p.requires_grad_(True)
        return AdapterView(self, name)

    def fresh_name(self, stem: str) -> str:
        """An adapter name not used yet, from `stem`."""
        while True:
            name = f"{stem}_copy{next(self._copies)}"
            if name not in self.peft.peft_config:
                return name

    def _adapter_parameters(self, name: str) -> list[torch.nn.Parameter]:
        return [p for n, p in self.peft.named_parameters() if f".{name}." in n or n.endswith(f".{name}")]

    def base_state_dict(self) -> dict[str, torch.Tensor]:
        """The base model's weights under their own names (LoRA layers unwrapped, adapters left out)."""
        out = {}
        for key, value in self.peft.get_base_model().state_dict().items():
            if "lora_" in key:
                continue
            while ".base_layer." in key:  # a wrapped module, or a parameter wrapped once per adapted tensor
                key = key.replace(".base_layer.", ".", 1)
            out[key] = value
        return out

    def save_base(self, folder: Path) -> None:
        """The base as a plain `save_pretrained` folder that `from_pretrained` loads without peft."""
        self.peft.get_base_model().save_pretrained(folder, state_dict=self.base_state_dict(), safe_serialization=True)


def _checked(name: str) -> str:
    if not name or "." in name or "/" in name:
        raise ValueError(f"adapter name {name!r} must be non-empty, without dots or slashes")
    return name


class AdapterView:
    """One adapter of a `SharedBase`, used where a model is expected."""

    def __init__(self, shared: SharedBase, name: str) -> None:
        self.shared, self.name = shared, name

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        """The base runs with this adapter on inside the block (and stays so until another view activates)."""
        self.shared.peft.base_model.set_adapter(self.name)
        yield

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        with self.activate():
            return self.shared.peft(*args, **kwargs)

    def __getattr__(self, attr: str) -> Any:  # config, device, get_decoder, ...: the wrapped model's
        if attr in ("shared", "name"):
            raise AttributeError(attr)
        return getattr(self.shared.peft, attr)

    def __deepcopy__(self, memo: dict) -> AdapterView:
        """A new adapter with this one's weights, on the same base (a copy that trains, or is frozen, apart)."""
        return self.shared.add(self.shared.fresh_name(self.name), copy_from=self.name)

    @property
    def training(self) -> bool:
        return self.shared.peft.training

    def train(self, mode: bool = True) -> AdapterView:
        self.shared.peft.train(mode)
        return self

    def eval(self) -> AdapterView:
        return self.train(False)

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return iter(self.shared._adapter_parameters(self.name))

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return ((n, p) for n, p in self.shared.peft.named_parameters() if f".{self.name}." in n)

    def requires_grad_(self, flag: bool = True) -> AdapterView:
        for p in self.parameters():
            p.requires_grad_(flag)
        return self

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        """The adapter's weights (peft's names, without the adapter name)."""
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in
                get_peft_model_state_dict(self.shared.peft, adapter_name=self.name).items()}

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> Any:
        from peft import set_peft_model_state_dict

        result = set_peft_model_state_dict(self.shared.peft, state, adapter_name=self.name)
        missing = [k for k in getattr(result, "unexpected_keys", []) if "lora_" in k]
        if strict and missing:
            raise ValueError(f"adapter {self.name!r}: weights {missing[:3]} do not fit this base")
        return result

    def save_pretrained(self, folder: str | Path, **_: Any) -> None:
        """peft's adapter format in `folder` (config and weights, no base)."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.shared.peft.peft_config[self.name].save_pretrained(str(folder))
        save_file({k: v.contiguous() for k, v in self.state_dict().items()}, str(folder / "adapter_model.safetensors"))

    def to(self, *args: Any, **kwargs: Any) -> AdapterView:
        self.shared.peft.to(*args, **kwargs)
        return self


class BaseView(AdapterView):
    """The shared base with every adapter off: a reference policy that costs no memory."""

    def __init__(self, shared: SharedBase) -> None:
        super().__init__(shared, "")

    @contextlib.contextmanager
    def activate(self) -> Iterator[None]:
        with self.shared.peft.disable_adapter():
            yield

    def __deepcopy__(self, memo: dict) -> BaseView:
        return self

    def parameters(self, recurse: bool = True) -> Iterator[torch.nn.Parameter]:
        return iter([p for n, p in self.shared.peft.named_parameters() if "lora_" not in n])

    def named_parameters(self, *args: Any, **kwargs: Any) -> Iterator[tuple[str, torch.nn.Parameter]]:
        return ((n, p) for n, p in self.shared.peft.named_parameters() if "lora_" not in n)

    def requires_grad_(self, flag: bool = True) -> BaseView:
        return self  # the base is frozen for good

    def state_dict(self, *args: Any, **kwargs: Any) -> dict[str, torch.Tensor]:
        return {}  # the base is saved once, with the checkpoint's model

    def load_state_dict(self, state: dict[str, torch.Tensor], strict: bool = True) -> Any:
        if state:
            raise ValueError("the frozen base takes no weights from a learner's state")
        return None

    def save_pretrained(self, folder: str | Path, **_: Any) -> None:
        self.shared.save_base(Path(folder))


def load_adapters(base: PreTrainedModel, folders: dict[str, Path]) -> dict[str, AdapterView]:
    """Views of the adapters saved in `folders` (name to a folder in peft's format), on the frozen `base`."""
    from peft import PeftModel

    names = list(folders)
    peft_model = PeftModel.from_pretrained(base, str(folders[names[0]]), adapter_name=_checked(names[0]))
    for name in names[1:]:
        peft_model.load_adapter(str(folders[name]), adapter_name=_checked(name))
    shared = SharedBase(base, 0, 0.0, peft_model=peft_model)
    return {name: shared.view(name) for name in names}


def is_adapter(model: Any) -> bool:
    """Whether `model` is a view of a shared base (LoRA), not a model of its own."""
    return isinstance(model, AdapterView)
