"""Draw 56's survivors in the synthetic models, masked attention and the switch/geometry claims, closed against
hand values: the tiny transformer's rotary embedding written out for one pair of positions; the switch-assumption
table's value rank counted in exact arithmetic on a float32 spectrum at the tolerance's edge."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sinkscope.reproduction.switch_assumption_claims import assumptions_table
from sinkscope.synthetic.tiny_transformer import rope


def test_rope_rotates_each_half_split_pair_by_position_times_its_frequency():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64).expand(1, 1, 2, 4)
    out = rope(x)[0, 0]
    assert out[0].tolist() == [1.0, 2.0, 3.0, 4.0]  # position 0: no rotation
    # position 1, d_head 4: pairs (x0, x2) at frequency 10000^(−0/4) = 1 and (x1, x3) at 10000^(−2/4) = 0.01
    expected = []
    for a, b, angle in ((1.0, 3.0, 1.0), (2.0, 4.0, 0.01)):
        cos, sin = math.cos(angle), math.sin(angle)
        expected.append((a * cos - b * sin, a * sin + b * cos))
    (c0, s0), (c1, s1) = expected
    assert out[1].tolist() == pytest.approx([c0, c1, s0, s1], abs=1e-12)


def test_value_rank_counts_at_the_tolerance_in_float64_on_a_float32_spectrum():
    # rank_rtol 1e-4 × 13 = 0.0013000000000000002 in float64; the float32 value just above it, 0.0013000000035390258,
    # counts (float32 arithmetic would round the threshold onto it and drop it); value_independent_frac agrees
    edge = np.float32(13) * np.float32(1e-4)
    arrays = {"n_contexts": np.array(2), "width": np.array(4), "head_dim": np.array(4), "rank": np.array([[2]]),
              "distance": np.array([[1.0]]), "value_sv": np.array([[[[13.0, edge]]]], dtype=np.float32),
              "heads": np.zeros((1, 1, 1, 3))}  # fmt: skip
    row = assumptions_table(arrays).iloc[0]
    assert row["value_rank_median"] == 2 and row["value_independent_frac"] == 1.0
