"""SPEC §2–§3 statistics restricted to a query mask (the gBB lab's non-trigger queries), against brute-force loops
over (window, query) pairs: the masked mean pools the windows, every selected query weighing the same."""

import math

import pytest
import torch

from sinkscope.errors import SinkscopeError
from sinkscope.functional.patterns import diag_score, entropy_score, prev_score, sink_score
from sinkscope.functional.query_mask import masked_query_mean
from sinkscope.functional.switch import switch_block_sums, switched_off

B, H, T = 4, 3, 9


def random_causal(seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, H, T, T, generator=g, dtype=torch.float64) * 2
    return logits.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), -torch.inf).softmax(-1)


def random_mask(seed: int = 1) -> torch.Tensor:
    mask = torch.rand(B, T, generator=torch.Generator().manual_seed(seed)) < 0.5
    mask[:, 0] = True  # position 0 selected in every window: the scores that skip t = 0 must skip it
    return mask


def loop_mean(attn: torch.Tensor, mask: torch.Tensor, value, first: int = 0) -> list[float]:
    """Per head: the plain mean of `value(A_row, t)` over every (window b, query t ≥ first) with mask[b, t]."""
    out = []
    for h in range(H):
        picked = [value(attn[b, h, t], t) for b in range(B) for t in range(first, T) if mask[b, t]]
        out.append(sum(picked) / len(picked))
    return out


def normalised_entropy(row: torch.Tensor, t: int) -> float:
    p = [float(x) for x in row[: t + 1] if x > 0]
    return -sum(x * math.log(x) for x in p) / math.log(t + 1)


@pytest.mark.parametrize("shared", [False, True], ids=["per-window mask", "one mask for all windows"])
def test_masked_scores_match_loops(shared: bool) -> None:
    attn, mask = random_causal(), random_mask()
    if shared:
        mask = mask[0]
    full = mask.expand(B, T)
    cases = [
        (sink_score(attn, mask), lambda row, t: float(row[0]), 0),
        (diag_score(attn, mask), lambda row, t: float(row[t]), 1),
        (prev_score(attn, mask), lambda row, t: float(row[t - 1]), 1),
        (prev_score(attn, mask, offset=3), lambda row, t: float(row[t - 3]), 3),
        (entropy_score(attn, mask), normalised_entropy, 1),
    ]
    for got, value, first in cases:
        assert got.shape == (H,)
        torch.testing.assert_close(got, torch.tensor(loop_mean(attn, full, value, first), dtype=torch.float64))


def test_pooling_weighs_queries_not_windows() -> None:
    """Window 0 selects one query, window 1 three: the pooled mean is (1·a + 3·b) / 4, not (a + b) / 2."""
    attn = torch.zeros(2, 1, 4, 4, dtype=torch.float64)
    attn[0, 0, :, 0] = 1.0  # window 0: every query on BOS
    attn[1] = torch.eye(4)  # window 1: every query on itself
    mask = torch.tensor([[False, True, False, False], [False, True, True, True]])
    assert float(sink_score(attn, mask)) == 0.25
    assert float(diag_score(attn, mask)) == 0.75


def test_no_mask_is_the_unmasked_score_and_an_all_true_mask_averages_windows() -> None:
    attn = random_causal()
    everywhere = torch.ones(T, dtype=torch.bool)
    for score in (sink_score, diag_score, prev_score, entropy_score):
        torch.testing.assert_close(score(attn, everywhere), score(attn).mean(0))


def test_masked_query_mean_refuses_a_mask_of_the_wrong_shape_or_type() -> None:
    values = torch.rand(B, H, T)
    for bad in (torch.ones(B, T - 1, dtype=torch.bool), torch.ones(B + 1, T, dtype=torch.bool), torch.ones(B, T)):
        with pytest.raises(SinkscopeError, match="query mask"):
            masked_query_mean(values, bad)


def test_switched_off_by_loop_and_unchanged_switch_sums() -> None:
    g = torch.Generator().manual_seed(2)
    out_norms, value_norms = torch.rand(B, H, T, generator=g), torch.rand(B, H, T, generator=g) * 3
    off = switched_off(out_norms, value_norms, 0.2)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                mean_v = sum(float(v) for v in value_norms[b, h, : t + 1]) / (t + 1)  # keys query t sees
                assert bool(off[b, h, t]) == (float(out_norms[b, h, t]) <= 0.2 * mean_v)
    hard_sink = torch.rand(B, H, T, generator=g) < 0.5
    hard_sink[..., 0] = False
    sums = switch_block_sums(out_norms, value_norms, hard_sink, 0, 0.2)
    valid = torch.arange(T) >= 1
    assert torch.equal(sums["n_off_sink"], (off & hard_sink & valid).sum((0, 2)).double())
    assert torch.equal(sums["n_on_nosink"], (~off & ~hard_sink & valid).sum((0, 2)).double())
