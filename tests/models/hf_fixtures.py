"""Local stand-ins for real Hugging Face models: Llama 3, Qwen2 and GPT-2 as their hub directories
lay them out (config, weights, generation config, tokenizer files with the real special tokens and
chat template, vocabularies of the real size), with random weights at a tiny width.

Nothing is downloaded. Each tokenizer is a byte-level BPE trained by `tokenizers` on a small local
corpus (the arithmetic domain's text and a paragraph of English), then grown to the real
vocabulary size by merging pairs of existing tokens, so token ids, special-token ids, embedding
rows and memory are those of the real model while the weights stay small (2 layers, width 64).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    GenerationConfig, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, PreTrainedModel,
    PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM,
)

import yaml

from rlvr_factory.domains import get_domain

PROJECT_ROOT = Path(__file__).resolve().parents[2]

# The pre-tokenizer splits of tiktoken's cl100k-style pattern (Llama 3) and Qwen2's (digits one by one).
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
               r"\s*[\r\n]+|\s+(?!\S)|\s+")

# The chat templates as the hub's tokenizer_config.json files carry them.
LLAMA3_CHAT_TEMPLATE = (  # meta-llama/Meta-Llama-3-8B-Instruct
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
QWEN2_CHAT_TEMPLATE = (  # Qwen/Qwen2-0.5B-Instruct (ChatML with a default system message)
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

ENGLISH = (
    "The quick brown fox jumps over the lazy dog. You are a helpful assistant. Answer the question and "
    "put the final answer in a box. What is the sum of the numbers? Let us think step by step. First we add "
    "the two numbers, then we subtract the third one. The result is the answer. Write the answer below. "
)


def llama3_specials() -> list[str]:
    """Llama 3's 256 special tokens, ids 128000 to 128255, in order."""
    named = {0: "<|begin_of_text|>", 1: "<|end_of_text|>", 6: "<|start_header_id|>", 7: "<|end_header_id|>",
             9: "<|eot_id|>"}
    reserved = iter(range(256))
    return [named.get(i) or f"<|reserved_special_token_{next(reserved)}|>" for i in range(256)]


@dataclass(frozen=True)
class Architecture:
    """What tells one hub model apart: its tokenizer's layout, special tokens, template and config."""

    name: str
    tokenizer_class: str  # tokenizer_config.json's, which picks the class that loads it
    regular_tokens: int  # byte-level BPE tokens before the special ones
    specials: list[str]  # special tokens, ids from `regular_tokens` on
    embedding_rows: int  # config.vocab_size: Qwen2 pads its embedding beyond the tokenizer
    split: str | None  # the pre-tokenizer's regex; None: GPT-2's own (ByteLevel use_regex)
    bos: str | None
    eos: str
    pad: str | None
    chat_template: str | None
    stop_tokens: list[str]  # generation_config.json's eos_token_id
    sampling: dict = field(default_factory=dict)  # generation_config.json's sampling defaults
    add_bos: bool = False  # the tokenizer prepends BOS to every encoding (Llama 3's post-processor)


LLAMA3 = Architecture(
    name="llama", tokenizer_class="PreTrainedTokenizerFast", regular_tokens=128_000, specials=llama3_specials(),
    embedding_rows=128_256, split=LLAMA3_SPLIT, bos="<|begin_of_text|>", eos="<|eot_id|>", pad=None,
    chat_template=LLAMA3_CHAT_TEMPLATE, stop_tokens=["<|end_of_text|>", "<|eot_id|>"],
    sampling={"do_sample": True, "temperature": 0.6, "top_p": 0.9}, add_bos=True,
)
QWEN2 = Architecture(
    name="qwen2", tokenizer_class="Qwen2Tokenizer", regular_tokens=151_643,
    specials=["<|endoftext|>", "<|im_start|>", "<|im_end|>"], embedding_rows=151_936, split=QWEN2_SPLIT, bos=None,
    eos="<|im_end|>", pad="<|endoftext|>", chat_template=QWEN2_CHAT_TEMPLATE, stop_tokens=["<|im_end|>", "<|endoftext|>"],
    sampling={"do_sample": True, "temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05},
)
GPT2 = Architecture(
    name="gpt2", tokenizer_class="GPT2Tokenizer", regular_tokens=50_256, specials=["<|endoftext|>"],
    embedding_rows=50_257, split=None, bos="<|endoftext|>", eos="<|endoftext|>", pad=None, chat_template=None,
    stop_tokens=["<|endoftext|>"],
)
ARCHITECTURES = {a.name: a for a in (LLAMA3, QWEN2, GPT2)}


def bf16_supported() -> bool:
    """Whether this CPU computes in bfloat16 natively (oneDNN's check: AVX-512 BW/VL/DQ, AVX512_BF16 or AMX)."""
    return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())


def training_corpus() -> list[str]:
    """A few hundred lines of local text: the arithmetic domain's worked expressions and some English."""
    domain = yaml.safe_load((PROJECT_ROOT / "conf/base/parameters_curate.yml").read_text())["domain"]
    return get_domain(domain).pretraining_corpus(400, seed=0, exclude=set()) + [ENGLISH] * 4


def grown_bpe(vocab: dict[str, int], merges: list[tuple[str, str]], size: int) -> tuple[dict, list]:
    """`vocab` and `merges` grown to `size` tokens by merging each token (in id order, the new ones too)
    with each byte; the new merges come last, so they are the ones of lowest priority."""
    vocab, merges = dict(vocab), list(merges)
    tokens = sorted(vocab, key=vocab.get)
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    pairs = ((left, right) for left in tokens for right in alphabet)  # `tokens` grows while it is read
    while len(vocab) < size:
        left, right = next(pairs)
        if left + right not in vocab:
            vocab[left + right] = len(vocab)
            tokens.append(left + right)
            merges.append((left, right))
    return vocab, merges


def build_tokenizer(arch: Architecture) -> PreTrainedTokenizerFast:
    """A byte-level BPE laid out as `arch`'s: trained on `training_corpus`, grown to the real size."""
    def pre_tokenizer():
        if arch.split is None:
            return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(arch.split), behavior="isolated"),
                                        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizer()
    trained.train_from_iterator(training_corpus(), trainers.BpeTrainer(
        vocab_size=4000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    state = json.loads(trained.to_str())["model"]
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in state["merges"]]
    vocab, merges = grown_bpe(state["vocab"], merges, arch.regular_tokens)
    core = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=arch.split is not None))
    if arch.name == "qwen2":
        core.normalizer = normalizers.NFC()
    core.pre_tokenizer = pre_tokenizer()
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(arch.specials)
    byte_level = processors.ByteLevel(trim_offsets=False)
    if arch.add_bos:
        bos_id = core.token_to_id(arch.bos)
        core.post_processor = processors.Sequence([byte_level, processors.TemplateProcessing(
            single=f"{arch.bos}:0 $A:0", pair=f"{arch.bos}:0 $A:0 {arch.bos}:1 $B:1", special_tokens=[(arch.bos, bos_id)])])
    else:
        core.post_processor = byte_level
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=arch.bos, eos_token=arch.eos,
                                        pad_token=arch.pad, model_max_length=2048)
    if arch.name == "gpt2":
        tokenizer.unk_token = arch.eos
    tokenizer.chat_template = arch.chat_template
    if len(tokenizer) != arch.regular_tokens + len(arch.specials):
        raise ValueError(f"{arch.name}: built {len(tokenizer)} tokens, not {arch.regular_tokens} + {len(arch.specials)}")
    return tokenizer


def build_model(arch: Architecture, tokenizer: PreTrainedTokenizerFast, seed: int = 0) -> PreTrainedModel:
    """`arch`'s model class at a tiny size (2 layers, width 64, 4 heads), randomly initialised (seeded)."""
    torch.manual_seed(seed)
    ids = {"bos_token_id": tokenizer.bos_token_id if arch.bos else None,
           "eos_token_id": tokenizer.convert_tokens_to_ids(arch.stop_tokens[0])}
    if arch.name == "llama":  # Llama 3 unties its output layer and groups its KV heads
        config = LlamaConfig(vocab_size=arch.embedding_rows, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=1024, rope_theta=500_000.0, tie_word_embeddings=False, **ids)
        return LlamaForCausalLM(config)
    if arch.name == "qwen2":  # Qwen2-0.5B ties it, groups KV heads and biases q, k, v
        config = Qwen2Config(vocab_size=arch.embedding_rows, hidden_size=64, intermediate_size=128,
                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                             max_position_embeddings=1024, tie_word_embeddings=True, **ids)
        return Qwen2ForCausalLM(config)
    config = GPT2Config(vocab_size=arch.embedding_rows, n_embd=64, n_layer=2, n_head=4, n_positions=1024, **ids)
    return GPT2LMHeadModel(config)


def save_hub_layout(arch: Architecture, path: Path, dtype: torch.dtype = torch.bfloat16) -> Path:
    """`arch`'s model directory at `path` as the hub has it: weights in `dtype` (bfloat16, as the hub's Llama 3
    and Qwen2 are; GPT-2 float32), the generation config with its sampling defaults and stop tokens, the tokenizer."""
    tokenizer = build_tokenizer(arch)
    model = build_model(arch, tokenizer)
    if arch.name != "gpt2":
        model = model.to(dtype)
    model.generation_config = GenerationConfig(
        bos_token_id=model.config.bos_token_id, eos_token_id=tokenizer.convert_tokens_to_ids(arch.stop_tokens),
        pad_token_id=tokenizer.pad_token_id, **arch.sampling)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    config = json.loads((path / "tokenizer_config.json").read_text())
    (path / "tokenizer_config.json").write_text(json.dumps(config | {"tokenizer_class": arch.tokenizer_class}, indent=2))
    return path
