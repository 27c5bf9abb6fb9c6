"""Learned sinks (gpt-oss's `s_aux` column): the block attention against a dense float64 softmax over
[logits, sink], the streaming sums against loops, and the "learned sink" head class on hand-made scores."""

import math

import pytest
import torch

from sinkscope.capture.learned_sink import learned_sink_attention
from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.functional.learned_sink import (
    hard_learned_sink_frac,
    learned_sink_block_sums,
    learned_sink_score,
)


def dense_reference(q, k, v, allowed, scaling, sinks):
    """Per (b, h, t): softmax over the allowed keys' logits and the sink logit, in float64, by loops."""
    B, H, T, _ = q.shape
    group = H // k.shape[1]
    A, m = torch.zeros(B, H, T, T, dtype=torch.float64), torch.zeros(B, H, T, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                keys = [j for j in range(T) if allowed[t, j]]
                logits = torch.stack([scaling * q[b, h, t].double() @ k[b, h // group, j].double() for j in keys])
                p = torch.softmax(torch.cat([logits, sinks[h].double().view(1)]), 0)
                A[b, h, t, keys], m[b, h, t] = p[:-1], p[-1]
    out = A @ v.double().repeat_interleave(group, 1)
    return A, m, out


@pytest.mark.parametrize("mask", ["causal", "window", "additive"])
@pytest.mark.parametrize("rows", [1, 3, 7])
def test_block_attention_equals_the_dense_softmax_with_its_sink_column(mask, rows):
    g = torch.Generator().manual_seed(0)
    B, H, KV, T, D = 2, 4, 2, 7, 5
    q, k, v = (torch.randn(B, n, T, D, generator=g) for n in (H, KV, KV))
    sinks = torch.tensor([-2.0, 0.0, 1.5, 4.0])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    allowed = causal & (torch.arange(T)[:, None] - torch.arange(T)[None] < 3) if mask == "window" else causal
    attention_mask = {"causal": None, "window": allowed.view(1, 1, T, T).expand(B, 1, T, T),
                      "additive": torch.where(allowed, 0.0, torch.finfo(torch.float32).min).view(1, 1, T, T)}[mask]
    A, m, out = dense_reference(q, k, v, allowed, 0.4, sinks)
    seen = {"probs": torch.zeros(B, H, T, T), "mass": torch.zeros(B, H, T), "entropy": torch.zeros(B, H, T)}

    def on_block(start, probs, entropy, block, mass):
        Q = mass.shape[-1]
        seen["probs"][:, :, start : start + Q, : probs.shape[-1]] = probs
        seen["mass"][:, :, start : start + Q] = mass
        seen["entropy"][:, :, start : start + Q] = entropy

    got = learned_sink_attention(q, k, v, attention_mask, 0.4, sinks, rows, on_block)
    torch.testing.assert_close(got.transpose(1, 2).double(), out, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(seen["probs"].double(), A, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(seen["mass"].double(), m, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(seen["probs"].sum(-1).double() + seen["mass"].double(), torch.ones(B, H, T,
                                                                                                    dtype=torch.float64))
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    torch.testing.assert_close(seen["entropy"].double(), -plogp.sum(-1), atol=1e-5, rtol=1e-5)


def test_scores_on_hand_made_masses():
    mass = torch.tensor([[0.2, 0.95, 0.5, 0.9]])
    assert learned_sink_score(mass).item() == pytest.approx(2.55 / 4)
    assert hard_learned_sink_frac(mass, delta=0.1).item() == pytest.approx(2 / 3)  # t ≥ 1: 0.95 and 0.9


def test_block_sums_equal_loops_and_do_not_depend_on_the_block_cut():
    g = torch.Generator().manual_seed(3)
    B, H, T, delta, tau = 3, 2, 9, 0.3, 0.5
    mass = torch.rand(B, H, T, generator=g)
    out_norms, value_norms = torch.rand(B, H, T, generator=g), torch.rand(B, H, T, generator=g) + 0.5
    hard_sink, hard_diag = torch.rand(B, H, T, generator=g) > 0.7, torch.rand(B, H, T, generator=g) > 0.8
    hard_sink[..., 0] = hard_diag[..., 0] = False
    expected = {k: torch.zeros(H, dtype=torch.float64) for k in ("mass", "hard", "n_off", "n_off_learned",
                                                                  "n_off_any_sink")}
    silent = 0
    for b in range(B):
        for t in range(T):
            every = True
            for h in range(H):
                expected["mass"][h] += mass[b, h, t].item()
                if t == 0:
                    continue
                hard = mass[b, h, t].item() >= 1 - delta
                off = out_norms[b, h, t].item() <= tau * value_norms[b, h, : t + 1].double().mean().item()
                expected["hard"][h] += hard
                expected["n_off"][h] += off
                expected["n_off_learned"][h] += off and hard
                expected["n_off_any_sink"][h] += off and (hard or bool(hard_sink[b, h, t]))
                every = every and (hard or bool(hard_sink[b, h, t]) or bool(hard_diag[b, h, t]))
            silent += t > 0 and every
    for cuts in ([0, T], [0, 1, 4, T], [0, 5, 8, T]):
        total = {k: torch.zeros(H, dtype=torch.float64) for k in expected}
        count = 0.0
        for start, stop in zip(cuts[:-1], cuts[1:]):
            block = slice(start, stop)
            sums, quiet = learned_sink_block_sums(mass[..., block], out_norms[..., block], value_norms,
                                                  hard_sink[..., block], hard_diag[..., block], start, delta, tau)
            count += quiet.sum().item()
            for key, value in sums.items():
                total[key] += value
        for key in expected:
            torch.testing.assert_close(total[key], expected[key], msg=f"{key} {cuts}")
        assert count == silent
    assert expected["n_off_learned"].sum() > 0 and expected["hard"].sum() > 0


def test_learned_sink_class_comes_first_when_the_learned_sink_takes_more_than_bos():
    th = HeadThresholds(sink=0.3, learned_sink=0.3)
    assert classify_head(0.1, 0.0, 0.0, 0.5, thresholds=th, learned_sink=0.6) == "learned sink"
    assert classify_head(0.5, 0.0, 0.0, 0.5, thresholds=th, learned_sink=0.4) == "sink"  # BOS takes more
    assert classify_head(0.1, 0.0, 0.0, 0.9, thresholds=th, learned_sink=0.3) == "dense"  # not above the threshold
    assert classify_head(0.1, 0.6, 0.0, 0.5, thresholds=HeadThresholds(), learned_sink=0.0) == "diagonal"
    assert classify_head(0.1, 0.6, 0.0, 0.5, row_mass=0.2, gate=math.nan, learned_sink=0.8) == "null"
