"""The cost sweep (SPEC §6): embedding families, rows, exponent fits, outputs and the CLI."""

import argparse
import json
import math

import numpy as np
import pandas as pd
import pytest

from sinkscope.cli import cost as cost_cli
from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.cost_sweep import (
    COLUMNS,
    CostSweepConfig,
    cost_rows,
    fit_exponents,
    run_cost_sweep,
)
from sinkscope.report.cost_figures import cost_vs_T_figure
from sinkscope.theory.embeddings import synthetic_embeddings


@pytest.mark.parametrize("family", ["orthonormal", "gaussian", "shared_mean", "anti_aligned", "low_rank"])
def test_synthetic_families_have_unit_rows(family):
    Z = synthetic_embeddings(family, T=6, d=12, seed=0, rho=0.6, rank=3)
    assert Z.shape == (7, 12)
    np.testing.assert_allclose(np.linalg.norm(Z, axis=1), 1.0)


def test_family_geometry():
    orthonormal = synthetic_embeddings("orthonormal", T=5, d=9, seed=1)
    np.testing.assert_allclose(orthonormal @ orthonormal.T, np.eye(6), atol=1e-12)
    assert np.linalg.matrix_rank(synthetic_embeddings("low_rank", T=10, d=20, seed=0, rank=3)) == 3
    anti = synthetic_embeddings("anti_aligned", T=40, d=30, seed=0, rho=0.6)
    contexts_mean = anti[1:].mean(axis=0)
    assert anti[0] @ contexts_mean / np.linalg.norm(contexts_mean) < -0.9  # sink opposite the shared mean
    shared = synthetic_embeddings("shared_mean", T=40, d=30, seed=0, rho=0.6)
    assert (shared[1:] @ shared[1:].T)[np.triu_indices(40, 1)].mean() > 0.2  # anisotropic


def test_orthonormal_rows_match_the_closed_forms():
    config = CostSweepConfig(families=("orthonormal",), Ts=(2, 3, 5), kappas=(1.0, 2.0))
    frame = cost_rows(config)
    assert list(frame.columns) == list(COLUMNS)
    assert len(frame) == 3 * 2 * 2 * 2
    np.testing.assert_allclose(frame["cost"], frame["closed_form"], rtol=1e-6)
    sink_nuclear = frame[(frame["pattern"] == "sink") & (frame["norm"] == "nuclear") & (frame["kappa"] == 2.0)]
    np.testing.assert_allclose(sink_nuclear["cost"], [2 * T / math.sqrt(T + 1) for T in sink_nuclear["T"]], 1e-6)


def test_low_dimension_makes_the_sink_infeasible_but_not_the_diagonal():
    # Wendel: 8 zero-mean contexts in the plane lie in a half-space with probability 8/128
    frame = cost_rows(CostSweepConfig(families=("gaussian",), Ts=(8,), ds=(2,), seeds=3, norms=("frobenius",)))
    sink = frame[frame["pattern"] == "sink"]
    assert (sink["status"] == "infeasible").sum() >= 2
    assert np.isinf(sink.loc[sink["status"] == "infeasible", "cost"]).all()
    assert np.isfinite(frame.loc[frame["pattern"] == "diagonal", "cost"]).all()  # unit rows: W = cI works


def test_delta_sets_kappa_per_T():
    frame = cost_rows(CostSweepConfig(families=("orthonormal",), Ts=(2, 4), deltas=(0.1,), kappas=(),
                                      norms=("frobenius",), patterns=("sink",)))
    np.testing.assert_allclose(frame["kappa"], [math.log(T * 0.9 / 0.1) for T in frame["T"]])
    np.testing.assert_allclose(frame["delta"], 0.1)


def test_fit_exponents_recovers_a_power_law():
    Ts = [4, 8, 16, 32]
    rows = [dict(T=T, d=10, family="gaussian", layer=None, seed=s, pattern="sink", norm="nuclear", causal=True,
                 kappa=1.0, delta=math.nan, cost=3.0 * T**1.5 * (1 + 0.01 * s)) for T in Ts for s in range(3)]
    fits = fit_exponents(pd.DataFrame(rows))
    assert len(fits) == 1
    assert fits["exponent"].iloc[0] == pytest.approx(1.5)
    assert fits["prefactor"].iloc[0] == pytest.approx(3.03)


def test_run_writes_every_output_and_refuses_to_clobber(tmp_path):
    out = tmp_path / "run"
    config = CostSweepConfig(families=("orthonormal", "gaussian"), Ts=(2, 4), ds=(3, 6), seeds=1)
    frame = run_cost_sweep(config, out)
    assert sorted(p.name for p in out.iterdir() if p.name != ".sinkscope-result.json") == ["cost.parquet", "figures", "fits.csv", "report.html", "run.json"]
    assert sorted(p.name for p in (out / "figures").iterdir()) == ["cost_vs_T.png", "ratio.png", "regime_map.png"]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "cost.parquet"), frame)
    assert json.loads((out / "run.json").read_text())["config"]["Ts"] == [2, 4]
    with pytest.raises(SinkscopeError, match="--overwrite"):
        run_cost_sweep(config, out)
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_bad_config_is_a_clear_error():
    with pytest.raises(SinkscopeError, match="--family"):
        CostSweepConfig(families=("spherical",))
    with pytest.raises(SinkscopeError, match="--delta"):
        CostSweepConfig(Ts=(1, 4), deltas=(0.6,))


def test_cli_runs_a_small_sweep(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    cost_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(["cost", "--family", "orthonormal", "--T", "2,3", "--norm", "nuclear",
                              "--out", str(tmp_path / "cli")])
    assert args.func(args) == 0
    assert "exponent" in capsys.readouterr().out
    assert len(pd.read_parquet(tmp_path / "cli" / "cost.parquet")) == 4


def test_cost_figure_labels_its_log_axes_with_plain_numbers():
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    frame = cost_rows(CostSweepConfig(families=("orthonormal",), Ts=(2, 4, 8), ds=(3,), seeds=1))
    fig = cost_vs_T_figure(frame)
    FigureCanvasAgg(fig).draw()
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["2", "4", "8"]
    labels = [t.get_text() for t in ax.get_yticklabels(minor=True) + ax.get_yticklabels() if t.get_text()]
    assert labels and not [t for t in labels if "times" in t or "^" in t], labels  # no 2×10⁰ mathtext
    assert all(float(t) > 0 for t in labels)
