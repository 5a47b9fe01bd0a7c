"""The loop shared by the preference trainers (reward model, DPO): batches of pairs, checkpoints, resume.

Each optimizer step takes `batch_size` pairs from a seeded stream of shuffled epochs (step s's
batch depends only on the seed and s) and runs chosen and rejected completions through the
model as one padded batch, chosen first. The trainer's `loss_fn` turns that forward pass into a
loss and named per-pair values; a loss or value that is not finite stops the run with the step
and the batch's pair ids named. Every `checkpoint_every` steps the model and its optimizer go to
disk with the loop's state; a run with the same configuration and data resumes from there and
ends with the same weights as one that was never interrupted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm.auto import tqdm

from rlvr_factory.models.policy import Policy, load_policy, max_positions, save_policy
from rlvr_factory.preferences.contract import PreferencePair, checked_margin, finite_number
from rlvr_factory.training.lm import join_prompt_completion, lr_factor, make_optimizer, seed_everything
from rlvr_factory.training.sft import encode_chat_examples, encode_prompts

log = logging.getLogger(__name__)
STATE_FILE = "pair_training.json"


def whole_number(value: Any, name: str, low: int = 0) -> int:
    """`value` when it is an int (not a bool) of at least `low`; ValueError naming the setting otherwise."""
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be a whole number >= {low}, got {value!r}")
    return value


def real_number(value: Any, name: str, low: float, high: float = math.inf, strict: bool = False) -> float:
    """`value` when it is a finite number in [low, high) (`strict`: above `low`, not at it); ValueError naming
    the setting otherwise (a NaN or infinite setting would silently disable what it sets)."""
    number = finite_number(value, name)
    if number < low or (strict and number == low) or number >= high:
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{name} must be {bound}{f' and < {high:g}' if high < math.inf else ''}, got {value!r}")
    return number


@dataclass(frozen=True)
class PairTrainConfig:
    steps: int = 200  # optimizer steps
    batch_size: int = 32  # pairs per step (each pair is two sequences)
    lr: float = 1e-4  # peak learning rate
    weight_decay: float = 0.0  # AdamW decoupled weight decay (matrices only)
    warmup_steps: int = 10  # linear warm-up before the decay
    schedule: str = "cosine"  # cosine (to 10%) | linear (to 0) | constant
    max_grad_norm: float = 1.0  # global gradient-norm clip
    eval_every: int = 50  # steps between held-out evaluations (0: at the end only)
    checkpoint_every: int = 0  # steps between checkpoints to resume from (0: none)
    seed: int = 0  # pair order

    def __post_init__(self) -> None:
        for name, low in (("steps", 1), ("batch_size", 1), ("warmup_steps", 0), ("eval_every", 0),
                          ("checkpoint_every", 0), ("seed", 0)):
            whole_number(getattr(self, name), name, low)
        real_number(self.lr, "lr", 0.0, strict=True)
        real_number(self.weight_decay, "weight_decay", 0.0)
        real_number(self.max_grad_norm, "max_grad_norm", 0.0, strict=True)
        lr_factor(self.schedule, 0, self.warmup_steps, self.steps)  # refuse an unknown schedule now


@dataclass(frozen=True)
class EncodedPair:
    """One pair as token ids: the chat-formatted prompt, and each completion ending in EOS."""

    pair_id: str
    prompt_ids: list[int]
    chosen_ids: list[int]
    rejected_ids: list[int]
    margin: float  # NaN: none given
    kind: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "margin", checked_margin(self.margin, self.pair_id))  # what the loss reads is finite


def encode_pairs(tokenizer: Any, pairs: Sequence[PreferencePair]) -> list[EncodedPair]:
    """Pairs tokenized as the policy reads them (special tokens spelled out in text stay text)."""
    prompts = [p.prompt for p in pairs]
    chosen = encode_chat_examples(tokenizer, prompts, [p.chosen for p in pairs], split_special_tokens=True)
    rejected = encode_chat_examples(tokenizer, prompts, [p.rejected for p in pairs], split_special_tokens=True)
    return [EncodedPair(p.pair_id, c[0], c[1], r[1], p.margin, p.kind) for p, c, r in zip(pairs, chosen, rejected)]


def token_budget(name_or_path: str) -> tuple[Callable[[str, str], int], int]:
    """For the model at `name_or_path`: a counter of the tokens it reads for (prompt, completion),
    encoded as the trainers encode pairs, and its context length."""
    from functools import lru_cache

    from transformers import AutoConfig, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(name_or_path)
    config = AutoConfig.from_pretrained(name_or_path)
    context = max_positions(config) or tokenizer.model_max_length

    @lru_cache(maxsize=None)
    def prompt_tokens(prompt: str) -> int:
        return len(encode_prompts(tokenizer, [prompt])[0])

    def count(prompt: str, completion: str) -> int:
        return prompt_tokens(prompt) + len(tokenizer(completion, add_special_tokens=False,
                                                     split_special_tokens=True)["input_ids"]) + 1  # + EOS
    return count, int(context)


def pair_batch(pairs: Sequence[EncodedPair], pad_id: int, device: torch.device | str = "cpu"
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(ids, attention, completion mask) of the chosen completions followed by the rejected ones, right-padded."""
    prompts = [p.prompt_ids for p in pairs] * 2
    completions = [p.chosen_ids for p in pairs] + [p.rejected_ids for p in pairs]
    ids, attention, mask = join_prompt_completion(prompts, completions, pad_id)
    return ids.to(device), attention.to(device), mask.to(device)


def ranking_metrics(pairs: Sequence[EncodedPair], chosen: torch.Tensor, rejected: torch.Tensor,
                    prefix: str = "val_") -> dict[str, float]:
    """How well rewards (one per completion) rank the pairs: the share with chosen above rejected,
    overall and per `kind` (`accuracy/<kind>`), the mean margin and the mean chosen / rejected reward."""
    right = (chosen > rejected).float()
    report = {f"{prefix}accuracy": float(right.mean()), f"{prefix}margin": float((chosen - rejected).mean()),
              f"{prefix}chosen_reward": float(chosen.mean()), f"{prefix}rejected_reward": float(rejected.mean())}
    by_kind: dict[str, list[float]] = defaultdict(list)
    for pair, ok in zip(pairs, right.tolist()):
        if pair.kind:
            by_kind[pair.kind].append(ok)
    report.update({f"{prefix}accuracy/{kind}": sum(v) / len(v) for kind, v in sorted(by_kind.items())})
    return report


def step_indices(n: int, batch_size: int, seed: int, step: int) -> list[int]:
    """The pair indices of optimizer step `step`: positions [step * B, (step + 1) * B) of a stream of
    epochs, each a fresh seeded shuffle of range(n)."""
    out = []
    for position in range(step * batch_size, (step + 1) * batch_size):
        epoch, offset = divmod(position, n)
        if offset == 0 or not out:
            order = list(range(n))
            random.Random(f"{seed}:{epoch}").shuffle(order)
        out.append(order[offset])
    return out


def fingerprint(model: torch.nn.Module, config: PairTrainConfig, pairs: Sequence[EncodedPair],
                settings: dict[str, Any]) -> str:
    """A short hash of everything that decides the trained weights: the initial weights, the loop's
    configuration, the trainer's `settings` (its loss) and the pairs."""
    digest = hashlib.sha256(json.dumps({"config": asdict(config), "settings": settings}, sort_keys=True).encode())
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes())
    for p in pairs:
        digest.update(json.dumps([p.pair_id, p.prompt_ids, p.chosen_ids, p.rejected_ids, p.margin]).encode())
    return digest.hexdigest()[:16]


class Checkpoint:
    """Where a pair trainer writes its resume points: the model and optimizer, and the loop's state."""

    def __init__(self, path: str | Path, model_class: Any) -> None:
        self.path = Path(path)
        self.model_class = model_class

    def save(self, policy: Policy, optimizer: torch.optim.Optimizer, state: dict[str, Any]) -> None:
        """Write the model with its optimizer state (atomically), then the loop's state beside it."""
        policy.optimizer_state = optimizer.state_dict()
        save_policy(policy, self.path, with_optimizer=True)
        (self.path / STATE_FILE).write_text(json.dumps(state))
        policy.optimizer_state = None

    def restore(self, policy: Policy, optimizer: torch.optim.Optimizer, key: str) -> dict[str, Any] | None:
        """Load the last checkpoint into `policy` and `optimizer` and return the loop's state, when one
        was written for the same configuration and data (`key`); else None."""
        state_file = self.path / STATE_FILE
        if not state_file.exists():
            return None
        state = json.loads(state_file.read_text())
        if state.get("fingerprint") != key:
            log.warning("checkpoint %s was written for another configuration or data; starting afresh", self.path)
            return None
        saved = load_policy(self.path, device=str(policy.device), with_optimizer=True, model_class=self.model_class)
        policy.model.load_state_dict(saved.model.state_dict())
        optimizer.load_state_dict(saved.optimizer_state)
        log.info("resuming from %s at step %d", self.path, state["step"])
        return state


LossFn = Callable[[torch.nn.Module, Sequence[EncodedPair], Sequence[int]], dict[str, torch.Tensor]]


def _check_finite(values: dict[str, torch.Tensor], step: int, batch: Sequence[EncodedPair], desc: str) -> None:
    for name, value in values.items():
        if not torch.isfinite(value.detach()).all():
            ids = [p.pair_id for p in batch]
            raise FloatingPointError(
                f"{desc}: {name} is not finite at step {step} on the batch of pairs {ids[:8]}"
                f"{' ...' if len(ids) > 8 else ''}; lower the learning rate, check those pairs, or resume from "
                "the last checkpoint with a smaller lr"
            )


def train_on_pairs(
    policy: Policy, pairs: Sequence[EncodedPair], config: PairTrainConfig, loss_fn: LossFn, *,
    evaluate: Callable[[], dict[str, float]] | None = None, checkpoint: Checkpoint | None = None,
    settings: dict[str, Any] | None = None, desc: str = "pairs",
) -> list[dict[str, float]]:
    """Train `policy.model` (the initial model) in place on `pairs` for `config.steps` steps; returns
    one record per step (`step`, `lr`, `grad_norm`, `seconds` and the means of `loss_fn`'s values) with the
    held-out `evaluate()` results every `eval_every` steps and at the end.

    `loss_fn(model, batch, indices)` returns `loss` (a scalar to minimise) and named per-pair values
    (`indices`: the batch's positions in `pairs`). `settings` (the trainer's loss settings) join
    the checkpoint's fingerprint, so a checkpoint is resumed only by the run that wrote it.
    """
    if not pairs:
        raise ValueError(f"{desc}: no training pairs; check the preference data and its curation quarantine")
    model = policy.model
    optimizer = make_optimizer(model, config.lr, config.weight_decay)
    key = fingerprint(model, config, pairs, {"desc": desc, **(settings or {})}) if checkpoint else ""
    restored = checkpoint.restore(policy, optimizer, key) if checkpoint else None
    history: list[dict[str, float]] = restored["history"] if restored else []
    start = restored["step"] if restored else 0
    bar = tqdm(range(start, config.steps), desc=desc, mininterval=2.0, initial=start, total=config.steps)
    for step in bar:
        started = time.perf_counter()
        seed_everything(config.seed * 1_000_003 + step)  # dropout and friends: the same on resume
        lr = config.lr * lr_factor(config.schedule, step, config.warmup_steps, config.steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        indices = step_indices(len(pairs), config.batch_size, config.seed, step)
        batch = [pairs[i] for i in indices]
        model.train()
        values = loss_fn(model, batch, indices)
        _check_finite(values, step, batch, desc)
        optimizer.zero_grad(set_to_none=True)
        values["loss"].backward()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm))
        optimizer.step()
        record = {"step": step, "lr": lr, "grad_norm": grad_norm, "seconds": time.perf_counter() - started,
                  **{k: float(v.detach().float().mean()) for k, v in values.items()}}
        last = step == config.steps - 1
        if evaluate is not None and (last or (config.eval_every and (step + 1) % config.eval_every == 0)):
            model.eval()
            record.update(evaluate())
        history.append(record)
        if step % 20 == 0 or last:
            bar.set_postfix(loss=f"{record['loss']:.3f}", lr=f"{lr:.2e}")
        if checkpoint and config.checkpoint_every and ((step + 1) % config.checkpoint_every == 0 or last):
            checkpoint.save(policy, optimizer, {"fingerprint": key, "step": step + 1, "history": history})
    model.eval()
    if history:
        log.info("%s: %d steps, final loss %.4f", desc, config.steps, history[-1]["loss"])
    return history
