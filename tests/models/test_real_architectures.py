"""Loading real architectures (Llama 3, Qwen2, GPT-2 in their hub layout, real vocabularies) as policies:
dtype, pad and end-of-turn tokens, chat templates, LoRA targets, and sampling that ignores the hub's
generation defaults."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
import torch.nn.functional as F

from rlvr_factory.models.lora import LoraSettings, with_lora
from rlvr_factory.models.policy import has_chat_template, load_policy
from rlvr_factory.models.tokenizer import PLAIN_TEMPLATE
from rlvr_factory.rollout.chat import ChatFormat
from rlvr_factory.rollout.engine import Request
from rlvr_factory.rollout.hf import SamplingConfig, TransformersEngine
from rlvr_factory.training.sft import encode_prompts
from tests.models.hf_fixtures import ARCHITECTURES, bf16_supported, save_hub_layout

NAMES = sorted(ARCHITECTURES)


@pytest.fixture(scope="session")
def hub_models(tmp_path_factory) -> dict:
    """One model directory per architecture, as the hub lays it out."""
    root = tmp_path_factory.mktemp("hub_models")
    return {name: save_hub_layout(arch, root / name) for name, arch in ARCHITECTURES.items()}


def test_each_model_has_the_real_vocabulary_and_special_tokens(hub_models):
    for name, path in hub_models.items():
        arch = ARCHITECTURES[name]
        policy = load_policy(path, device="cpu")
        assert policy.model.config.model_type == name
        assert policy.model.get_input_embeddings().num_embeddings == arch.embedding_rows
        assert len(policy.tokenizer) == arch.regular_tokens + len(arch.specials)
        assert policy.tokenizer.eos_token == arch.eos
        assert policy.tokenizer.convert_ids_to_tokens(arch.regular_tokens) == arch.specials[0]


def test_a_tokenizer_without_a_pad_token_pads_with_its_end_of_turn_token(hub_models):
    assert load_policy(hub_models["llama"], device="cpu").tokenizer.pad_token == "<|eot_id|>"
    assert load_policy(hub_models["gpt2"], device="cpu").tokenizer.pad_token == "<|endoftext|>"
    assert load_policy(hub_models["qwen2"], device="cpu").tokenizer.pad_token == "<|endoftext|>"  # its own


def test_dtype_auto_keeps_the_checkpoints_dtype_and_a_named_one_casts(hub_models):
    assert load_policy(hub_models["qwen2"], device="cpu", dtype="auto").model.dtype == torch.bfloat16
    assert load_policy(hub_models["qwen2"], device="cpu", dtype="float32").model.dtype == torch.float32
    with pytest.raises(ValueError, match="model.dtype is 'fp8'; use one of auto, float32"):
        load_policy(hub_models["qwen2"], device="cpu", dtype="fp8")


@pytest.mark.parametrize("name", ["llama", "qwen2"])
def test_the_hub_chat_templates_are_append_only_and_end_turns_with_eos(hub_models, name):
    chat = ChatFormat(load_policy(hub_models[name], device="cpu").tokenizer)
    chat.check_append_only()
    assert chat.action_ids("42")[-1] == chat.tokenizer.convert_tokens_to_ids(ARCHITECTURES[name].eos)


def test_llama3_prompts_start_with_one_bos_and_qwen2_prompts_with_the_default_system_message(hub_models):
    llama = load_policy(hub_models["llama"], device="cpu").tokenizer
    (ids,) = encode_prompts(llama, ["Compute 1+2"])
    assert ids.count(llama.bos_token_id) == 1 and ids[0] == llama.bos_token_id
    qwen = load_policy(hub_models["qwen2"], device="cpu").tokenizer
    assert qwen.decode(encode_prompts(qwen, ["Compute 1+2"])[0]).startswith(
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>")


def test_a_base_model_without_a_template_gets_the_plain_one_when_asked(hub_models):
    assert not has_chat_template(hub_models["gpt2"]) and has_chat_template(hub_models["qwen2"])
    tokenizer = load_policy(hub_models["gpt2"], device="cpu", chat_template="plain").tokenizer
    assert tokenizer.chat_template == PLAIN_TEMPLATE
    assert tokenizer.decode(encode_prompts(tokenizer, ["Compute 1+2"])[0]) == "Compute 1+2\n"
    ChatFormat(tokenizer).check_append_only()
    with pytest.raises(ValueError, match="model.chat_template is 'llama'"):
        load_policy(hub_models["gpt2"], device="cpu", chat_template="llama")


def test_a_tokenizer_larger_than_the_embedding_is_refused(hub_models, tmp_path):
    path = shutil.copytree(hub_models["gpt2"], tmp_path / "gpt2")
    policy = load_policy(path, device="cpu")
    policy.tokenizer.add_tokens(["<|new|>"])
    policy.tokenizer.save_pretrained(path)
    with pytest.raises(ValueError, match="has 50258 tokens but the model embeds only 50257"):
        load_policy(path, device="cpu")


@pytest.mark.parametrize("name, adapted", [("llama", {"q_proj", "v_proj"}), ("qwen2", {"q_proj", "v_proj"}),
                                           ("gpt2", {"c_attn"})])
def test_lora_auto_adapts_each_architectures_attention(hub_models, name, adapted):
    model = with_lora(load_policy(hub_models[name], device="cpu").model,
                      LoraSettings(enabled=True, r=2, target_modules="auto"))
    trainable = {n.split(".lora_")[0].rsplit(".", 1)[-1] for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == adapted


def test_lora_targets_missing_from_the_model_are_refused_naming_its_linear_layers(hub_models):
    with pytest.raises(ValueError, match=r"linear layers \(c_attn, c_fc, c_proj\), all-linear or auto"):
        with_lora(load_policy(hub_models["gpt2"], device="cpu").model, LoraSettings(enabled=True))


def test_sampled_log_probs_are_the_policys_own_despite_the_hubs_generation_defaults(hub_models):
    """Qwen2's generation_config.json asks for top-k 20, temperature 0.7 and a repetition penalty; the
    engine samples from the policy's distribution at the configured temperature, and records the
    log-probs the trainer computes."""
    policy = load_policy(hub_models["qwen2"], device="cpu")
    assert policy.model.generation_config.top_k == 20 and policy.model.generation_config.repetition_penalty == 1.05
    context = encode_prompts(policy.tokenizer, ["Compute 1+2"])[0]
    config = SamplingConfig(max_new_tokens=6, temperature=1.0, top_p=1.0, seed=3)
    (generation,), _ = TransformersEngine(policy, reuse_kv=False).generate([Request(context)], config)
    ids = torch.tensor([context + generation.token_ids])
    with torch.no_grad():
        logits = policy.model(input_ids=ids).logits[0, len(context) - 1 : -1].float()
    sampled = torch.tensor(generation.token_ids)[:, None]
    logp = F.log_softmax(logits, dim=-1).gather(-1, sampled).squeeze(-1)
    assert torch.allclose(torch.tensor(generation.logprobs), logp, atol=1e-4)
    ranks = (logits > logits.gather(-1, sampled)).sum(-1)
    assert (ranks >= 20).any()  # a near-uniform random model over 151k tokens samples beyond the top 20


@pytest.mark.skipif(not bf16_supported(), reason="this CPU has no native bfloat16 (oneDNN: no AVX-512 BW/VL/DQ, "
                                                   "AVX512_BF16 or AMX), where bfloat16 runs emulated and slow")
@pytest.mark.parametrize("name", NAMES)
def test_a_bfloat16_policy_samples_and_trains(hub_models, name):
    policy = load_policy(hub_models[name], device="cpu", dtype="bfloat16",
                         chat_template=None if ARCHITECTURES[name].chat_template else "plain")
    context = encode_prompts(policy.tokenizer, ["Compute 1+2"])[0]
    (generation,), _ = TransformersEngine(policy, reuse_kv=False).generate(
        [Request(context)], SamplingConfig(max_new_tokens=4, seed=0))
    assert all(lp <= 0 for lp in generation.logprobs) and len(generation.token_ids) >= 1
    ids = torch.tensor([context + generation.token_ids])
    policy.model.train()
    policy.model(input_ids=ids, labels=ids).loss.backward()
    grads = [p.grad for p in policy.model.parameters() if p.grad is not None]
    assert grads and all(g.dtype == torch.bfloat16 and torch.isfinite(g).all() for g in grads)
