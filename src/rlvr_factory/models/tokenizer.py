"""The embedded byte-level tokenizer: a real `tokenizers` BPE with no merges, one token per byte."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

BOS, EOS, PAD = "<|bos|>", "<|im_end|>", "<|pad|>"
IM_START = "<|im_start|>"
SPECIAL_TOKENS = [PAD, BOS, EOS, IM_START]

# ChatML, without a default system message, so prompts stay short for the tiny model.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (256 byte tokens + ChatML specials) with a chat template."""
    byte_chars = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS + byte_chars)}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(SPECIAL_TOKENS)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=BOS, eos_token=EOS, pad_token=PAD
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
