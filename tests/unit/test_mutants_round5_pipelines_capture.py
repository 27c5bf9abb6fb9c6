"""The flex path's additive-mask parts by hand, and the one-per-forward-pass cache of `additive_parts` and
`flex_masks` (same tensor: the same parts back; another tensor or batch: new parts), mutmut draw 54."""

from __future__ import annotations

import torch

from sinkscope.capture.flex_masks import additive_parts

NEG = torch.finfo(torch.float32).min


def test_additive_parts_by_hand_and_cached_per_tensor():
    bias = torch.tensor([[0.0, NEG, NEG], [-1.0, 2.0, NEG], [NEG, NEG, NEG]])[None, None]  # row 2 sees no key
    (full, shift, seen), entries = additive_parts(bias, 2, 3)
    assert full.shape == (2, 3, 3, 3) and torch.equal(full[1, 2], bias[0, 0])
    assert shift.shape == (2, 3, 3) and shift[0, 0].tolist() == [0.0, 2.0, NEG]  # max over keys j ≤ t
    assert seen.shape == (2, 3, 3) and seen[1, 1].tolist() == [1.0, 1.0, 0.0]
    # packed entries j = 0, t, t − 1 minus the row's shift (j = 0 at t = 0 for t − 1)
    assert entries[0, 0].tolist() == [[0.0, 0.0, 0.0], [-3.0, 0.0, -3.0], [0.0, 0.0, 0.0]]
    again = additive_parts(bias, 2, 3)
    assert again[0][0] is full and again[1] is entries  # the layers of one pass share one computation
    other = additive_parts(bias.clone(), 2, 3)
    assert other[1] is not entries and torch.equal(other[1], entries)
    assert additive_parts(bias, 1, 3)[0][0].shape == (1, 3, 3, 3)  # another batch size: new parts
    assert additive_parts(bias, 1, 2)[0][1].shape == (1, 2, 3)  # another head count: new parts
