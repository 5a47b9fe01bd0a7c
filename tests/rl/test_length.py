"""DAPO's soft overlong penalty and the truncated-completion mask."""

import pytest
import torch

from rlvr_factory.rl.length import mask_truncated, overlong_penalty


@pytest.mark.parametrize(
    ("length", "expected"),
    [(10, 0.0), (30, 0.0), (31, -0.1), (35, -0.5), (40, -1.0), (41, -1.0), (100, -1.0)],
)
def test_overlong_penalty_ramps_over_the_last_cache_length_tokens(length, expected):
    # L_max = 40, L_cache = 10: free up to 30, then (30 - |y|) / 10, then -1 beyond 40
    assert overlong_penalty(torch.tensor([length]), 40, 10).item() == pytest.approx(expected)


def test_overlong_penalty_refuses_a_cache_longer_than_the_budget():
    with pytest.raises(ValueError, match="cache_length"):
        overlong_penalty(torch.tensor([5]), 10, 11)
    with pytest.raises(ValueError, match="cache_length"):
        overlong_penalty(torch.tensor([5]), 10, 0)


def test_truncated_rows_are_masked_and_the_others_kept():
    mask = torch.tensor([[0, 1, 1], [0, 1, 0], [1, 1, 1]])
    masked = mask_truncated(mask, torch.tensor([False, True, False]))
    assert masked.tolist() == [[0, 1, 1], [0, 0, 0], [1, 1, 1]]
    assert masked.dtype == mask.dtype
