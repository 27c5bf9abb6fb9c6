"""The one head classifier (SPEC §2 head class) on hand-made attention maps of each class, for analyze's
thresholds and the gBB lab's (non-trigger queries, null and gated heads)."""

import math
from types import SimpleNamespace

import pytest
import torch

from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.functional.patterns import (
    HEAD_CLASS_THRESHOLDS,
    diag_score,
    entropy_score,
    head_class,
    prev_score,
    sink_score,
)
from sinkscope.synthetic.summary import LAB_THRESHOLDS, row_pattern

T = 12


def causal_map(weights) -> torch.Tensor:
    """(T, T) map whose row t puts `weights(t)` (a dict key → mass) on its keys, the rest uniform over the
    visible keys (row 0 attends to itself)."""
    attn = torch.zeros(T, T, dtype=torch.float64)
    attn[0, 0] = 1.0
    for t in range(1, T):
        chosen = weights(t)
        rest = 1 - sum(chosen.values())
        attn[t, : t + 1] = rest / (t + 1)
        for key, mass in chosen.items():
            attn[t, key] += mass
    return attn


MAPS = {
    "sink": causal_map(lambda t: {0: 0.9}),
    "diagonal": causal_map(lambda t: {t: 0.9}),
    "previous-token": causal_map(lambda t: {t - 1: 0.9}),
    "dense": causal_map(lambda t: {}),  # uniform over the visible keys: entropy 1
    "mixed": causal_map(lambda t: {0: 0.2, t: 0.4, t - 1: 0.4} if t > 1 else {0: 0.2, 1: 0.8}),
}


def scores(attn: torch.Tensor) -> tuple[float, float, float, float]:
    return tuple(float(f(attn)) for f in (sink_score, diag_score, prev_score, entropy_score))


@pytest.mark.parametrize("expected", list(MAPS))
def test_each_class_from_its_map(expected: str) -> None:
    sink, diag, prev, entropy = scores(MAPS[expected])
    assert classify_head(sink, diag, prev, entropy) == expected
    assert head_class(sink, diag, prev, entropy) == expected  # analyze's name for the same call


def test_switched_off_heads_and_masses_relative_to_the_row_mass() -> None:
    """A head whose rows sum to 0.3 (sink logit, ReLU) is null; one whose gate is 0.1 is gated; a head with
    rows of mass 0.8 holding 0.45 on BOS is a sink for the lab (0.45 ≥ 0.5 · 0.8) but not at row mass 1."""
    sink, diag, prev, entropy = scores(MAPS["sink"] * 0.3)
    assert classify_head(sink, diag, prev, entropy, row_mass=0.3, thresholds=LAB_THRESHOLDS) == "null"
    sink, diag, prev, entropy = scores(MAPS["sink"])
    assert classify_head(sink, diag, prev, entropy, gate=0.1, thresholds=LAB_THRESHOLDS) == "gated"
    assert classify_head(sink, diag, prev, entropy, gate=0.9, thresholds=LAB_THRESHOLDS) == "sink"
    assert classify_head(0.45, 0.1, 0.1, 0.5, row_mass=0.8, thresholds=LAB_THRESHOLDS) == "sink"
    assert classify_head(0.45, 0.1, 0.1, 0.5, row_mass=1.0, thresholds=LAB_THRESHOLDS) == "mixed"


def test_thresholds_are_named_and_ties_follow_inclusive() -> None:
    spec = HeadThresholds()
    assert (spec.sink, spec.diagonal, spec.previous, spec.dense) == (0.3, 0.5, 0.5, 0.7)
    assert HEAD_CLASS_THRESHOLDS == {"diagonal": 0.5, "previous-token": 0.5, "dense": 0.7}
    assert classify_head(0.3, 0.5, 0.5, 0.7) == "mixed"  # analyze: strictly above
    assert classify_head(0.3, 0.5, 0.5, 0.7, thresholds=HeadThresholds(inclusive=True)) == "sink"
    assert classify_head(0.1, 0.1, 0.1, 0.95, thresholds=LAB_THRESHOLDS) == "dense"
    assert classify_head(0.1, 0.1, 0.1, math.nan) == "mixed"  # no entropy: never dense
    assert head_class(0.5, 0.0, 0.0, 0.0, epsilon=0.8) == "mixed"
    assert head_class(0.9, 0.0, 0.0, 0.0, epsilon=0.8) == "sink"


def test_lab_stores_the_previous_token_class_as_previous() -> None:
    row = SimpleNamespace(bos_attn=0.1, diag_attn=0.1, prev_attn=0.7, row_mass=1.0, entropy=0.3, gate_plain=math.nan)
    assert row_pattern(row) == "previous"
