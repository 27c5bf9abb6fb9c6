"""Survivors of the sampled mutmut run over `functional/` (docs/testing.md, "Mutation tool"), each checked against
a hand count written out here."""

from __future__ import annotations

import torch

from sinkscope.functional.geometry import bos_geometry_sums_from


def test_norm_ratio_sum_accumulates_in_float64():
    """17 windows of float32 norms: window 0 has ||x_0|| = 1e8 over unit norms (ratio 1e8), the other 16 ratio 1.
    The documented float64 sum is 1e8 + 16 exactly; a float32 sum loses the ones (its spacing at 1e8 is 8)."""
    norms = torch.ones(17, 3)
    norms[0, 0] = 1e8
    sums = bos_geometry_sums_from(norms, torch.ones(17, 3))
    assert sums["norm_ratio_sum"].dtype == torch.float64
    assert sums["norm_ratio_sum"].item() == 1e8 + 16
