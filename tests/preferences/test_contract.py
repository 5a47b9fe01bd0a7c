"""The pair contract: a margin is NaN (none) or a finite number in [0, MAX_MARGIN], wherever a pair is made."""

import math

import pandas as pd
import pytest

from rlvr_factory.preferences import PreferencePair, pairs_from_frame, pairs_to_frame
from rlvr_factory.preferences.contract import MAX_MARGIN, finite_number, margin_value


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "1", "NaN", True, None, 10**400, [1]])
def test_finite_number_refuses_what_is_not_a_finite_real_number(value):
    with pytest.raises(ValueError, match="x: expected a finite number"):
        finite_number(value, "x")


def test_margins_are_none_or_bounded_non_negative_numbers():
    assert math.isnan(margin_value(None)) and margin_value(0) == 0.0 and margin_value(MAX_MARGIN) == MAX_MARGIN
    for bad in (-0.5, MAX_MARGIN * 2):
        with pytest.raises(ValueError, match=r"margin: .* lies outside \[0, 1e\+06\]"):
            margin_value(bad)


@pytest.mark.parametrize("margin", [float("inf"), float("-inf"), -1.0, True, "2"])
def test_a_pair_cannot_be_made_with_a_margin_that_breaks_the_contract(margin):
    with pytest.raises(ValueError, match="pair 'p': margin"):
        PreferencePair("p", "q", "a", "b", margin)


def test_a_table_holding_an_infinite_margin_is_refused_naming_the_pair():
    frame = pairs_to_frame([PreferencePair("ok", "q", "a", "b"), PreferencePair("big", "q", "a", "c", 2.0)])
    assert math.isnan(pairs_from_frame(frame)[0].margin) and pairs_from_frame(frame)[1].margin == 2.0
    frame.loc[1, "margin"] = float("inf")
    with pytest.raises(ValueError, match="pair 'big': margin"):
        pairs_from_frame(frame)
    frame.loc[1, "margin"] = -3.0
    with pytest.raises(ValueError, match="pair 'big': margin: -3 lies outside"):
        pairs_from_frame(pd.DataFrame(frame))
