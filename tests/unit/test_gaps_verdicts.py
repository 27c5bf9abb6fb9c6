"""Gaps of issue 34 in the verdict rules (`reproduction.verdicts`): each threshold on both sides, in both
directions; the bootstrap cap at its quantile boundaries (with 41 resamples the 2.5 % and 97.5 % quantiles are
the 2nd and the 40th sorted verdicts, so one outlier is inside the range and two are not); the odds-scale
sensitivity; the percentile interval against numpy over the finite values."""

import math

import numpy as np
import pytest

from sinkscope.reproduction.verdicts import (
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    capped,
    graded,
    percentile_interval,
    scaled_threshold,
    sensitive_verdict,
)


@pytest.mark.parametrize("higher", [True, False])
def test_graded_on_both_sides_of_each_threshold(higher):
    s = 1.0 if higher else -1.0
    supported_at, partly_at = 0.6 * s, 0.2 * s
    assert graded(supported_at, supported_at, partly_at, higher) == SUPPORTED  # equality reaches
    assert graded(supported_at - 1e-9 * s, supported_at, partly_at, higher) == PARTLY
    assert graded(partly_at, supported_at, partly_at, higher) == PARTLY
    assert graded(partly_at - 1e-9 * s, supported_at, partly_at, higher) == NOT_SUPPORTED
    assert graded(math.nan, supported_at, partly_at, higher) == NOT_MEASURABLE


def test_cap_at_the_lower_quantile_boundary():
    """41 resamples: the lower end is the 2nd sorted verdict."""
    one_low = [NOT_SUPPORTED] + [SUPPORTED] * 40
    assert capped(SUPPORTED, one_low)[0] == SUPPORTED  # one outlier sits outside the 95 % range
    two_low = [NOT_SUPPORTED] * 2 + [SUPPORTED] * 39
    verdict, reason = capped(SUPPORTED, two_low)
    assert verdict == NOT_MEASURABLE and "not supported … supported" in reason
    two_partly = [PARTLY] * 2 + [SUPPORTED] * 39
    assert capped(SUPPORTED, two_partly)[0] == PARTLY
    one_failed = [NOT_MEASURABLE] + [SUPPORTED] * 40
    assert capped(SUPPORTED, one_failed)[0] == SUPPORTED  # 1/41 = 2.4 % failures: allowed
    verdict, reason = capped(SUPPORTED, [NOT_MEASURABLE] * 2 + [SUPPORTED] * 39)
    assert verdict == NOT_MEASURABLE and "4.9%" in reason  # 2/41 failures: more than 2.5 %


def test_cap_at_the_upper_quantile_boundary_and_the_majority():
    """41 resamples: the upper end is the 40th sorted verdict."""
    one_high = [NOT_SUPPORTED] * 2 + [PARTLY] * 38 + [SUPPORTED]
    assert capped(PARTLY, one_high)[0] == PARTLY  # range not supported … partly
    two_high = [NOT_SUPPORTED] * 2 + [PARTLY] * 37 + [SUPPORTED] * 2
    assert capped(PARTLY, two_high)[0] == NOT_MEASURABLE  # range not supported … supported
    assert capped(NOT_SUPPORTED, [NOT_SUPPORTED] * 40 + [SUPPORTED]) == (NOT_SUPPORTED, "")
    # Every resample says partly: a supported point is lowered to the majority; a weaker point is kept.
    verdict, reason = capped(SUPPORTED, [PARTLY] * 41)
    assert verdict == PARTLY and "majority" in reason
    assert capped(NOT_SUPPORTED, [PARTLY] * 41) == (NOT_SUPPORTED, "")
    # The median of 41 is the 21st sorted verdict: 21 not supported, 20 partly lower a partly point.
    assert capped(PARTLY, [NOT_SUPPORTED] * 21 + [PARTLY] * 20)[0] == NOT_SUPPORTED
    assert capped(PARTLY, [NOT_SUPPORTED] * 20 + [PARTLY] * 21)[0] == PARTLY


@pytest.mark.parametrize(("value", "low", "high"), [(0.5, 1 / 3, 2 / 3), (0.05, 0.05 / 1.95, 0.1 / 1.05),
                                                    (0.8, 2 / 3, 8 / 9)])  # fmt: skip
def test_fractions_are_halved_and_doubled_on_the_odds_scale(value, low, high):
    assert scaled_threshold(value, 0.5, True) == pytest.approx(low)
    assert scaled_threshold(value, 2.0, True) == pytest.approx(high)
    assert scaled_threshold(value, 0.5, False) == pytest.approx(value / 2)
    assert scaled_threshold(value, 2.0, False) == pytest.approx(value * 2)


def test_sensitivity_moves_only_decided_verdicts_and_names_the_threshold():
    records = [{"threshold": "tau", "scale": 0.5, "value": 0.05, "verdict": SUPPORTED},
               {"threshold": "tau", "scale": 2.0, "value": 0.2, "verdict": NOT_MEASURABLE},
               {"threshold": "delta", "scale": 2.0, "value": 0.2, "verdict": PARTLY}]  # fmt: skip
    verdict, reason = sensitive_verdict(SUPPORTED, "", SUPPORTED, records)
    assert verdict == PARTLY and "depends on delta" in reason and "tau" not in reason
    assert sensitive_verdict(SUPPORTED, "", SUPPORTED, records[:2]) == (SUPPORTED, "")
    assert sensitive_verdict(NOT_MEASURABLE, "x", SUPPORTED, records)[0] == NOT_MEASURABLE


def test_percentile_interval_over_the_finite_values():
    values = np.array([np.nan, 7.0, np.inf, 3.0, 0.0, 10.0, 1.0, 9.0, 2.0, 8.0, 5.0, 4.0, 6.0, -np.inf])
    assert percentile_interval(values, 3.0) == (pytest.approx(0.25), pytest.approx(9.75))  # 0..10, interpolated
    assert all(math.isnan(x) for x in percentile_interval(values, math.nan))
    assert all(math.isnan(x) for x in percentile_interval(np.array([np.nan]), 1.0))


def test_quantile_indices_where_they_are_not_whole_numbers():
    """With 21 resamples the 97.5 % quantile index is 19.5, rounded up to the largest; with 40 the median index
    (n − 1) // 2 = 19 is the lower of the two middle verdicts."""
    assert capped(PARTLY, [NOT_SUPPORTED] + [PARTLY] * 19 + [SUPPORTED])[0] == NOT_MEASURABLE
    assert capped(PARTLY, [NOT_SUPPORTED] * 20 + [PARTLY] * 20)[0] == NOT_SUPPORTED
