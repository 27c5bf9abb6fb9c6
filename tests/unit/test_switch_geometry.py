"""SPEC §3 switch statistics and SPEC §4 BOS geometry against brute-force loops."""

import math

import pytest
import torch

from sinkscope.functional.geometry import bos_cosine, bos_geometry_sums, bos_norm_ratio
from sinkscope.functional.switch import finalize_switch, switch_block_sums, value_drain


def test_value_drain_definition():
    norms = torch.tensor([0.5, 1.0, 2.0, 3.0])
    assert value_drain(norms).item() == pytest.approx(0.5 / 2.0)


def test_switch_table_brute_force():
    g = torch.Generator().manual_seed(0)
    B, H, T, tau = 2, 3, 8, 0.5
    out_norms = torch.rand(B, H, T, generator=g)
    value_norms = torch.rand(B, H, T, generator=g) + 0.5
    hard_sink = torch.rand(B, H, T, generator=g) > 0.5
    hard_sink[..., 0] = False
    sums = switch_block_sums(out_norms, value_norms, hard_sink, 0, tau)
    for h in range(H):
        table = {"n_off_sink": 0, "n_off_nosink": 0, "n_on_sink": 0, "n_on_nosink": 0}
        for b in range(B):
            for t in range(1, T):
                threshold = tau * value_norms[b, h, : t + 1].double().mean().item()  # the keys query t sees
                off = out_norms[b, h, t].item() <= threshold
                sink = bool(hard_sink[b, h, t])
                table[f"n_{'off' if off else 'on'}_{'sink' if sink else 'nosink'}"] += 1
        for name, count in table.items():
            assert sums[name][h].item() == count
        assert sums["ahon"][h].item() == pytest.approx(out_norms[:, h].sum().item(), rel=1e-6)
    sums["value_drain"] = torch.zeros(H, dtype=torch.float64)
    scores = finalize_switch(sums, windows=B, seq_len=T)
    ahon = [out_norms[:, h].double().mean().item() for h in range(H)]  # mean_t ||o_t|| over windows and queries
    assert scores["ahon"].tolist() == pytest.approx(ahon, rel=1e-6)
    assert scores["ahon_ln"].tolist() == pytest.approx([a / (sum(ahon) / H) for a in ahon], rel=1e-6)
    n_off = sums["n_off_sink"] + sums["n_off_nosink"]
    for h in range(H):
        expected = sums["n_off_sink"][h] / n_off[h] if n_off[h] else math.nan
        got = scores["switch_agreement"][h].item()
        assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(float(expected))


def test_bos_geometry_brute_force():
    g = torch.Generator().manual_seed(1)
    x = torch.randn(3, 6, 5, generator=g)
    cos = bos_cosine(x)
    for b in range(3):
        for t in range(1, 6):
            ref = torch.dot(x[b, 0], x[b, t]) / (x[b, 0].norm() * x[b, t].norm())
            assert cos[b, t - 1].item() == pytest.approx(ref.item(), abs=1e-6)
    sums = bos_geometry_sums(x)
    assert sums["cos_nonpos"].item() == int((cos <= 0).sum())
    assert sums["cos_max"].item() == pytest.approx(cos.max().item())
    ratio = bos_norm_ratio(x)
    assert ratio[0].item() == pytest.approx((x[0, 0].norm() / x[0, 1:].norm(dim=-1).mean()).item(), rel=1e-6)
