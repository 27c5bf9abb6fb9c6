"""Survivors of the sampled mutmut run over `functional/` (docs/testing.md, "Mutation tool"), each checked against
a hand count written out here."""

from __future__ import annotations

import torch

from sinkscope.functional.geometry import bos_geometry_sums_from
from sinkscope.functional.patterns import row_entropy


def test_norm_ratio_sum_accumulates_in_float64():
    """17 windows of float32 norms: window 0 has ||x_0|| = 1e8 over unit norms (ratio 1e8), the other 16 ratio 1.
    The documented float64 sum is 1e8 + 16 exactly; a float32 sum loses the ones (its spacing at 1e8 is 8)."""
    norms = torch.ones(17, 3)
    norms[0, 0] = 1e8
    sums = bos_geometry_sums_from(norms, torch.ones(17, 3))
    assert sums["norm_ratio_sum"].dtype == torch.float64
    assert sums["norm_ratio_sum"].item() == 1e8 + 16


def test_row_entropy_stays_on_the_device_of_its_maps():
    """Maps on another device than the CPU (the `meta` device stands in for an accelerator, which this machine
    lacks): the normaliser log(t+1) is made on the maps' device, so the entropies come back there, one per t ≥ 1."""
    attn = torch.softmax(torch.randn(2, 3, 5, 5, device="meta"), -1)
    entropy = row_entropy(attn)
    assert entropy.device.type == "meta" and entropy.shape == (2, 3, 4)


def test_every_bos_geometry_sum_is_float64_and_counts_non_positive_cosines_by_hand():
    """Two layers, one window of T = 4: x_0 along e_1, x_1..x_3 at cosines 0.6, 0 and −1 (layer 0) and all at +1
    (layer 1). The documented float64 sums: layer 0 counts 2 non-positive cosines (0 and −1), layer 1 none."""
    dots = torch.tensor([[[1.0, 0.6, 0.0, -2.0]], [[1.0, 1.0, 3.0, 0.5]]])  # (L, B, T): x_t·x_0
    norms = torch.tensor([[[1.0, 1.0, 5.0, 2.0]], [[1.0, 1.0, 3.0, 0.5]]])
    sums = bos_geometry_sums_from(norms, dots)
    assert {name: value.dtype for name, value in sums.items()} == dict.fromkeys(sums, torch.float64)
    assert sums["cos_nonpos"].tolist() == [2.0, 0.0]
    torch.testing.assert_close(sums["cos_sum"], torch.tensor([0.6 + 0.0 - 1.0, 3.0], dtype=torch.float64))
