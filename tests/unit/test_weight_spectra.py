"""Weight spectra (functional/weights.py) against brute-force numpy SVDs of the full d×d products."""

import numpy as np
import pytest
import torch

from sinkscope.functional.weights import (
    effective_rank,
    factored_svd,
    nuclear_frobenius_ratio,
    probe_alignment,
)


def test_factored_svd_matches_numpy_on_the_product():
    rng = np.random.default_rng(0)
    left, right = rng.normal(size=(3, 20, 4)), rng.normal(size=(3, 4, 20))
    u, s, vh = factored_svd(torch.from_numpy(left), torch.from_numpy(right))
    for h in range(3):
        full = left[h] @ right[h]
        expected = np.linalg.svd(full, compute_uv=False)[:4]
        np.testing.assert_allclose(s[h].numpy(), expected, rtol=1e-10)
        np.testing.assert_allclose((u[h] * s[h]) @ vh[h], full, atol=1e-10)


def test_ratio_and_effective_rank_on_hand_made_spectra():
    rank_one = torch.tensor([3.0, 0.0, 0.0, 0.0])
    flat = torch.tensor([2.0, 2.0, 2.0, 2.0])
    assert nuclear_frobenius_ratio(rank_one).item() == pytest.approx(1.0)
    assert nuclear_frobenius_ratio(flat).item() == pytest.approx(2.0)  # sqrt(4)
    assert effective_rank(rank_one).item() == pytest.approx(1.0)
    assert effective_rank(flat).item() == pytest.approx(4.0)
    p = np.array([3.0, 1.0]) / 4
    assert effective_rank(torch.tensor([3.0, 1.0])).item() == pytest.approx(np.exp(-(p * np.log(p)).sum()))


def test_probe_alignment_brute_force():
    rng = np.random.default_rng(1)
    left, right, probe = rng.normal(size=(12, 3)), rng.normal(size=(3, 12)), rng.normal(size=12)
    W = left @ right
    U, S, Vh = np.linalg.svd(W)
    unit = probe / np.linalg.norm(probe)
    u, s, vh = factored_svd(torch.from_numpy(left), torch.from_numpy(right))
    align, gain = probe_alignment(u, s, vh, torch.from_numpy(probe), "right")
    assert align.item() == pytest.approx(abs(Vh[0] @ unit))
    assert gain.item() == pytest.approx(np.linalg.norm(W @ unit) / S[0])
    align, gain = probe_alignment(u, s, vh, torch.from_numpy(probe), "left")
    assert align.item() == pytest.approx(abs(U[:, 0] @ unit))
    assert gain.item() == pytest.approx(np.linalg.norm(unit @ W) / S[0])


def test_probe_on_the_top_direction_and_in_the_null_space():
    u, s, vh = factored_svd(torch.eye(4)[:, :2] * torch.tensor([2.0, 1.0]), torch.eye(4)[:2])
    assert probe_alignment(u, s, vh, torch.tensor([5.0, 0, 0, 0]), "right")[1].item() == pytest.approx(1.0)
    assert probe_alignment(u, s, vh, torch.tensor([0, 0, 1.0, 0]), "right")[1].item() == pytest.approx(0.0)
