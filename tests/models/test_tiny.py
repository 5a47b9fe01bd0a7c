"""The embedded base model's build: the copy warm-up (model.embedded.copy_warmup) and its cache key."""

from __future__ import annotations

import pytest
import torch

from rlvr_factory.models.policy import load_policy
from rlvr_factory.models.tiny import (
    COPY_ALPHABET, CopyWarmupConfig, TinyModelConfig, build_or_load_base_model, copy_exercises, fingerprint,
)
from rlvr_factory.models.tokenizer import build_byte_tokenizer
from rlvr_factory.training.sft import SFTConfig

ARCH = TinyModelConfig(hidden_size=64, intermediate_size=192, num_layers=2, num_heads=2, max_positions=128)
CORPUS = ["def f(x):\n    return x + 1\n"]
PRETRAIN = SFTConfig(steps=1, batch_size=1, lr=1e-3, warmup_steps=0)


def test_copy_exercises_are_seeded_strings_whose_completion_is_the_copy() -> None:
    tokenizer = build_byte_tokenizer()
    config = CopyWarmupConfig(min_chars=3, max_chars=9, seed=4)
    pairs = copy_exercises(50, config, tokenizer)
    assert pairs == copy_exercises(50, config, tokenizer)
    assert pairs != copy_exercises(50, CopyWarmupConfig(min_chars=3, max_chars=9, seed=5), tokenizer)
    for prompt, completion in pairs:
        assert prompt[0] == tokenizer.bos_token_id
        text = tokenizer.decode(completion)
        assert tokenizer.decode(prompt[1:]) == text + "|"
        assert 3 <= len(text) <= 9 and set(text) <= set(COPY_ALPHABET)
    with pytest.raises(ValueError, match="min_chars <= max_chars"):
        copy_exercises(1, CopyWarmupConfig(min_chars=10, max_chars=9), tokenizer)


def test_a_warm_up_of_zero_steps_keeps_the_cache_key_and_any_other_changes_it() -> None:
    plain = fingerprint(ARCH, CORPUS, PRETRAIN, 0)
    assert fingerprint(ARCH, CORPUS, PRETRAIN, 0, CopyWarmupConfig(steps=0, lr=5e-3)) == plain
    warm = fingerprint(ARCH, CORPUS, PRETRAIN, 0, CopyWarmupConfig(steps=10))
    assert warm != plain != fingerprint(ARCH, CORPUS, PRETRAIN, 0, CopyWarmupConfig(steps=10, seed=1)) != warm


def _copy_accuracy(path, config: CopyWarmupConfig) -> float:
    """Teacher-forced accuracy of the model at `path` on the copied bytes of fresh exercises."""
    policy = load_policy(path, device="cpu")
    hit = total = 0
    with torch.no_grad():
        for prompt, completion in copy_exercises(64, config, policy.tokenizer):
            ids = torch.tensor([prompt + completion])
            predicted = policy.model(ids).logits[0, len(prompt) - 1:-1].argmax(-1).tolist()
            hit += sum(p == c for p, c in zip(predicted, completion))
            total += len(completion)
    return hit / total


def test_the_copy_warm_up_teaches_the_model_to_copy_strings_it_has_not_seen(tmp_path) -> None:
    warmup = CopyWarmupConfig(steps=300, batch_size=32, lr=3e-3, min_chars=6, max_chars=12, seed=0)
    fresh = CopyWarmupConfig(min_chars=6, max_chars=12, seed=99)  # strings the warm-up never drew
    plain = build_or_load_base_model(tmp_path, ARCH, CORPUS, PRETRAIN, 0)
    warm = build_or_load_base_model(tmp_path, ARCH, CORPUS, PRETRAIN, 0, warmup)
    assert warm != plain
    # measured: 0.85 after the warm-up (11 s), chance is 1/36 of the alphabet
    assert _copy_accuracy(warm, fresh) > 0.6
    assert _copy_accuracy(plain, fresh) < 0.2
    assert build_or_load_base_model(tmp_path, ARCH, CORPUS, PRETRAIN, 0, warmup) == warm  # cached
