"""LoRA adapters through PEFT: train a few low-rank matrices instead of the whole model.

LoRA (Hu et al. 2021, Eq. 3) replaces a frozen weight W0 by W0 + (alpha / r) B A with
trainable A (r x k) and B (d x r), B initialised to zero so training starts at the
original model. The optimizer then only sees the adapter weights.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers.pytorch_utils import Conv1D
from rlvr_factory.schema import PositiveInt

ADAPTER_DIR = "lora_adapter"


@dataclass(frozen=True)
class LoraSettings:
    enabled: bool = False  # train LoRA adapters instead of every weight
    r: PositiveInt = 8  # rank of the update B A
    alpha: float = 16.0  # scale: the update is (alpha / r) B A
    dropout: float = 0.0  # dropout on the adapter's input
    target_modules: list[str] | str = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"])  # module names, all-linear, or auto (PEFT's default for the architecture: q_proj, v_proj for Llama and Qwen2, c_attn for GPT-2)


def with_lora(model: torch.nn.Module, settings: LoraSettings) -> torch.nn.Module:
    """The model with fresh LoRA adapters on `target_modules`; every other weight is frozen.

    A model that already carries adapters (a resumed checkpoint) is returned as it is.
    """
    if not settings.enabled or is_lora(model):
        return model
    targets = settings.target_modules
    config = LoraConfig(
        r=settings.r, lora_alpha=settings.alpha, lora_dropout=settings.dropout, task_type="CAUSAL_LM",
        target_modules=None if targets == "auto" else targets if isinstance(targets, str) else list(targets),
    )
    try:
        return get_peft_model(model, config)
    except ValueError as error:
        linear = sorted({name.rsplit(".", 1)[-1] for name, module in model.named_modules()
                         if isinstance(module, (torch.nn.Linear, Conv1D)) and not name.endswith("lm_head")})
        raise ValueError(f"cannot attach LoRA to {type(model).__name__}: {error}; set model.lora.target_modules "
                         f"to some of this model's linear layers ({', '.join(linear)}), all-linear or auto") from error


def is_lora(model: torch.nn.Module) -> bool:
    """Whether the model carries PEFT adapters."""
    return isinstance(model, PeftModel)


def merged_copy(model: PeftModel) -> torch.nn.Module:
    """An ordinary model with the adapters folded into the weights (W0 + (alpha / r) B A); the
    trained model is left untouched."""
    return copy.deepcopy(model).merge_and_unload()


def served_model(model: torch.nn.Module) -> torch.nn.Module:
    """What an engine serves: the model itself, or a copy with its LoRA adapters merged into the weights."""
    return merged_copy(model) if is_lora(model) else model


def save_unmerged(model: PeftModel, path: Path) -> None:
    """The frozen base weights as an HF model directory at `path`, the adapter in `path/lora_adapter`."""
    copy.deepcopy(model).unload().save_pretrained(path)
    model.save_pretrained(path / ADAPTER_DIR)


def load_adapter(model: torch.nn.Module, path: Path) -> torch.nn.Module:
    """`model` with the trainable adapter saved in `path/lora_adapter`, when there is one."""
    if not (path / ADAPTER_DIR).exists():
        return model
    return PeftModel.from_pretrained(model, path / ADAPTER_DIR, is_trainable=True)
