"""Saving and loading policies as ordinary Hugging Face model directories."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM

from rlvr_factory.models.policy import OPTIMIZER_FILE, STATE_FILE, Policy, load_policy, resolve_device, save_policy

IDS = torch.tensor([[1, 40, 41, 42, 43, 2]])


def logits_of(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=IDS).logits


def take_an_optimizer_step(policy: Policy) -> None:
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=1e-3)
    policy.model(input_ids=IDS, labels=IDS).loss.backward()
    optimizer.step()
    policy.optimizer_state = optimizer.state_dict()


def test_a_saved_policy_loads_with_identical_logits(tiny_policy, tmp_path):
    save_policy(tiny_policy, tmp_path / "policy")
    loaded = load_policy(tmp_path / "policy", device="cpu")
    assert torch.equal(logits_of(loaded.model), logits_of(tiny_policy.model))


def test_the_loaded_tokenizer_encodes_like_the_saved_one(tiny_policy, tmp_path):
    save_policy(tiny_policy, tmp_path / "policy")
    loaded = load_policy(tmp_path / "policy", device="cpu")
    text = "Compute 3*4 ✓"
    assert loaded.tokenizer(text)["input_ids"] == tiny_policy.tokenizer(text)["input_ids"]
    assert loaded.tokenizer.pad_token_id == tiny_policy.tokenizer.pad_token_id
    assert loaded.tokenizer.chat_template == tiny_policy.tokenizer.chat_template


def test_the_version_is_saved_and_restored(tiny_policy, tmp_path):
    tiny_policy.version = 7
    save_policy(tiny_policy, tmp_path / "policy")
    assert json.loads((tmp_path / "policy" / STATE_FILE).read_text()) == {"version": 7}
    assert load_policy(tmp_path / "policy", device="cpu").version == 7


def test_a_directory_without_rl_state_loads_as_version_zero(tiny_policy, tmp_path):
    tiny_policy.version = 3
    save_policy(tiny_policy, tmp_path / "policy")
    (tmp_path / "policy" / STATE_FILE).unlink()
    assert load_policy(tmp_path / "policy", device="cpu").version == 0


def test_the_optimizer_state_is_restored_when_asked_for(tiny_policy, tmp_path):
    take_an_optimizer_step(tiny_policy)
    save_policy(tiny_policy, tmp_path / "policy", with_optimizer=True)
    loaded = load_policy(tmp_path / "policy", device="cpu", with_optimizer=True)
    saved = tiny_policy.optimizer_state
    assert loaded.optimizer_state["param_groups"] == saved["param_groups"]
    assert loaded.optimizer_state["state"].keys() == saved["state"].keys()
    for key, moments in saved["state"].items():
        for name, value in moments.items():
            assert torch.equal(loaded.optimizer_state["state"][key][name], value)


def test_the_optimizer_state_is_not_loaded_unless_asked_for(tiny_policy, tmp_path):
    take_an_optimizer_step(tiny_policy)
    save_policy(tiny_policy, tmp_path / "policy", with_optimizer=True)
    assert (tmp_path / "policy" / OPTIMIZER_FILE).exists()
    assert load_policy(tmp_path / "policy", device="cpu").optimizer_state is None


def test_the_optimizer_state_is_not_saved_unless_asked_for(tiny_policy, tmp_path):
    take_an_optimizer_step(tiny_policy)
    save_policy(tiny_policy, tmp_path / "policy")
    assert not (tmp_path / "policy" / OPTIMIZER_FILE).exists()
    assert load_policy(tmp_path / "policy", device="cpu", with_optimizer=True).optimizer_state is None


def test_a_saved_policy_is_a_plain_hf_model_directory(tiny_policy, tmp_path):
    save_policy(tiny_policy, tmp_path / "policy")
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "policy")
    assert torch.equal(logits_of(model), logits_of(tiny_policy.model))


def test_saving_over_an_existing_policy_replaces_it_entirely(tiny_policy, tmp_path):
    take_an_optimizer_step(tiny_policy)
    save_policy(tiny_policy, tmp_path / "policy", with_optimizer=True)
    (tmp_path / "policy" / "stale.txt").write_text("left from an older save")
    tiny_policy.version = 5
    save_policy(tiny_policy, tmp_path / "policy")
    assert not (tmp_path / "policy" / OPTIMIZER_FILE).exists()
    assert not (tmp_path / "policy" / "stale.txt").exists()
    assert load_policy(tmp_path / "policy", device="cpu").version == 5


def test_saving_leaves_no_staging_directory_behind(tiny_policy, tmp_path):
    save_policy(tiny_policy, tmp_path / "policy")
    save_policy(tiny_policy, tmp_path / "policy")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["policy"]


def test_save_creates_missing_parent_directories(tiny_policy, tmp_path):
    target = tmp_path / "a" / "b" / "policy"
    save_policy(tiny_policy, target)
    assert (target / "config.json").exists()


def test_load_policy_puts_the_model_on_the_requested_device_and_dtype(tiny_policy, tmp_path):
    save_policy(tiny_policy, tmp_path / "policy")
    loaded = load_policy(tmp_path / "policy", device="cpu", dtype="bfloat16")
    assert loaded.device == torch.device("cpu")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16


def test_loading_a_missing_absolute_path_raises_a_helpful_error(tmp_path):
    missing = tmp_path / "no-such-model"
    with pytest.raises(FileNotFoundError, match="no model directory at .*no-such-model.*base_model"):
        load_policy(missing, device="cpu")


def test_loading_a_missing_relative_path_raises_a_helpful_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="model.name_or_path"):
        load_policy("./models/missing", device="cpu")


def test_auto_device_is_the_cpu_without_a_gpu_and_explicit_devices_pass_through():
    assert resolve_device("auto") == ("cuda" if torch.cuda.is_available() else "cpu")
    assert resolve_device("cpu") == "cpu"
