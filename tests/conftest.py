"""Shared fixtures: a tiny byte-level policy that builds in milliseconds on a CPU."""

from __future__ import annotations

import os

import pytest

import rlvr_factory  # noqa: F401, I001 (before torch allocates: it turns on huge pages, rlvr_factory/__init__.py)
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from rlvr_factory.models.policy import Policy
from rlvr_factory.models.tokenizer import build_byte_tokenizer

# With several intra-op threads on a busy machine, tiny-model steps stall in thread
# hand-offs (measured here: ~0.8 s per step instead of ~6 ms); one thread is faster.
torch.set_num_threads(1)


def make_tiny_policy(seed: int = 0, tie_word_embeddings: bool = True, hidden_size: int = 32) -> Policy:
    """A freshly initialised 2-layer Llama with 2 heads (hidden size 32: head size 16; vLLM serves 64) with
    the byte tokenizer."""
    tokenizer = build_byte_tokenizer()
    torch.manual_seed(seed)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer),
            hidden_size=hidden_size,
            intermediate_size=2 * hidden_size,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=256,
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            tie_word_embeddings=tie_word_embeddings,
        )
    )
    model.eval()
    return Policy(model, tokenizer)


def make_scripted_policy(text: str, after: str = "\n", hidden_size: int = 32) -> Policy:
    """A tiny Llama that, given any context ending in `after`, greedily writes `text` then EOS.

    The blocks' output projections are zeroed, so the residual stream at each position is
    the embedding of that position's token alone: the model is a bigram table. Each token of
    `after + text` gets its own embedding axis, and the output row of its successor points
    along that axis. The tokens of `after + text` must therefore be distinct.
    """
    policy = make_tiny_policy(tie_word_embeddings=False, hidden_size=hidden_size)
    model, tokenizer = policy.model, policy.tokenizer
    chain = tokenizer(after + text)["input_ids"] + [tokenizer.eos_token_id]
    if len(set(chain[:-1])) != len(chain) - 1 or len(chain) - 1 > model.config.hidden_size:
        raise ValueError(f"cannot script {after + text!r}: tokens repeat or exceed the hidden size")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.model.embed_tokens.weight.zero_()
        model.lm_head.weight.zero_()
        for axis, (token, successor) in enumerate(zip(chain, chain[1:])):
            model.model.embed_tokens.weight[token, axis] = 1.0
            model.lm_head.weight[successor, axis] = 100.0
    return policy


@pytest.fixture
def byte_tokenizer():
    """The project's byte-level tokenizer."""
    return build_byte_tokenizer()


@pytest.fixture
def tiny_policy() -> Policy:
    """A tiny, randomly initialised (seeded) Llama policy on the CPU; fresh for every test."""
    return make_tiny_policy(seed=0)


def skip_without_vllm() -> None:
    """Skip the calling test module when vLLM is not installed; fail instead where RLVR_REQUIRE_VLLM is set (CI)."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        if os.environ.get("RLVR_REQUIRE_VLLM"):
            raise RuntimeError("RLVR_REQUIRE_VLLM is set but vLLM is not installed: run `bash scripts/install_vllm.sh`")
        pytest.skip("vLLM is not installed: `bash scripts/install_vllm.sh` puts the CPU build in .venv-vllm",
                    allow_module_level=True)


@pytest.fixture(scope="session")
def refreshed_project(tmp_path_factory):
    """A fresh clone of the project at a tiny size whose committed dvc.lock and results are the
    ones `scripts/results.py refresh` wrote (one whole `dvc repro`)."""
    from tests.project_clone import refreshed_project as make

    return make(tmp_path_factory.mktemp("refreshed") / "repo")
