"""Chat templates written for the tests, on byte-level tokenizers with their own special tokens."""

from __future__ import annotations

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
LLAMA3 = (
    "{{ bos_token }}{% for m in messages %}"
    "{{ '<|start_header_id|>' + m['role'] + '<|end_header_id|>\n\n' + m['content'] | trim + '<|eot_id|>' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# Like Qwen3's: the reasoning of every assistant message but the last is dropped.
STRIPS_THINKING = (
    "{% set ns = namespace(last=-1) %}{% for m in messages %}{% if m['role'] == 'assistant' %}"
    "{% set ns.last = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}{% set content = m['content'] %}"
    "{% if m['role'] == 'assistant' and loop.index0 < ns.last %}{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + content + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# Ends assistant messages with a marker that is not the end-of-turn token the model samples.
WRONG_END = CHATML.replace("'<|im_end|>' + '\n'", "'\n\n'")
# Only user and assistant messages, as some templates insist.
NO_TOOL_ROLE = (
    "{% for m in messages %}{% if m['role'] not in ['user', 'assistant'] %}"
    "{{ raise_exception('roles must be user or assistant') }}{% endif %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

CHATML_SPECIALS = {"pad": "<|pad|>", "bos": "<|bos|>", "eos": "<|im_end|>", "extra": ["<|im_start|>"]}
LLAMA3_SPECIALS = {"pad": "<|pad|>", "bos": "<|begin_of_text|>", "eos": "<|eot_id|>",
                   "extra": ["<|start_header_id|>", "<|end_header_id|>"]}


def tokenizer_with(template: str, specials: dict = CHATML_SPECIALS, name: str = "test-tokenizer") -> PreTrainedTokenizerFast:
    """A byte-level tokenizer (no merges) with these special tokens and chat template."""
    tokens = [specials["pad"], specials["bos"], specials["eos"], *specials["extra"]]
    vocab = {t: i for i, t in enumerate(tokens + sorted(pre_tokenizers.ByteLevel.alphabet()))}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens(tokens)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=specials["bos"], eos_token=specials["eos"],
                                        pad_token=specials["pad"], name_or_path=name)
    tokenizer.chat_template = template
    return tokenizer
