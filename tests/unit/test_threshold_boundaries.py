"""The documented comparisons at their boundaries (docs/statistics.md): a hard sink or hard diagonal is
`A ≥ 1-δ` (equality counts), a sink needs `α^w > ε` (equality does not). Values exactly at the threshold, in
float64, where continuous model outputs almost never land."""

import torch

from sinkscope.functional.patterns import exceed_counts, pattern_row_sums


def test_hard_patterns_count_a_mass_equal_to_one_minus_delta():
    delta = 0.25  # 1 - δ = 0.75 exactly
    col0 = torch.tensor([[[0.75, 0.75, 0.7499, 0.8]]], dtype=torch.float64)  # (B, H, Q) = (1, 1, 4); t = 0 never counts
    diag = torch.tensor([[[1.0, 0.75, 0.2, 0.7499]]], dtype=torch.float64)
    sums, hard_sink, hard_diag = pattern_row_sums(col0, diag, torch.zeros_like(col0), 0, delta)
    assert hard_sink.tolist() == [[[False, True, False, True]]]
    assert hard_diag.tolist() == [[[False, True, False, False]]]
    assert sums["hard_sink"].tolist() == [2.0] and sums["hard_diag"].tolist() == [1.0]


def test_a_window_sink_score_equal_to_epsilon_is_not_a_sink():
    scores = torch.tensor([[0.25, 0.5], [0.3, 0.25]], dtype=torch.float64)  # (W, H) = (2, 2)
    counts = exceed_counts(scores, torch.tensor([0.25, 0.5], dtype=torch.float64))
    assert counts.tolist() == [[1.0, 1.0], [0.0, 0.0]]
