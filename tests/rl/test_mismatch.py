"""The engine/trainer log-prob gap and its truncated importance weights."""

import math

import pytest
import torch

from rlvr_factory.rl.mismatch import logprob_mismatch, truncated_importance_weights


def test_the_mismatch_counts_only_masked_tokens():
    trainer = torch.tensor([[-1.0, -2.0, -3.0]])
    sampling = torch.tensor([[-1.5, -2.0, -9.0]])
    gap = logprob_mismatch(trainer, sampling, torch.tensor([[1, 1, 0]]))
    assert gap["abs_mean"] == pytest.approx(0.25)
    assert gap["abs_max"] == pytest.approx(0.5)
    # k3 on the first token: r = exp(trainer - sampling) = e^0.5; (r - 1) - log r; the second token adds 0.
    assert gap["kl"] == pytest.approx((math.exp(0.5) - 1 - 0.5) / 2)


def test_identical_log_probs_have_no_mismatch():
    logp = torch.randn(2, 5)
    gap = logprob_mismatch(logp, logp.clone(), torch.ones(2, 5))
    assert gap == {"abs_mean": 0.0, "abs_max": 0.0, "kl": 0.0}


def test_tis_weights_are_the_ratio_capped_and_detached():
    trainer = torch.tensor([-1.0, -1.0, -1.0], requires_grad=True)
    sampling = torch.tensor([-1.0, -1.0 + math.log(2), -1.0 - math.log(10)])
    weights = truncated_importance_weights(trainer, sampling, cap=3.0)
    assert weights.tolist() == pytest.approx([1.0, 0.5, 3.0])
    assert not weights.requires_grad


def test_a_non_positive_cap_is_refused():
    with pytest.raises(ValueError, match="cap must be positive"):
        truncated_importance_weights(torch.zeros(1), torch.zeros(1), cap=0.0)
