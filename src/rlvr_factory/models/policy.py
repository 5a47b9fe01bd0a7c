"""Load and save policies: an HF causal LM, its tokenizer, and the RL bookkeeping beside them."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from rlvr_factory.models.lora import is_lora, load_adapter, merged_copy, save_unmerged
from rlvr_factory.models.tokenizer import chat_template as named_chat_template

STATE_FILE = "rlvr_state.json"
OPTIMIZER_FILE = "optimizer.pt"


@dataclass
class Policy:
    """A model being post-trained, with the tokenizer that feeds it.

    `version` counts the RL rounds applied; `optimizer_state` carries the optimizer's
    moments from one round to the next (and into checkpoints) so a resumed run continues
    exactly where it stopped.
    """

    model: PreTrainedModel
    tokenizer: Any
    version: int = 0
    optimizer_state: dict[str, Any] | None = field(default=None, repr=False)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def max_positions(config: Any) -> int | None:
    """The longest sequence a model's position embeddings cover, from its config (`max_position_embeddings`,
    GPT-2's `n_positions`), or None when the config names none (e.g. a model without learned or RoPE positions)."""
    positions = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    return int(positions) if positions else None


def freeze(model: torch.nn.Module) -> torch.nn.Module:
    """`model` in eval mode with every weight out of autograd (a reference, or a copy that no update changes)."""
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return model


def resolve_device(device: str) -> str:
    """`auto` means the first GPU when there is one, else the CPU."""
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


MODEL_DIR_CONTENTS = (
    "a model directory is what `save_pretrained` writes for a causal LM and its tokenizer: config.json, "
    "the weights (model.safetensors, pytorch_model.bin or a sharded index of them) and the tokenizer "
    "(tokenizer.json or tokenizer_config.json)"
)


DTYPES = ("auto", "float32", "bfloat16", "float16")


def torch_dtype(name: str) -> torch.dtype | str:
    """The torch dtype `model.dtype` names (`auto`: the checkpoint's own, as `from_pretrained` reads it)."""
    if name not in DTYPES:
        raise ValueError(f"model.dtype is {name!r}; use one of {', '.join(DTYPES)}")
    return name if name == "auto" else getattr(torch, name)


def looks_local(name_or_path: str | Path) -> bool:
    """Whether a model reference names a local path rather than a hub id (`name` or `org/name`)."""
    path = Path(name_or_path)
    return path.is_absolute() or str(name_or_path).startswith(".") or len(path.parts) > 2


def model_dir_problem(path: str | Path) -> str | None:
    """What keeps `path` from being a loadable model directory (see `MODEL_DIR_CONTENTS`), or None."""
    path = Path(path)
    if not path.exists():
        return "no such directory"
    if not path.is_dir():
        return "not a directory"
    missing = [
        what for what, present in (
            ("config.json", (path / "config.json").is_file()),
            ("the weights", any(path.glob("*.safetensors")) or any(path.glob("pytorch_model*.bin"))
             or any(path.glob("*.index.json"))),
            ("the tokenizer", (path / "tokenizer.json").is_file() or (path / "tokenizer_config.json").is_file()),
        ) if not present
    ]
    return f"it lacks {' and '.join(missing)}" if missing else None


def has_chat_template(path: str | Path) -> bool:
    """Whether the tokenizer saved in the model directory `path` carries a chat template."""
    path = Path(path)
    config = path / "tokenizer_config.json"
    return ((path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file()
            or (config.is_file() and bool(json.loads(config.read_text()).get("chat_template"))))


def load_policy(
    name_or_path: str | Path,
    device: str = "auto",
    dtype: str = "float32",
    with_optimizer: bool = False,
    model_class: Any = AutoModelForCausalLM,
    chat_template: str | None = None,
) -> Policy:
    """Load a policy from a local HF model directory or a hub id (`model_class` loads the weights:
    a causal LM, or e.g. `AutoModelForSequenceClassification` for a reward model).

    `dtype` is a torch dtype's name or `auto` (the checkpoint's own); `chat_template` (see
    `tokenizer.chat_template`) replaces the tokenizer's. A tokenizer without a pad token pads with EOS.
    Raises FileNotFoundError with a hint when a local-looking path does not exist.
    """
    path = Path(name_or_path)
    if looks_local(name_or_path) and not path.exists():
        raise FileNotFoundError(
            f"no model directory at {path}; run the pipeline that builds it "
            f"(e.g. `kedro run --pipeline=base_model`) or set model.name_or_path"
        )
    tokenizer = AutoTokenizer.from_pretrained(str(name_or_path))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if chat_template is not None:
        tokenizer.chat_template = named_chat_template(chat_template)
    model = model_class.from_pretrained(str(name_or_path), dtype=torch_dtype(dtype)).to(resolve_device(device))
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ValueError(f"the tokenizer of {name_or_path} has {len(tokenizer)} tokens but the model embeds only "
                         f"{rows}; resize the embeddings (model.resize_token_embeddings) and save the model again")
    state = json.loads((path / STATE_FILE).read_text()) if (path / STATE_FILE).exists() else {}
    model = load_adapter(model, path)
    optimizer_state = None
    if with_optimizer and (path / OPTIMIZER_FILE).exists():
        optimizer_state = torch.load(path / OPTIMIZER_FILE, map_location=resolve_device(device))
    return Policy(model, tokenizer, state.get("version", 0), optimizer_state)


def save_policy(policy: Policy, path: str | Path, with_optimizer: bool = False) -> None:
    """Save as an ordinary HF model directory (loadable by `AutoModelForCausalLM`).

    A LoRA policy saved without its optimizer state (a final policy) has its adapters merged
    into the weights; one saved with it (a checkpoint to resume) keeps the frozen base
    weights and the adapter (`lora_adapter/`) apart, so training resumes on the same
    adapter with its optimizer moments. The directory is written beside the target and
    renamed into place, so a run killed mid-save never leaves a half-written policy behind.
    """
    path = Path(path)
    staging = path.with_name(path.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    if not is_lora(policy.model):
        policy.model.save_pretrained(staging)
    elif with_optimizer:
        save_unmerged(policy.model, staging)
    else:
        merged_copy(policy.model).save_pretrained(staging)
    policy.tokenizer.save_pretrained(staging)
    (staging / STATE_FILE).write_text(json.dumps({"version": policy.version}))
    if with_optimizer and policy.optimizer_state is not None:
        torch.save(policy.optimizer_state, staging / OPTIMIZER_FILE)
    shutil.rmtree(path, ignore_errors=True)
    staging.rename(path)
