"""The embedded byte-level tokenizer and its ChatML chat template."""

import pytest
from transformers import AutoTokenizer

from rlvr_factory.models.tokenizer import BOS, EOS, IM_START, PAD, build_byte_tokenizer

TEXTS = ["Compute 37+5*6", "héllo wörld ✓ 🎉", "tabs\tand\nnewlines  double  spaces ", "", "\x00\x7f\xff"]
MESSAGES = [{"role": "user", "content": "Compute 2+2"}]


@pytest.mark.parametrize("text", TEXTS)
def test_any_text_round_trips_one_token_per_utf8_byte(byte_tokenizer, text):
    ids = byte_tokenizer(text)["input_ids"]
    assert len(ids) == len(text.encode("utf-8"))
    assert byte_tokenizer.decode(ids) == text


def test_the_vocabulary_is_four_specials_and_256_bytes(byte_tokenizer):
    assert len(byte_tokenizer) == 260
    assert byte_tokenizer.convert_tokens_to_ids([PAD, BOS, EOS, IM_START]) == [0, 1, 2, 3]


def test_pad_bos_and_eos_ids(byte_tokenizer):
    assert byte_tokenizer.pad_token_id == 0
    assert byte_tokenizer.bos_token_id == 1
    assert byte_tokenizer.eos_token_id == 2
    assert byte_tokenizer.eos_token == "<|im_end|>"


def test_encoding_adds_no_special_tokens(byte_tokenizer):
    assert byte_tokenizer("ab")["input_ids"] == byte_tokenizer("ab", add_special_tokens=False)["input_ids"]
    assert len(byte_tokenizer("ab")["input_ids"]) == 2


def test_special_tokens_in_text_are_single_tokens(byte_tokenizer):
    ids = byte_tokenizer(f"a{EOS}b")["input_ids"]
    assert len(ids) == 3 and ids[1] == byte_tokenizer.eos_token_id


def test_decoding_can_skip_special_tokens(byte_tokenizer):
    ids = byte_tokenizer(f"{IM_START}42{EOS}")["input_ids"] + [byte_tokenizer.pad_token_id]
    assert byte_tokenizer.decode(ids, skip_special_tokens=True) == "42"


def test_chat_template_renders_the_user_turn_and_the_generation_prompt(byte_tokenizer):
    rendered = byte_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|im_start|>user\nCompute 2+2<|im_end|>\n<|im_start|>assistant\n"


def test_chat_template_without_generation_prompt_ends_after_the_last_turn(byte_tokenizer):
    messages = MESSAGES + [{"role": "assistant", "content": "4"}]
    rendered = byte_tokenizer.apply_chat_template(messages, add_generation_prompt=False, tokenize=False)
    assert rendered == "<|im_start|>user\nCompute 2+2<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n"


def test_tokenised_chat_template_starts_with_im_start_and_has_no_system_turn(byte_tokenizer):
    ids = byte_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)["input_ids"]
    assert ids[0] == byte_tokenizer.convert_tokens_to_ids(IM_START)
    assert ids.count(byte_tokenizer.convert_tokens_to_ids(IM_START)) == 2
    assert byte_tokenizer.decode(ids) == "<|im_start|>user\nCompute 2+2<|im_end|>\n<|im_start|>assistant\n"


def test_a_saved_tokenizer_reloads_with_autotokenizer_unchanged(byte_tokenizer, tmp_path):
    byte_tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    for text in TEXTS + [f"x{EOS}{IM_START}y"]:
        assert reloaded(text)["input_ids"] == byte_tokenizer(text)["input_ids"]
        assert reloaded.decode(byte_tokenizer(text)["input_ids"]) == byte_tokenizer.decode(
            byte_tokenizer(text)["input_ids"]
        )
    assert (reloaded.pad_token_id, reloaded.bos_token_id, reloaded.eos_token_id) == (0, 1, 2)
    assert reloaded.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False) == (
        byte_tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    )


def test_two_builds_are_identical(byte_tokenizer):
    other = build_byte_tokenizer()
    assert other.get_vocab() == byte_tokenizer.get_vocab()
    assert other.chat_template == byte_tokenizer.chat_template
