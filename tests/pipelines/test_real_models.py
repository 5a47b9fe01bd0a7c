"""The real-model path: `kedro run --pipeline=rlvr` with `model.name_or_path` at local Llama 3, Qwen2 and
GPT-2 directories (the hub's layout, real vocabularies and chat templates, random tiny weights) through
SFT, one RL round and the evaluation, with and without LoRA, in bfloat16 where the CPU has it."""

from __future__ import annotations

import json

import pytest
import torch
from mlflow import MlflowClient
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr_factory.models.tokenizer import chat_template as chat_template_text
from rlvr_factory.training.sft import encode_prompts
from tests.models.hf_fixtures import ARCHITECTURES, bf16_supported, save_hub_layout
from tests.pipelines.conftest import TINY_PARAMS, make_project, round_table, run_pipeline, tracking_uri
from tests.pipelines.test_rl_options import merged

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")]

# Smaller than TINY_PARAMS: every forward pass of these models computes logits over 50-152k tokens.
SMALL = {
    "domain": {"splits": {"train": 40, "validation": 4, "test": 4}},
    "verify": {"workers": 1},
    "sft": {"num_examples": 8, "train": {"steps": 2, "batch_size": 4, "warmup_steps": 1, "lr": 1e-2}},
    "rl": {"rounds": 1, "prompts_per_round": 2, "samples_per_prompt": 2,
           "update": {"minibatch_size": 4, "lr": 1e-2, "entropy_coef": 0.01},  # a gradient though every reward is 0
           "sampling": {"max_new_tokens": 8}},
    "evaluate": {"k": 2, "validation_size": 2, "sampling": {"max_new_tokens": 8}},
}
BF16 = pytest.mark.skipif(not bf16_supported(), reason="this CPU has no native bfloat16 (oneDNN: no AVX-512 "
                                                       "BW/VL/DQ, AVX512_BF16 or AMX): bfloat16 would run emulated")
# (architecture, model.dtype, model.lora, model.chat_template)
CASES = [
    pytest.param("llama", "float32", None, None, id="llama3-float32"),
    pytest.param("qwen2", "bfloat16", {"enabled": True, "r": 4}, None, id="qwen2-bfloat16-lora", marks=BF16),
    pytest.param("gpt2", "float32", {"enabled": True, "r": 4, "target_modules": "auto"}, "plain",
                 id="gpt2-plain-template-lora-auto"),
]


@pytest.fixture(scope="module")
def hub_models(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hub_models")
    return {name: save_hub_layout(arch, root / name) for name, arch in ARCHITECTURES.items()}


def model_params(path, dtype: str, lora: dict | None, chat_template: str | None) -> dict:
    """`model.*` as a user sets them for a Hugging Face model."""
    model = {"name_or_path": str(path), "dtype": dtype, "device": "cpu", "chat_template": chat_template}
    return model | ({"lora": lora} if lora else {})


@pytest.mark.parametrize("name, dtype, lora, chat_template", CASES)
def test_sft_one_rl_round_and_evaluation_run_on_the_model(tmp_path, hub_models, name, dtype, lora, chat_template):
    arch = ARCHITECTURES[name]
    project = make_project(tmp_path / "project")
    run_pipeline(project, merged(TINY_PARAMS, SMALL | {"model": model_params(hub_models[name], dtype, lora,
                                                                             chat_template)}))
    report = json.loads((project / "data/08_reporting/metrics.json").read_text())
    for stage in ("sft", "rl"):
        assert report[stage]["num_tasks"] == SMALL["domain"]["splits"]["test"]
    assert [r["round"] for r in report["round_history"]] == [0]

    # the rollouts were prompted through the model's chat template and sampled within the budget
    rollouts = round_table(project / "data/07_model_output/rollouts/round_000.parquet")
    source = AutoTokenizer.from_pretrained(hub_models[name])
    if chat_template:
        source.chat_template = chat_template_text(chat_template)
    expected = [len(ids) for ids in encode_prompts(source, list(rollouts["prompt"]))]
    assert rollouts["prompt_tokens"].tolist() == expected
    assert rollouts["completion_tokens"].between(1, SMALL["rl"]["sampling"]["max_new_tokens"]).all()

    # both policies are ordinary HF directories of the same architecture, vocabulary and dtype
    sft_dir, rl_dir = project / "data/06_models/sft_policy", project / "data/06_models/rl_policy"
    sft = AutoModelForCausalLM.from_pretrained(sft_dir, dtype="auto")
    rl = AutoModelForCausalLM.from_pretrained(rl_dir, dtype="auto")
    assert rl.config.model_type == name and rl.get_input_embeddings().num_embeddings == arch.embedding_rows
    assert rl.dtype == getattr(torch, dtype)
    tokenizer = AutoTokenizer.from_pretrained(rl_dir)
    assert len(tokenizer) == len(source) and tokenizer.eos_token == arch.eos
    assert tokenizer.chat_template == AutoTokenizer.from_pretrained(sft_dir).chat_template
    assert json.loads((rl_dir / "generation_config.json").read_text()) == json.loads(
        (hub_models[name] / "generation_config.json").read_text())  # the hub's defaults stay for users

    # the RL round trained: every weight without LoRA can move, with LoRA only the adapted layers (merged)
    sft_weights, rl_weights = sft.state_dict(), rl.state_dict()
    assert set(rl_weights) == set(sft_weights)
    changed = {k for k in rl_weights if not torch.equal(rl_weights[k], sft_weights[k])}
    assert changed
    if lora:
        adapted = ("c_attn.weight",) if name == "gpt2" else ("q_proj.weight", "k_proj.weight", "v_proj.weight",
                                                             "o_proj.weight")
        assert all(k.endswith(adapted) for k in changed), changed

    client = MlflowClient(tracking_uri=tracking_uri(project))
    (run,) = client.search_runs([client.get_experiment_by_name("rlvr_factory").experiment_id])
    assert run.info.status == "FINISHED"
    assert run.data.params["model.name_or_path"] == str(hub_models[name])


def test_a_model_without_a_chat_template_fails_before_the_first_node(tmp_path, hub_models):
    project = make_project(tmp_path / "project")
    with pytest.raises(ValueError, match="has no chat template.*set model.chat_template \\(plain"):
        run_pipeline(project, merged(TINY_PARAMS, {"model": model_params(hub_models["gpt2"], "float32", None, None)}))
    assert not (project / "data").exists()
