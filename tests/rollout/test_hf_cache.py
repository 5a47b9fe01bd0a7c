"""The transformers engine's in-place KV cache (`InPlaceLayer`): the same keys, values and sampled tokens as
transformers' concatenating `DynamicCache`, without a fresh copy of the cache per token."""

from __future__ import annotations

import random

import pytest
import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer

import rlvr_factory.rollout.hf as hf
from rlvr_factory.models.policy import Policy
from rlvr_factory.models.tiny import TinyModelConfig, build_tiny_model
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.rollout.engine import Request, SamplingConfig
from rlvr_factory.rollout.hf import InPlaceLayer, TransformersEngine, in_place_cache


def _kv(rows: int, length: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, 2, length, 4, generator=g), torch.randn(rows, 2, length, 4, generator=g)


def test_layer_holds_what_dynamic_layer_holds_through_every_operation():
    ours, theirs = InPlaceLayer(), DynamicLayer()
    ours.reserve = 3
    steps = [("update", 5), ("update", 1), ("update", 1), ("update", 1), ("update", 1), ("crop", -2), ("update", 2),
             ("select", [2, 0, 0]), ("update", 1), ("update", 4), ("repeat", 2), ("update", 1)]
    for i, (op, arg) in enumerate(steps):
        if op == "update":
            k, v = _kv(ours.keys.shape[0] if ours.is_initialized and ours.keys.dim() == 4 else 3, arg, i)
            got, want = ours.update(k, v), theirs.update(k.clone(), v.clone())
            assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (i, op)
        elif op == "crop":
            ours.crop(arg), theirs.crop(arg)
        elif op == "select":
            ours.batch_select_indices(torch.tensor(arg)), theirs.batch_select_indices(torch.tensor(arg))
        else:
            ours.batch_repeat_interleave(arg), theirs.batch_repeat_interleave(arg)
        assert torch.equal(ours.keys, theirs.keys) and torch.equal(ours.values, theirs.values), (i, op)
        assert ours.get_seq_length() == theirs.get_seq_length()
    ours.reset()
    assert ours.get_seq_length() == 0 and ours.update(*_kv(1, 2, 99))[0].shape == (1, 2, 2, 4)


def test_updates_within_the_reserve_write_into_one_buffer():
    layer = InPlaceLayer()
    layer.reserve = 4
    first = layer.update(*_kv(2, 6, 0))[0].data_ptr()
    for step in range(4):  # 6 + 4 positions fit the first buffer: no new allocation, no copy of the cache
        keys, _ = layer.update(*_kv(2, 1, step + 1))
        assert keys.data_ptr() == first and keys.shape[-2] == 7 + step
    grown, _ = layer.update(*_kv(2, 1, 9))  # past the reserve: a buffer twice as long, the same contents
    assert grown.data_ptr() != first and grown.shape[-2] == 11 and layer._room[0].shape[-2] == 20


@pytest.fixture(scope="module")
def policy() -> Policy:
    torch.manual_seed(0)
    tokenizer = build_byte_tokenizer()
    model = build_tiny_model(TinyModelConfig(max_positions=512), len(tokenizer), tokenizer.pad_token_id,
                             tokenizer.bos_token_id, tokenizer.eos_token_id, 0)
    return Policy(model, tokenizer)


def _rollouts(policy: Policy) -> list:
    """Single-turn groups (with and without the shared prefill) and three turns continued from the cache."""
    rng = random.Random(0)
    prompts = ["".join(rng.choice("abcdefgh =+-()\n") for _ in range(rng.randint(20, 90))) for _ in range(6)]
    out = []
    for share in (False, True):
        config = SamplingConfig(max_new_tokens=20, temperature=1.0, batch_size=16, seed=2, share_prefill=share)
        completions, _ = hf.generate(policy, prompts, 4, config)
        out.append([(c.completion_ids, c.logprobs) for c in completions])
    engine = TransformersEngine(policy, reuse_kv=True)
    requests = [Request(policy.tokenizer.encode(p), key=i) for i, p in enumerate(prompts)]
    config = SamplingConfig(max_new_tokens=12, temperature=1.0, batch_size=4, seed=3)
    for turn in range(3):
        generations, stats = engine.generate(requests, config)
        out.append([(g.token_ids, g.logprobs) for g in generations])
        if turn:
            assert stats.cached_tokens > 0  # the later turns really continue the kept caches
        requests = [Request([*r.context, *g.token_ids, *policy.tokenizer.encode(f" obs {turn} ")], key=r.key)
                    for r, g in zip(requests, generations)]
    layers = [layer for cache in engine._caches for layer in cache.cache.layers]
    return out, layers


def test_sampling_draws_the_same_tokens_and_logprobs_as_the_concatenating_cache(policy, monkeypatch):
    ours, layers = _rollouts(policy)
    assert layers and all(isinstance(layer, InPlaceLayer) for layer in layers)
    monkeypatch.setattr(hf, "in_place_cache", lambda model, reserve: DynamicCache(config=model.config))
    theirs, layers = _rollouts(policy)
    assert layers and not any(isinstance(layer, InPlaceLayer) for layer in layers)  # the peer really ran
    assert ours == theirs


def test_sliding_window_layers_stay_transformers_own(monkeypatch):
    """A model mixing full and sliding-window attention: only the full layers become in-place, and sampling
    draws what the concatenating cache draws, also past the window."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from transformers.cache_utils import DynamicSlidingWindowLayer

    tokenizer = build_byte_tokenizer()
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         use_sliding_window=True, sliding_window=8, layer_types=["full_attention", "sliding_attention"],
                         pad_token_id=tokenizer.pad_token_id, bos_token_id=tokenizer.bos_token_id,
                         eos_token_id=tokenizer.eos_token_id)
    policy = Policy(Qwen2ForCausalLM(config).eval(), tokenizer)
    cache = in_place_cache(policy.model, 5)
    assert [type(layer) for layer in cache.layers] == [InPlaceLayer, DynamicSlidingWindowLayer]
    assert cache.layers[0].reserve == 5
    sampling = SamplingConfig(max_new_tokens=16, temperature=1.0, batch_size=8, seed=4)
    prompts = ["a = 1 + 2", "print(3 * 4)", "x"]
    ours, _ = hf.generate(policy, prompts, 3, sampling)
    monkeypatch.setattr(hf, "in_place_cache", lambda model, reserve: DynamicCache(config=model.config))
    theirs, _ = hf.generate(policy, prompts, 3, sampling)
    assert [(c.completion_ids, c.logprobs) for c in ours] == [(c.completion_ids, c.logprobs) for c in theirs]
