"""Supervised fine-tuning: next-token loss on completion tokens only."""

import copy

import pytest
import torch
import torch.nn.functional as F

from rlvr_factory.rollout.chat import ChatFormat
from rlvr_factory.training.sft import (SFTConfig, encode_chat_examples, encode_demonstrations, encode_prompts,
                                      supervised_train)


def quiet(**kwargs) -> SFTConfig:
    return SFTConfig(**{"steps": 1, "batch_size": 1, "warmup_steps": 0, "lr": 1e-3, **kwargs})


def mean_nll(model, prompt: list[int], completion: list[int], first_target: int) -> float:
    """Mean negative log-likelihood of tokens[first_target:] of prompt + completion."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        log_probs = F.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    targets = ids[0, 1:]
    nll = -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    return float(nll[first_target - 1 :].mean())


def test_loss_decreases_on_a_small_repeated_dataset(tiny_policy):
    examples = encode_chat_examples(tiny_policy.tokenizer, ["Compute 1+1", "Compute 2+3"], ["\\boxed{2}", "\\boxed{5}"])
    losses = supervised_train(tiny_policy, examples * 4, quiet(steps=60, batch_size=4, lr=3e-3, warmup_steps=3))
    assert len(losses) == 60
    assert sum(losses[-5:]) / 5 < 0.5 * sum(losses[:5]) / 5


def test_the_loss_covers_completion_tokens_only(tiny_policy):
    prompt = tiny_policy.tokenizer("Compute 12+30")["input_ids"]
    completion = tiny_policy.tokenizer("42")["input_ids"] + [tiny_policy.tokenizer.eos_token_id]
    initial = copy.deepcopy(tiny_policy.model)
    (loss_at_step_0,) = supervised_train(tiny_policy, [(prompt, completion)], quiet())
    completion_only = mean_nll(initial, prompt, completion, first_target=len(prompt))
    whole_sequence = mean_nll(initial, prompt, completion, first_target=1)
    assert loss_at_step_0 == pytest.approx(completion_only, rel=1e-4)
    assert abs(completion_only - whole_sequence) > 1e-3  # the two would be told apart


def test_a_padded_batch_averages_over_the_completion_tokens_of_all_rows(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    prompt = tokenizer("Compute 3+4")["input_ids"]
    short = tokenizer("7")["input_ids"] + [tokenizer.eos_token_id]
    long = tokenizer("3+4=7")["input_ids"] + [tokenizer.eos_token_id]
    initial = copy.deepcopy(tiny_policy.model)
    (loss,) = supervised_train(tiny_policy, [(prompt, short), (prompt, long)], quiet(batch_size=2))
    # a token mean (not a mean of row means) over 2 + 6 completion tokens; padding ignored
    nll_short = mean_nll(initial, prompt, short, first_target=len(prompt))
    nll_long = mean_nll(initial, prompt, long, first_target=len(prompt))
    assert loss == pytest.approx((2 * nll_short + 6 * nll_long) / 8, rel=1e-4)


def test_an_empty_prompt_trains_on_the_whole_sequence(tiny_policy):
    sequence = tiny_policy.tokenizer("Compute 1+2\n1+2=3")["input_ids"]
    bos = [tiny_policy.tokenizer.bos_token_id]
    initial = copy.deepcopy(tiny_policy.model)
    (loss,) = supervised_train(tiny_policy, [(bos, sequence)], quiet())
    assert loss == pytest.approx(mean_nll(initial, bos, sequence, first_target=1), rel=1e-4)


def test_training_changes_the_weights_and_leaves_eval_mode(tiny_policy):
    before = tiny_policy.model.lm_head.weight.detach().clone()
    examples = encode_chat_examples(tiny_policy.tokenizer, ["Compute 1+1"], ["2"])
    supervised_train(tiny_policy, examples, quiet(steps=2))
    assert not torch.equal(tiny_policy.model.lm_head.weight, before)
    assert not tiny_policy.model.training


def test_no_examples_raises(tiny_policy):
    with pytest.raises(ValueError, match="at least one example"):
        supervised_train(tiny_policy, [], quiet())


def test_chat_examples_are_the_templated_prompt_and_the_completion_ending_in_eos(byte_tokenizer):
    ((prompt, completion),) = encode_chat_examples(byte_tokenizer, ["Compute 1+1"], ["\\boxed{2}"])
    assert byte_tokenizer.decode(prompt) == "<|im_start|>user\nCompute 1+1<|im_end|>\n<|im_start|>assistant\n"
    assert completion[-1] == byte_tokenizer.eos_token_id
    assert byte_tokenizer.decode(completion[:-1]) == "\\boxed{2}"
    assert encode_prompts(byte_tokenizer, ["Compute 1+1"]) == [prompt]


EPISODE = ["<calc>2*3</calc>", "<result>5</result>", "\\boxed{6}"]  # a wrong first action, its feedback, the answer


def masked_nll(model, prompt: list[int], completion: list[int], mask: list[int]) -> float:
    """Mean negative log-likelihood of the completion tokens whose mask is 1."""
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        log_probs = F.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    nll = -log_probs.gather(-1, ids[0, 1:].unsqueeze(-1)).squeeze(-1)[len(prompt) - 1 :]
    kept = torch.tensor(mask, dtype=torch.bool)
    return float(nll[kept].mean())


def test_action_loss_last_masks_every_action_but_the_last(tiny_policy):
    tokenizer = tiny_policy.tokenizer
    (every,) = encode_demonstrations(tokenizer, ["Compute 2*3"], [EPISODE])
    (last,) = encode_demonstrations(tokenizer, ["Compute 2*3"], [EPISODE], action_loss="last")
    chat = ChatFormat(tokenizer, "tool")
    first, observation, answer = (len(chat.action_ids(EPISODE[0])), len(chat.observation_ids(EPISODE[1])),
                                  len(chat.action_ids(EPISODE[2])))
    assert every[:2] == last[:2]  # the same tokens; only the loss mask differs
    assert every[2] == [1] * first + [0] * observation + [1] * answer
    assert last[2] == [0] * (first + observation) + [1] * answer
    # a single-turn demonstration has one action, trained either way
    assert encode_demonstrations(tokenizer, ["p"], [["\\boxed{1}"]], action_loss="last") == \
        encode_demonstrations(tokenizer, ["p"], [["\\boxed{1}"]])


def test_action_loss_last_trains_on_the_last_action_alone(tiny_policy):
    (example,) = encode_demonstrations(tiny_policy.tokenizer, ["Compute 2*3"], [EPISODE], action_loss="last")
    ((_, _, every),) = encode_demonstrations(tiny_policy.tokenizer, ["Compute 2*3"], [EPISODE])
    prompt, completion, mask = example
    initial = copy.deepcopy(tiny_policy.model)
    (loss_at_step_0,) = supervised_train(tiny_policy, [example], quiet())
    assert loss_at_step_0 == pytest.approx(masked_nll(initial, prompt, completion, mask), rel=1e-4)
    assert loss_at_step_0 != pytest.approx(masked_nll(initial, prompt, completion, every), rel=1e-3)  # both actions


def test_action_loss_refuses_other_values(tiny_policy):
    with pytest.raises(ValueError, match="action_loss"):
        encode_demonstrations(tiny_policy.tokenizer, ["p"], [EPISODE], action_loss="first")
