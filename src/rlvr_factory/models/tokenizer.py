"""The embedded byte-level tokenizer (a real `tokenizers` BPE with no merges, one token per byte) and the
chat templates a run can give any tokenizer (`model.chat_template`)."""

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


# For a base model without a chat template (GPT-2): the prompt and each observation on a line of their own,
# each assistant turn ended by the tokenizer's EOS. Append-only, and it needs no new tokens.
PLAIN_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}{{ message['content'] + eos_token }}"
    "{% else %}{{ message['content'] + '\n' }}{% endif %}"
    "{% endfor %}"
)
NAMED_TEMPLATES = {"plain": PLAIN_TEMPLATE, "chatml": CHAT_TEMPLATE}


def chat_template(setting: str) -> str:
    """The Jinja chat template `model.chat_template` names: `plain`, `chatml` (needs the ChatML tokens in
    the vocabulary) or a template's own text."""
    if setting in NAMED_TEMPLATES:
        return NAMED_TEMPLATES[setting]
    if "{{" not in setting and "{%" not in setting:
        raise ValueError(f"model.chat_template is {setting!r}: give one of {sorted(NAMED_TEMPLATES)}, a Jinja "
                         "template's text, or null for the tokenizer's own")
    return setting


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
