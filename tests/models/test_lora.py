"""LoRA through PEFT: only the adapters train, and LoRA policies save and load."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr_factory.models.lora import ADAPTER_DIR, LoraSettings, is_lora, with_lora
from rlvr_factory.models.policy import Policy, load_policy, save_policy
from rlvr_factory.training.grpo import Sample, UpdateConfig, rl_update
from tests.conftest import make_tiny_policy
from tests.training.test_grpo import answer, chat_prompt, completion_logprob

pytestmark = pytest.mark.filterwarnings("ignore:`is_gradient_checkpointing` is deprecated:FutureWarning")

SETTINGS = LoraSettings(enabled=True, r=4, alpha=8, target_modules=["q_proj", "v_proj"])


def lora_policy() -> Policy:
    policy = make_tiny_policy()
    return Policy(with_lora(policy.model, SETTINGS), policy.tokenizer)


def contrast_samples(tokenizer) -> tuple[list[int], list[int], list[Sample]]:
    prompt = chat_prompt(tokenizer, "Compute 2+2")
    good, bad = answer(tokenizer, "4"), answer(tokenizer, "5")
    return prompt, good, [Sample("t", prompt, good, 1.0), Sample("t", prompt, bad, 0.0)]


def test_disabled_settings_leave_the_model_alone():
    model = make_tiny_policy().model
    assert with_lora(model, LoraSettings()) is model


def test_a_round_of_lora_training_changes_only_the_adapter_weights():
    policy = lora_policy()
    before = {k: v.clone() for k, v in policy.model.state_dict().items()}
    prompt, good, samples = contrast_samples(policy.tokenizer)
    good_before = completion_logprob(policy, prompt, good)
    stats = rl_update(policy, samples * 4, UpdateConfig(lr=1e-2, minibatch_size=4))
    assert stats["optimizer_steps"] == 2
    after = policy.model.state_dict()
    adapters = [k for k in after if "lora_" in k]
    assert len(adapters) == 2 * 2 * 2  # A and B, on q_proj and v_proj, in two layers
    assert all(not torch.equal(after[k], before[k]) for k in adapters if "lora_B" in k)
    assert all(torch.equal(after[k], before[k]) for k in after if "lora_" not in k)
    assert completion_logprob(policy, prompt, good) > good_before
    assert all("lora_" in n for n, p in policy.model.named_parameters() if p.requires_grad)


def test_a_final_lora_policy_is_saved_merged_as_an_ordinary_model(tmp_path):
    policy = lora_policy()
    prompt, good, samples = contrast_samples(policy.tokenizer)
    rl_update(policy, samples, UpdateConfig(lr=1e-2))
    save_policy(policy, tmp_path / "final")
    assert not (tmp_path / "final" / ADAPTER_DIR).exists()
    plain = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    reloaded = Policy(plain, policy.tokenizer)
    assert completion_logprob(reloaded, prompt, good) == pytest.approx(completion_logprob(policy, prompt, good), abs=1e-4)
    assert is_lora(policy.model)  # merging worked on a copy


def test_a_bfloat16_lora_policy_is_saved_merged_in_bfloat16(tmp_path):
    policy = make_tiny_policy()
    policy = Policy(with_lora(policy.model.to(torch.bfloat16), SETTINGS), policy.tokenizer)
    assert {p.dtype for n, p in policy.model.named_parameters() if "lora_" in n} == {torch.float32}  # PEFT's
    rl_update(policy, contrast_samples(policy.tokenizer)[2], UpdateConfig(lr=1e-2))
    save_policy(policy, tmp_path / "final")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "final", dtype="auto")
    assert {p.dtype for p in merged.parameters()} == {torch.bfloat16}


def test_a_lora_checkpoint_resumes_training_on_the_same_adapter(tmp_path):
    policy = lora_policy()
    prompt, good, samples = contrast_samples(policy.tokenizer)
    rl_update(policy, samples, UpdateConfig(lr=1e-2))
    save_policy(policy, tmp_path / "ckpt", with_optimizer=True)
    assert (tmp_path / "ckpt" / ADAPTER_DIR / "adapter_config.json").exists()
    resumed = load_policy(tmp_path / "ckpt", device="cpu", with_optimizer=True)
    assert is_lora(resumed.model)
    assert completion_logprob(resumed, prompt, good) == pytest.approx(completion_logprob(policy, prompt, good), abs=1e-5)
    # one more round from the checkpoint matches one more round in memory
    in_memory = copy.deepcopy(policy)
    rl_update(in_memory, samples, UpdateConfig(lr=1e-2))
    rl_update(resumed, samples, UpdateConfig(lr=1e-2))
    assert completion_logprob(resumed, prompt, good) == pytest.approx(completion_logprob(in_memory, prompt, good), abs=1e-5)


def test_unknown_target_modules_get_a_clear_error():
    with pytest.raises(ValueError, match="target_modules"):
        with_lora(make_tiny_policy().model, LoraSettings(enabled=True, target_modules=["c_attn"]))
