"""SPEC §2 statistics on hand-made matrices and against brute-force loops."""

import math

import pytest
import torch

from sinkscope.functional.patterns import (
    diag_score,
    entropy_score,
    exceed_counts,
    finalize_pattern_scores,
    hard_diag_frac,
    hard_sink_frac,
    head_class,
    key_scores,
    key_scores_from_columns,
    pattern_block_sums,
    prev_score,
    received_from_columns,
    received_scores,
    sink_rate,
    sink_score,
)


def random_causal(*shape: int, T: int, seed: int = 0, sharp: float = 3.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*shape, T, T, generator=g, dtype=torch.float64) * sharp
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    return logits.masked_fill(~mask, -torch.inf).softmax(-1)


def test_all_mass_on_bos_is_a_perfect_sink():
    T = 6
    attn = torch.zeros(T, T, dtype=torch.float64)
    attn[:, 0] = 1
    assert sink_score(attn) == 1
    assert hard_sink_frac(attn) == 1
    assert diag_score(attn) == 0
    assert entropy_score(attn) == 0
    assert key_scores(attn)[0] == 1 and key_scores(attn)[1:].sum() == 0


def test_identity_is_a_perfect_diagonal():
    attn = torch.eye(5, dtype=torch.float64)
    assert diag_score(attn) == 1
    assert hard_diag_frac(attn) == 1
    assert sink_score(attn) == pytest.approx(1 / 5)  # only t = 0 puts its mass on key 0
    assert prev_score(attn) == 0


def test_uniform_causal_has_entropy_one_and_harmonic_sink_score():
    T = 7
    attn = torch.ones(T, T, dtype=torch.float64).tril()
    attn = attn / attn.sum(-1, keepdim=True)
    assert entropy_score(attn) == pytest.approx(1.0)
    # A[t,0] = 1/(t+1): the sink score is the harmonic number H_T over T.
    assert sink_score(attn) == pytest.approx(sum(1 / (t + 1) for t in range(T)) / T)


def brute_force(attn: torch.Tensor, delta: float) -> dict[str, float]:
    T = attn.shape[-1]
    out = {"sink": 0.0, "diag": 0.0, "prev": 0.0, "entropy": 0.0, "hs": 0.0, "hd": 0.0}
    for t in range(T):
        out["sink"] += attn[t, 0].item() / T
        if t == 0:
            continue
        out["diag"] += attn[t, t].item() / (T - 1)
        out["prev"] += attn[t, t - 1].item() / (T - 1)
        h = -sum(p * math.log(p) for p in attn[t, : t + 1].tolist() if p > 0)
        out["entropy"] += h / math.log(t + 1) / (T - 1)
        out["hs"] += (attn[t, 0].item() >= 1 - delta) / (T - 1)
        out["hd"] += (attn[t, t].item() >= 1 - delta) / (T - 1)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_direct_functions_match_brute_force(seed):
    attn = random_causal(T=9, seed=seed, sharp=4.0)
    ref = brute_force(attn, 0.3)
    assert sink_score(attn).item() == pytest.approx(ref["sink"], abs=1e-12)
    assert diag_score(attn).item() == pytest.approx(ref["diag"], abs=1e-12)
    assert prev_score(attn).item() == pytest.approx(ref["prev"], abs=1e-12)
    assert entropy_score(attn).item() == pytest.approx(ref["entropy"], abs=1e-12)
    assert hard_sink_frac(attn, 0.3).item() == pytest.approx(ref["hs"])
    assert hard_diag_frac(attn, 0.3).item() == pytest.approx(ref["hd"])
    for k in range(9):
        assert key_scores(attn)[k].item() == pytest.approx(attn[k:, k].mean().item(), abs=1e-12)


@pytest.mark.parametrize("block", [1, 3, 4, 10])
def test_streaming_block_sums_equal_direct_functions(block):
    B, H, T, delta = 3, 2, 10, 0.3
    attn = random_causal(B, H, T=T, seed=5, sharp=5.0)
    total: dict[str, torch.Tensor] = {}
    for start in range(0, T, block):
        stop = min(T, start + block)
        # Keys past the block's last query are masked, so the block may stop there (as the capture does).
        sums, _, _ = pattern_block_sums(attn[:, :, start:stop, :stop], start, delta)
        keys = torch.zeros(H, T, dtype=torch.float64)
        keys[:, :stop] = sums.pop("columns").sum(0)
        sums["keys"] = keys
        torch.testing.assert_close(sums.pop("diagonal"), attn.diagonal(dim1=-2, dim2=-1)[..., start:stop])
        for name, value in sums.items():
            total[name] = total.get(name, 0) + value
    scores = finalize_pattern_scores(total, windows=B, seq_len=T)
    torch.testing.assert_close(scores["sink_score"], sink_score(attn).mean(0))
    torch.testing.assert_close(scores["diag_score"], diag_score(attn).mean(0))
    torch.testing.assert_close(scores["prev_score"], prev_score(attn).mean(0))
    torch.testing.assert_close(scores["entropy"], entropy_score(attn).mean(0))
    torch.testing.assert_close(scores["hard_sink_frac"], hard_sink_frac(attn, delta).mean(0))
    torch.testing.assert_close(scores["hard_diag_frac"], hard_diag_frac(attn, delta).mean(0))
    torch.testing.assert_close(scores["key_scores"], key_scores(attn).mean(0))
    assert total["upper_mass"].abs().max() == 0
    torch.testing.assert_close(total["row_total"], torch.full((H,), float(B * T), dtype=torch.float64))


def test_block_sums_see_mass_above_the_diagonal():
    # A non-causal (full) softmax must show up in the guard, which is what catches a missing mask.
    probs = torch.full((1, 1, 4, 4), 0.25, dtype=torch.float64)
    sums, _, _ = pattern_block_sums(probs, 0, 0.1)
    assert sums["upper_mass"].item() == pytest.approx(6 * 0.25)


def test_sink_rate_and_classes():
    assert sink_rate(torch.tensor([0.1, 0.5, 0.9, 0.31]), 0.3) == 0.75
    assert head_class(0.8, 0.1, 0.0, 0.2) == "sink"
    assert head_class(0.1, 0.7, 0.0, 0.2) == "diagonal"
    assert head_class(0.1, 0.1, 0.8, 0.2) == "previous-token"
    assert head_class(0.1, 0.1, 0.1, 0.9) == "dense"
    assert head_class(0.1, 0.2, 0.2, 0.4) == "mixed"


def test_received_scores_match_brute_force_and_skip_bos_and_self():
    attn = random_causal(2, T=8, seed=3, sharp=4.0)
    got = received_scores(attn)
    assert got.shape == (2, 6)
    for w in range(2):
        for k in range(1, 7):
            assert got[w, k - 1].item() == pytest.approx(attn[w, k + 1 :, k].mean().item(), abs=1e-12)
    # All later queries on key 3: key 3 receives 1, everyone else 0; BOS and the diagonal never count.
    T = 6
    hand = torch.zeros(T, T, dtype=torch.float64)
    hand[:4, 0] = 1
    hand[3:, 3] = 1
    hand[3, 0] = 0
    assert received_scores(hand).tolist() == [0, 0, 1, 0]


def test_per_window_threshold_differs_from_threshold_of_the_mean():
    # Two windows: α = 0.5 and 0.2, mean 0.35. Gu et al. threshold each window: one of two is above 0.3;
    # thresholding the mean says the head is a sink (1 of 1).
    scores = torch.tensor([[0.5], [0.2]], dtype=torch.float64)  # (W, heads)
    counts = exceed_counts(scores, torch.tensor([0.1, 0.3, 0.6]))
    assert counts.tolist() == [[2.0], [1.0], [0.0]]
    assert sink_rate(scores, 0.3) == 0.5 and sink_rate(scores.mean(0), 0.3) == 1.0


def test_column_forms_equal_the_direct_functions():
    attn = random_causal(3, 2, T=7, seed=4)
    columns, diagonal = attn.sum(-2), attn.diagonal(dim1=-2, dim2=-1)
    torch.testing.assert_close(key_scores_from_columns(columns), key_scores(attn))
    torch.testing.assert_close(received_from_columns(columns, diagonal), received_scores(attn))
