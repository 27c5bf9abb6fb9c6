"""The cost-regime sweep: the bigram-backcopy closed forms beside the exact programs at small sizes (they must agree),
and the geometry table's sink feasibility against an independent linear program for (H1)/(H2)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import linprog

from sinkscope.pipelines.cost_regimes import RegimeConfig, predicted_winner, run_cost_regimes, winner
from sinkscope.theory.embeddings import synthetic_embeddings


def in_hull(point: np.ndarray, points: np.ndarray) -> bool:
    n = points.shape[0]
    res = linprog(np.zeros(n), A_eq=np.vstack([points.T, np.ones((1, n))]), b_eq=np.append(point, 1.0),
                  bounds=(0, None), method="highs")  # fmt: skip
    return res.status == 0


def test_sweep_against_closed_forms_and_hull_lp():
    config = RegimeConfig(Vs=(3, 5), Ks=(1,), Ts=(4, 6), ds=(6,), ranks=(2, 6), seeds=2)
    result = run_cost_regimes(config)
    vocab = result["vocabulary"]
    assert len(vocab) == 4
    for pattern in ("sink", "diagonal"):
        np.testing.assert_allclose(vocab[f"{pattern}_exact"], vocab[f"{pattern}_closed"], rtol=2e-5)
    nuclear = vocab[vocab["norm"] == "nuclear"].set_index("V")
    N, V = 4, 5  # closed forms written out: sink κ√(NV/(V+1)), diagonal κ(N − 1 + √(1 − N/(V+1)))
    assert nuclear.loc[5, "sink_closed"] == pytest.approx(math.sqrt(N * V / (V + 1)))
    assert nuclear.loc[5, "diagonal_closed"] == pytest.approx(N - 1 + math.sqrt(1 - N / (V + 1)))
    assert nuclear.loc[5, "cheaper_exact"] == "sink"
    for row in result["geometry"].itertuples():
        Z = synthetic_embeddings("low_rank", row.T, row.d, row.seed, rank=row.rank)
        feasible = not in_hull(np.zeros(row.d), Z[1:]) and not in_hull(Z[0], Z[1:])
        assert (row.sink_status != "infeasible") == feasible, row
        assert math.isfinite(row.diagonal_exact)  # distinct unit vectors: W = I already separates them
    assert set(result["geometry"]["sink_status"]) >= {"infeasible"}  # the low-rank cells reach infeasibility
    assert set(result["summary"]["predicted"]) <= {"sink", "diagonal", "undecided"}


def test_winner_and_prediction():
    assert winner(1.0, 2.0) == "sink" and winner(2.0, 1.0) == "diagonal"
    assert winner(math.inf, 3.0) == "diagonal" and winner(math.inf, math.inf) == "neither"
    assert winner(1.0, 1.0 + 1e-7) == "tie"
    assert predicted_winner(12, 2) == "diagonal"  # P(H1) = 2^-11 (1 + 11)
    assert predicted_winner(4, 8) == "sink"
    assert predicted_winner(8, 8) == "undecided"
