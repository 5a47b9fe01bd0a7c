"""The policy dataset: a policy on disk as an HF model directory, loaded back as it was trained."""

import torch

from rlvr_factory.datasets import PolicyDataset
from rlvr_factory.models.policy import Policy
from tests.conftest import make_tiny_policy


def test_a_policy_loads_in_the_dtype_it_was_saved_in(tmp_path):
    for dtype in (torch.bfloat16, torch.float32):
        policy = make_tiny_policy()
        dataset = PolicyDataset(str(tmp_path / str(dtype)), device="cpu")
        dataset.save(Policy(policy.model.to(dtype), policy.tokenizer))
        assert dataset.load().model.dtype == dtype


def test_a_named_dtype_casts_on_load(tmp_path):
    policy = make_tiny_policy()
    PolicyDataset(str(tmp_path / "p"), device="cpu").save(Policy(policy.model.to(torch.bfloat16), policy.tokenizer))
    assert PolicyDataset(str(tmp_path / "p"), device="cpu", dtype="float32").load().model.dtype == torch.float32
