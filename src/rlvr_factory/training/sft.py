"""Supervised fine-tuning: next-token loss on completion tokens only, padded batches, LR schedule.

A demonstration is one answer, or a multi-turn episode (actions and the observations between
them), encoded token for token as the agent loop builds episodes; the loss then covers the
actions only.
"""

from __future__ import annotations

import logging
import random
import time
from dataclasses import dataclass
from typing import Literal, Sequence

import torch
from tqdm.auto import tqdm

from rlvr_factory import distributed
from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.chat import ChatFormat
from rlvr_factory.summary import duration
from rlvr_factory.schema import NonNegativeInt, PositiveInt
from rlvr_factory.training.lm import SCHEDULES, join_prompt_completion, lr_schedule, make_optimizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SFTConfig:
    steps: PositiveInt = 100  # optimizer steps
    batch_size: PositiveInt = 32  # sequences per step
    lr: float = 1e-3  # peak learning rate
    weight_decay: float = 0.01  # AdamW decoupled weight decay
    warmup_steps: NonNegativeInt = 10  # linear warm-up before the decay
    schedule: Literal[SCHEDULES] = "cosine"  # cosine | linear | constant
    max_grad_norm: float = 1.0  # global gradient-norm clip
    seed: int = 0  # order of examples
    gradient_checkpointing: bool = False  # recompute each layer's activations in the backward pass: less memory, about a third more compute


def encode_chat_examples(
    tokenizer, prompts: Sequence[str], completions: Sequence[str], split_special_tokens: bool = False
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids with the generation prompt, completion ids ending in EOS) per example.

    With `split_special_tokens`, a special token spelled out in a completion (`<|im_end|>`) is
    read as plain text, so text cannot end the turn early or open a new one.
    """
    prompt_ids = encode_prompts(tokenizer, prompts)
    completion_ids = [
        tokenizer(c, add_special_tokens=False, split_special_tokens=split_special_tokens)["input_ids"]
        + [tokenizer.eos_token_id]
        for c in completions
    ]
    return list(zip(prompt_ids, completion_ids))


def encode_prompts(tokenizer, prompts: Sequence[str]) -> list[list[int]]:
    """Each user prompt rendered through the tokenizer's chat template, ready for generation."""
    return [
        list(
            tokenizer.apply_chat_template(
                [{"role": "user", "content": p}], add_generation_prompt=True, tokenize=True
            )["input_ids"]
        )
        for p in prompts
    ]


def encode_demonstrations(
    tokenizer, prompts: Sequence[str], demonstrations: Sequence[Sequence[str]], observation_role: str = "tool",
    action_loss: str = "all",
) -> list[tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]]:
    """Examples from demonstrations, each a list of turns: [answer] (single-turn, as `encode_chat_examples`)
    or [action, observation, action, ...] (prompt ids, completion ids, loss mask: 1 on the actions' tokens).

    `action_loss` "last" puts the loss on a multi-turn demonstration's last action alone: the actions
    before it are context, as the observations are. A demonstration that shows a deliberately wrong
    first action, so that the next one can read its feedback, then does not teach that wrong action.
    """
    if action_loss not in ("all", "last"):
        raise ValueError(f"action_loss must be 'all' or 'last', not {action_loss!r}")
    single = [i for i, d in enumerate(demonstrations) if len(d) == 1]
    encoded = dict(zip(single, encode_chat_examples(tokenizer, [prompts[i] for i in single],
                                                    [demonstrations[i][0] for i in single])))
    chat = ChatFormat(tokenizer, observation_role)
    if len(single) < len(demonstrations):
        chat.check_append_only()
    for i, turns in enumerate(demonstrations):
        if len(turns) % 2 == 0:
            raise ValueError(f"demonstration {i} has {len(turns)} turns; it must alternate action, observation, ... action")
        if i in encoded:
            continue
        completion: list[int] = []
        mask: list[int] = []
        for k, text in enumerate(turns):
            ids = chat.action_ids(text) if k % 2 == 0 else chat.observation_ids(text)
            completion += ids
            trained = k % 2 == 0 and (action_loss == "all" or k == len(turns) - 1)
            mask += [int(trained)] * len(ids)
        encoded[i] = (chat.prompt_ids(prompts[i]), completion, mask)
    return [encoded[i] for i in range(len(demonstrations))]


def supervised_train(
    policy: Policy,
    examples: Sequence[tuple[list[int], list[int]] | tuple[list[int], list[int], list[int]]],
    config: SFTConfig,
    desc: str = "sft",
) -> list[float]:
    """Train on (prompt, completion[, loss mask]) token ids, loss on the completion's (masked) tokens;
    returns losses.

    An empty prompt trains on the whole sequence (plain language modelling). Run data-parallel
    (`distributed`), each rank trains on its share of every batch and the loss is normalised by
    the whole batch's token count, so the steps equal one process's on the same batches.
    """
    if not examples:
        raise ValueError("supervised_train needs at least one example")
    if config.batch_size < distributed.world_size():
        raise ValueError(f"batch_size {config.batch_size} is smaller than the {distributed.world_size()} data-parallel "
                         "ranks; every rank needs at least one sequence per step")
    distributed.broadcast_parameters(policy.model)
    with distributed.training_copy(policy.model, config.gradient_checkpointing) as model:
        losses = _train_steps(model, policy, examples, config, desc)
    policy.model.eval()
    return losses


def _train_steps(model, policy: Policy, examples: Sequence, config: SFTConfig, desc: str) -> list[float]:
    model.train()
    optimizer = make_optimizer(model, config.lr, config.weight_decay)
    scheduler = lr_schedule(optimizer, config.schedule, config.warmup_steps, config.steps)
    rng = random.Random(config.seed)
    order: list[int] = []
    losses = []
    pad_id, device = policy.tokenizer.pad_token_id, policy.device
    bar = tqdm(range(config.steps), desc=desc, mininterval=2.0)
    started = time.monotonic()  # not the bar's clock: a disabled bar (TQDM_DISABLE) keeps none
    eta_step = max(1, config.steps // 20) if config.steps >= 100 else 0  # log an ETA after 5% of a long run
    for step in bar:
        if len(order) < config.batch_size:
            refill = list(range(len(examples)))
            rng.shuffle(refill)
            order += refill
        batch = [examples[i] for i in order[: config.batch_size]]
        del order[: config.batch_size]
        ids, attention, target = join_prompt_completion(
            [e[0] for e in batch], [e[1] for e in batch], pad_id, [e[2] if len(e) > 2 else None for e in batch]
        )
        ids, attention, target, global_norm = _local_share(ids, attention, target)
        labels = ids.masked_fill(target == 0, -100).to(device)
        loss = model(
            input_ids=ids.to(device), attention_mask=attention.to(device), labels=labels, **global_norm
        ).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        distributed.sum_gradients(model)
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        scheduler.step()
        losses.append(distributed.sum_value(loss.detach()))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{losses[-1]:.3f}", lr=f"{scheduler.get_last_lr()[0]:.2e}")
        if step + 1 == eta_step:  # once, for logs where the bar's \r updates do not show
            elapsed = time.monotonic() - started
            log.info("%s: %d/%d steps in %s, about %s to go", desc, step + 1, config.steps, duration(elapsed),
                     duration(elapsed * (config.steps - step - 1) / (step + 1)))
    log.info("%s: %d steps, final loss %.4f", desc, config.steps, losses[-1])
    return losses


def _local_share(
    ids: torch.Tensor, attention: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, int]]:
    """This rank's rows of a batch, and with more than one rank the loss's divisor: the whole batch's
    predicted tokens (`num_items_in_batch`), so the ranks' losses sum to the batch's token mean."""
    if distributed.world_size() == 1:
        return ids, attention, target, {}
    rows = distributed.shard(len(ids))
    return ids[rows], attention[rows], target[rows], {"num_items_in_batch": int(target[:, 1:].sum())}
