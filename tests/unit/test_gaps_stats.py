"""Gaps of issue 34 in the pure statistics (`sinkscope.functional`): every threshold on both sides at a δ where δ ≠ 1 − δ
and at several ε and τ, per-block sums over several uneven query blocks, and finalisers with every count non-zero.
Each expected number is a loop over queries written here, never sinkscope's own vectorised form."""

import math

import pytest
import torch

from sinkscope.functional.geometry import bos_geometry_sums
from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.functional.learned_sink import (
    hard_learned_sink_frac,
    learned_sink_block_sums,
    learned_sink_score,
)
from sinkscope.functional.patterns import (
    entropy_weights,
    exceed_counts,
    finalize_pattern_scores,
    hard_diag_frac,
    hard_sink_frac,
    head_class,
    pattern_row_sums,
    sink_rate,
)
from sinkscope.functional.switch import finalize_switch, switch_block_sums, switched_off, visible_value_mean

BLOCKS = ((0, 1), (1, 5), (5, 11))  # uneven query blocks of a window of T = 11
T = 11


def causal_map(B: int, H: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, H, T, T, generator=g, dtype=torch.float64) * 3
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return logits.softmax(-1)


def test_hard_fractions_use_one_minus_delta_not_delta():
    """δ = 0.25: a mass of 0.25 reaches δ but not 1 − δ = 0.75, so it is not hard; 0.75 is (equality counts)."""
    f64 = dict(dtype=torch.float64)
    attn = torch.zeros(1, 1, 5, 5, **f64)
    attn[0, 0, :, 0] = torch.tensor([1.0, 0.25, 0.75, 0.7499, 0.7501], **f64)  # column 0 of queries 0..4
    attn[0, 0].diagonal()[1:] = torch.tensor([0.75, 0.25, 0.2501, 0.75], **f64)
    # t ≥ 1 only: column 0 is hard at t = 2 (0.75) and t = 4 (0.7501); the diagonal at t = 1 and t = 4.
    assert hard_sink_frac(attn, delta=0.25).item() == 2 / 4
    assert hard_diag_frac(attn, delta=0.25).item() == 2 / 4
    mass = torch.tensor([0.9, 0.25, 0.75, 0.7499, 0.7501], **f64)
    assert hard_learned_sink_frac(mass, delta=0.25).item() == 2 / 4
    assert learned_sink_score(mass).item() == pytest.approx(sum(mass.tolist()) / 5)  # t = 0 included
    col0, d = attn[..., 0], attn.diagonal(dim1=-2, dim2=-1)
    sums, hard_sink, hard_diag = pattern_row_sums(col0, d, torch.zeros_like(col0), 0, 0.25)
    assert hard_sink.tolist() == [[[False, False, True, False, True]]]
    assert hard_diag.tolist() == [[[False, True, False, False, True]]]
    assert sums["hard_sink"].item() == 2 and sums["hard_diag"].item() == 2


@pytest.mark.parametrize("delta", [0.2, 0.35])
def test_pattern_row_sums_over_uneven_blocks_equal_one_loop(delta):
    B, H = 2, 3
    attn = causal_map(B, H, seed=3)
    sums = {k: 0.0 for k in ("sink", "diag", "prev", "hard_sink", "hard_diag")}
    hard = []
    for start, stop in BLOCKS:
        rows = torch.arange(start, stop)
        col0 = attn[:, :, start:stop, 0]
        diag = attn[:, :, rows, rows]
        prev = attn[:, :, rows, (rows - 1).clamp_min(0)]
        block, hard_sink, _ = pattern_row_sums(col0, diag, prev, start, delta)
        sums = {k: sums[k] + block[k] for k in sums}
        hard.append(hard_sink)
    hard = torch.cat(hard, -1)
    for h in range(H):
        ref = {k: 0.0 for k in sums}
        for b in range(B):
            for t in range(T):
                ref["sink"] += attn[b, h, t, 0].item()
                if t == 0:
                    assert not hard[b, h, t]
                    continue
                ref["diag"] += attn[b, h, t, t].item()
                ref["prev"] += attn[b, h, t, t - 1].item()
                ref["hard_sink"] += attn[b, h, t, 0].item() >= 1 - delta
                ref["hard_diag"] += attn[b, h, t, t].item() >= 1 - delta
                assert bool(hard[b, h, t]) == (attn[b, h, t, 0].item() >= 1 - delta)
        for k in sums:
            assert sums[k][h].item() == pytest.approx(ref[k], rel=1e-12), (k, h)
    assert 0 < hard.sum() < hard.numel()  # both sides of the threshold occur


@pytest.mark.parametrize("tau", [0.35, 0.8, 1.6])
def test_switch_sums_over_uneven_blocks_equal_one_loop(tau):
    """Queries of later blocks compare with the mean over *their* visible keys, not the block's."""
    g = torch.Generator().manual_seed(4)
    B, H = 2, 3
    out_norms = torch.rand(B, H, T, generator=g, dtype=torch.float64) * 2
    value_norms = torch.rand(B, H, T, generator=g, dtype=torch.float64) * 2 + 0.1
    hard_sink = torch.rand(B, H, T, generator=g) > 0.4
    hard_sink[..., 0] = False
    total = None
    for start, stop in BLOCKS:
        block = switch_block_sums(out_norms[..., start:stop], value_norms, hard_sink[..., start:stop], start, tau)
        total = block if total is None else {k: total[k] + block[k] for k in total}
    for h in range(H):
        ref = {"n_off_sink": 0, "n_off_nosink": 0, "n_on_sink": 0, "n_on_nosink": 0}
        for b in range(B):
            for t in range(1, T):
                off = out_norms[b, h, t].item() <= tau * sum(value_norms[b, h, : t + 1].tolist()) / (t + 1)
                ref[f"n_{'off' if off else 'on'}_{'sink' if hard_sink[b, h, t] else 'nosink'}"] += 1
        for name, count in ref.items():
            assert total[name][h].item() == count, (name, h, tau)
        assert total["ahon"][h].item() == pytest.approx(out_norms[:, h].sum().item())
    assert all(total[k].sum() > 0 for k in ref)  # every cell of the table is non-empty


def test_switched_off_counts_equality_and_reads_the_visible_keys_of_a_later_block():
    value_norms = torch.tensor([4.0, 2.0, 0.0, 2.0, 2.0], dtype=torch.float64)  # visible means 4, 3, 2, 2, 2
    assert visible_value_mean(value_norms).tolist() == [4.0, 3.0, 2.0, 2.0, 2.0]
    assert visible_value_mean(value_norms, 3).tolist() == [4.0, 3.0, 2.0]
    # Queries 2..4 (q_start = 2) at τ = 0.5: limits 1, 1, 1; equality is off.
    out = torch.tensor([1.0, 1.0000001, 0.5], dtype=torch.float64)
    assert switched_off(out, value_norms, 0.5, q_start=2).tolist() == [True, False, True]
    assert switched_off(out, value_norms, 0.25, q_start=2).tolist() == [False, False, True]


def test_finalize_switch_with_every_cell_non_zero():
    windows, seq_len = 3, 7
    sums = {
        "ahon": torch.tensor([4.2, 8.4, 2.1], dtype=torch.float64),
        "value_drain": torch.tensor([0.6, 1.5, 3.0], dtype=torch.float64),
        "n_off_sink": torch.tensor([3.0, 1.0, 0.0], dtype=torch.float64),
        "n_off_nosink": torch.tensor([2.0, 4.0, 0.0], dtype=torch.float64),
        "n_on_sink": torch.tensor([6.0, 5.0, 9.0], dtype=torch.float64),
        "n_on_nosink": torch.tensor([7.0, 8.0, 9.0], dtype=torch.float64),
    }
    scores = finalize_switch(sums, windows, seq_len)
    ahon = [4.2 / 21, 8.4 / 21, 2.1 / 21]
    assert scores["ahon"].tolist() == pytest.approx(ahon)
    assert scores["ahon_ln"].tolist() == pytest.approx([a / (sum(ahon) / 3) for a in ahon])
    assert scores["value_drain"].tolist() == pytest.approx([0.2, 0.5, 1.0])
    assert scores["switch_off_frac"].tolist() == pytest.approx([5 / 18, 5 / 18, 0.0])
    assert scores["switch_agreement"][:2].tolist() == pytest.approx([3 / 5, 1 / 5])  # P(sink | off), not P(off | sink)
    assert math.isnan(scores["switch_agreement"][2].item())


def test_learned_sink_block_sums_at_asymmetric_delta_over_uneven_blocks():
    g = torch.Generator().manual_seed(5)
    B, H, delta, tau = 2, 3, 0.25, 0.7
    mass = torch.rand(B, H, T, generator=g, dtype=torch.float64)
    mass[0, 0, 3], mass[0, 1, 4] = 0.75, 0.25  # at 1 − δ (hard) and at δ (not hard)
    out_norms = torch.rand(B, H, T, generator=g, dtype=torch.float64)
    value_norms = torch.rand(B, H, T, generator=g, dtype=torch.float64) + 0.2
    hard_sink = torch.rand(B, H, T, generator=g) > 0.6
    hard_diag = torch.rand(B, H, T, generator=g) > 0.6
    total, silent = None, torch.zeros(B, dtype=torch.float64)
    for start, stop in BLOCKS:
        s = slice(start, stop)
        block, quiet = learned_sink_block_sums(mass[..., s], out_norms[..., s], value_norms, hard_sink[..., s],
                                               hard_diag[..., s], start, delta, tau)
        total = block if total is None else {k: total[k] + block[k] for k in total}
        silent += quiet
    ref = {k: [0.0] * H for k in ("mass", "hard", "n_off", "n_off_learned", "n_off_any_sink")}
    ref_silent = [0] * B
    for b in range(B):
        for t in range(T):
            every = t >= 1
            for h in range(H):
                ref["mass"][h] += mass[b, h, t].item()
                if t == 0:
                    continue
                hard = mass[b, h, t].item() >= 1 - delta
                off = out_norms[b, h, t].item() <= tau * value_norms[b, h, : t + 1].mean().item()
                ref["hard"][h] += hard
                ref["n_off"][h] += off
                ref["n_off_learned"][h] += off and hard
                ref["n_off_any_sink"][h] += off and (hard or bool(hard_sink[b, h, t]))
                every = every and (hard or bool(hard_sink[b, h, t]) or bool(hard_diag[b, h, t]))
            ref_silent[b] += every
    for k, values in ref.items():
        assert total[k].tolist() == pytest.approx(values), k
    assert silent.tolist() == ref_silent
    assert total["hard"].sum() > 0 and total["n_off_learned"].sum() > 0


@pytest.mark.parametrize("epsilons", [(0.1, 0.25, 0.5), (0.3,), (0.05, 0.6)])
def test_exceed_counts_and_sink_rate_at_several_epsilons(epsilons):
    g = torch.Generator().manual_seed(6)
    scores = torch.rand(5, 2, 3, generator=g, dtype=torch.float64)  # (W, L, H)
    scores[0, 0, 0], scores[1, 1, 2] = epsilons[0], epsilons[-1]  # ties: equality is not above
    counts = exceed_counts(scores, torch.tensor(epsilons, dtype=torch.float64))
    for e, eps in enumerate(epsilons):
        for l in range(2):
            for h in range(3):
                assert counts[e, l, h].item() == sum(scores[w, l, h].item() > eps for w in range(5))
        above = sum(v > eps for v in scores.flatten().tolist())
        assert sink_rate(scores, eps) == pytest.approx(above / scores.numel())


def test_entropy_weights_and_key_score_counts_of_a_later_block():
    assert entropy_weights(0, 3).tolist() == pytest.approx([0.0, 1 / math.log(2), 1 / math.log(3)])
    assert entropy_weights(4, 2).tolist() == pytest.approx([1 / math.log(5), 1 / math.log(6)])
    windows, seq_len = 3, 4
    sums = {k: torch.ones(2, dtype=torch.float64) * 6 for k in ("sink", "diag", "prev", "entropy", "hard_sink",
                                                                 "hard_diag")}  # fmt: skip
    sums["keys"] = torch.ones(2, seq_len, dtype=torch.float64) * 6
    scores = finalize_pattern_scores(sums, windows, seq_len)
    assert scores["sink_score"].tolist() == pytest.approx([6 / 12] * 2)  # every query t
    for name in ("diag_score", "prev_score", "entropy", "hard_sink_frac", "hard_diag_frac"):
        assert scores[name].tolist() == pytest.approx([6 / 9] * 2), name  # queries t ≥ 1
    assert scores["key_scores"][0].tolist() == pytest.approx([6 / 12, 6 / 9, 6 / 6, 6 / 3])  # rows t ≥ k


def test_bos_geometry_counts_an_orthogonal_token_as_non_positive():
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [-1.0, 0.0], [3.0, 3.0]]])  # cos 0, -1, 1/√2
    sums = bos_geometry_sums(x)
    assert sums["cos_nonpos"].item() == 2
    assert sums["cos_sum"].item() == pytest.approx(-1 + 1 / math.sqrt(2))
    assert sums["cos_max"].item() == pytest.approx(1 / math.sqrt(2))
    assert sums["norm_ratio_sum"].item() == pytest.approx(1 / ((2 + 1 + math.sqrt(18)) / 3))


# (class, scores) pairs on both sides of each threshold: thresholds of 0.3 (sink), 0.5, 0.5, 0.7 (dense) and
# a row mass of 0.8, under which the masses compare with threshold × 0.8 (0.24, 0.4, 0.4) but entropy with 0.7.
ROW_MASS = 0.8


@pytest.mark.parametrize(("inclusive", "value", "reaches"), [(False, 0.0, False), (False, 1e-9, True),
                                                             (True, 0.0, True), (True, -1e-9, False)])  # fmt: skip
def test_each_head_class_threshold_on_both_sides_relative_to_the_row_mass(inclusive, value, reaches):
    """`value` is the offset from the threshold; the first class whose threshold is reached wins."""
    th = HeadThresholds(sink=0.3, diagonal=0.5, previous=0.5, dense=0.7, learned_sink=0.3, inclusive=inclusive)

    def cls(sink=0.0, diag=0.0, prev=0.0, entropy=0.0, learned=0.0):
        return classify_head(sink, diag, prev, entropy, row_mass=ROW_MASS, thresholds=th, learned_sink=learned)

    assert cls(sink=0.3 * ROW_MASS + value) == ("sink" if reaches else "mixed")
    assert cls(diag=0.5 * ROW_MASS + value) == ("diagonal" if reaches else "mixed")
    assert cls(prev=0.5 * ROW_MASS + value) == ("previous-token" if reaches else "mixed")
    assert cls(entropy=0.7 + value) == ("dense" if reaches else "mixed")
    assert cls(learned=0.3 + value, sink=0.1) == ("learned sink" if reaches else "mixed")  # not scaled by row mass
    assert cls(sink=0.5, diag=0.9, prev=0.9, entropy=0.9) == "sink"  # order: sink before the others
    assert cls(diag=0.5, prev=0.9, entropy=0.9) == "diagonal"
    assert cls(prev=0.5, entropy=0.9) == "previous-token"


def test_switched_off_and_learned_sink_ties():
    th = HeadThresholds(switched_off=0.4)
    assert classify_head(0.0, 0.0, 0.0, 0.0, row_mass=0.39, thresholds=th) == "null"
    assert classify_head(0.0, 0.0, 0.0, 0.0, row_mass=0.4, thresholds=th) == "mixed"  # strict <
    assert classify_head(0.0, 0.0, 0.0, 0.0, gate=0.39, thresholds=th) == "gated"
    assert classify_head(0.0, 0.0, 0.0, 0.0, gate=0.4, thresholds=th) == "mixed"
    # A learned sink equal to the BOS sink score is the learned sink (≥); below it, BOS wins.
    assert head_class(0.6, 0.0, 0.0, 0.0, epsilon=0.25, learned_sink=0.6) == "learned sink"
    assert head_class(0.6, 0.0, 0.0, 0.0, epsilon=0.25, learned_sink=0.59) == "sink"
    assert head_class(0.26, 0.0, 0.0, 0.0, epsilon=0.25) == "sink"
    assert head_class(0.24, 0.0, 0.0, 0.0, epsilon=0.25) == "mixed"
    assert head_class(0.0, 0.0, 0.0, 0.0, epsilon=0.25, learned_sink=0.26) == "learned sink"
