"""Rollouts with transformers `generate`: batched, left-padded, KV-cached sampling."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Sequence

import torch
from tqdm.auto import tqdm

from rlvr_factory.models.policy import Policy
from rlvr_factory.training.lm import pad_batch
from rlvr_factory.training.sft import encode_prompts


@dataclass(frozen=True)
class SamplingConfig:
    max_new_tokens: int = 48  # completion budget; longer ones end with finish_reason=length
    temperature: float = 1.0  # 0 means greedy decoding
    top_p: float = 1.0  # nucleus sampling mass
    batch_size: int = 256  # sequences per generate() call
    seed: int = 0  # sampling seed (combine with the round index for fresh samples)


@dataclass
class Completion:
    prompt_index: int  # which prompt of the input list
    sample_index: int  # which of its samples
    text: str
    prompt_ids: list[int]
    completion_ids: list[int]  # generated tokens, EOS included when emitted
    finish_reason: str  # "stop" (EOS) or "length" (ran out of budget)


@torch.no_grad()
def generate(
    policy: Policy, prompts: Sequence[str], num_samples: int, config: SamplingConfig, desc: str = "rollout"
) -> tuple[list[Completion], dict[str, float]]:
    """Sample `num_samples` completions for each user prompt; returns them and timing stats."""
    tokenizer, model = policy.tokenizer, policy.model
    model.eval()
    encoded = encode_prompts(tokenizer, prompts)
    jobs = [(i, s) for i in range(len(prompts)) for s in range(num_samples)]
    greedy = config.temperature <= 0
    gen = torch.Generator().manual_seed(config.seed)
    eos = tokenizer.eos_token_id
    out: list[Completion] = []
    start, new_tokens = time.perf_counter(), 0
    for lo in tqdm(range(0, len(jobs), config.batch_size), desc=desc, mininterval=2.0, leave=False):
        chunk = jobs[lo : lo + config.batch_size]
        ids, mask = pad_batch([encoded[i] for i, _ in chunk], tokenizer.pad_token_id, left=True)
        torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=gen)))
        sampled = model.generate(
            input_ids=ids.to(policy.device),
            attention_mask=mask.to(policy.device),
            do_sample=not greedy,
            temperature=config.temperature if not greedy else None,
            top_p=config.top_p if not greedy else None,
            top_k=None,
            max_new_tokens=config.max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos,
        )[:, ids.shape[1] :].cpu()
        for (i, s), row in zip(chunk, sampled.tolist()):
            if eos in row:
                row, reason = row[: row.index(eos) + 1], "stop"
            else:
                reason = "length"
            new_tokens += len(row)
            text = tokenizer.decode(row, skip_special_tokens=True)
            out.append(Completion(i, s, text, encoded[i], row, reason))
    seconds = time.perf_counter() - start
    return out, {"seconds": seconds, "new_tokens": new_tokens, "tokens_per_second": new_tokens / max(seconds, 1e-9)}
