"""The cost-regime sweep checked whole: every column of the geometry and vocabulary tables against the closed forms
written out (Wendel's count, the orthonormal costs, the prediction rule), the summary by hand from the geometry
rows, costs linear in κ, the refusals read whole, `winner` at its tolerance, and `save_cost_regimes`'s files read
back (mutmut draw 54)."""

from __future__ import annotations

import html
import json
import math
import re
import time

import numpy as np
import pandas as pd
import pytest

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.cost_regimes import RegimeConfig, run_cost_regimes, save_cost_regimes, winner

CONFIG = RegimeConfig(Vs=(2, 4), Ks=(3, 1),  # V = 2 skips K = 3, then takes K = 1
                      Ts=(3, 5), ds=(4,), ranks=(2, 4, 5), seeds=2)


def _hand_winner(sink: float, diagonal: float) -> str:
    if math.isinf(sink) and math.isinf(diagonal):
        return "neither"
    if math.isinf(sink) or math.isinf(diagonal):
        return "sink" if math.isinf(diagonal) else "diagonal"
    if abs(sink - diagonal) <= 1e-4 * max(sink, diagonal):
        return "tie"
    return "sink" if sink < diagonal else "diagonal"


@pytest.fixture
def result():  # per test, not per module: mutmut maps a mutant to the tests whose own run calls its function
    before = time.perf_counter()
    out = run_cost_regimes(CONFIG)
    out["elapsed"] = time.perf_counter() - before
    return out


def test_geometry_rows_against_the_closed_forms(result):
    geometry = result["geometry"]
    assert [(r.T, r.d, r.rank, r.seed) for r in geometry.itertuples()] == [
        (T, 4, rank, seed) for T in (3, 5) for rank in (2, 4) for seed in (0, 1)]  # rank 5 > d = 4 is skipped
    for row in geometry.itertuples():
        wendel = sum(math.comb(row.T - 1, k) for k in range(min(row.rank, row.T))) / 2 ** (row.T - 1)
        assert row.p_h1 == pytest.approx(wendel)
        assert row.sink_orthonormal == pytest.approx(row.T / math.sqrt(row.T + 1))
        assert row.diagonal_orthonormal == pytest.approx(sum(math.sqrt(i / (i + 1)) for i in range(1, row.T + 1)))
        rule = "diagonal" if wendel < 0.5 else ("sink" if row.rank >= row.T + 1 else "undecided")
        assert row.cheaper_predicted == rule
        assert row.cheaper_exact == _hand_winner(row.sink_exact, row.diagonal_exact)
        assert row.agree == (row.cheaper_exact == rule)
        assert (row.sink_status == "infeasible") == math.isinf(row.sink_exact)
        assert row.diagonal_status != "infeasible" and math.isfinite(row.diagonal_exact)
    assert set(geometry["cheaper_predicted"]) >= {"sink", "undecided"}


def test_vocabulary_rows_and_summary_by_hand(result):
    vocabulary = result["vocabulary"]
    assert [(r.V, r.K, r.N, r.norm) for r in vocabulary.itertuples()] == [
        (2, 1, 1, "nuclear"), (2, 1, 1, "frobenius"), (4, 3, 1, "nuclear"), (4, 3, 1, "frobenius"),
        (4, 1, 3, "nuclear"), (4, 1, 3, "frobenius")]  # fmt: skip
    for row in vocabulary.itertuples():
        assert row.cheaper_closed == _hand_winner(row.sink_closed, row.diagonal_closed)
        assert row.cheaper_exact == _hand_winner(row.sink_exact, row.diagonal_exact)
        assert row.sink_exact == pytest.approx(row.sink_closed, rel=2e-5)
        assert row.diagonal_exact == pytest.approx(row.diagonal_closed, rel=2e-5)
        if row.norm == "nuclear":
            assert row.sink_closed == pytest.approx(math.sqrt(row.N * row.V / (row.V + 1)))
            assert row.diagonal_closed == pytest.approx(row.N - 1 + math.sqrt(1 - row.N / (row.V + 1)))
    summary = result["summary"].set_index(["T", "d", "rank"])
    geometry = result["geometry"]
    for (T, _d, rank), got in summary.iterrows():
        seeds = geometry[(geometry["T"] == T) & (geometry["rank"] == rank)]
        assert got["diagonal_cheaper"] == pytest.approx(sum(seeds["cheaper_exact"] == "diagonal") / 2)
        assert got["sink_feasible"] == pytest.approx(sum(seeds["sink_status"] != "infeasible") / 2)
        assert got["p_h1"] == seeds["p_h1"].iloc[0] and got["predicted"] == seeds["cheaper_predicted"].iloc[0]
        assert got["agree"] == pytest.approx(seeds["agree"].mean()) and got["seeds"] == 2
    assert len(summary) == 4
    assert set(summary["sink_feasible"]) != {0.0} and set(summary["diagonal_cheaper"]) != {0.0}

def test_costs_are_linear_in_kappa(result):
    doubled = run_cost_regimes(RegimeConfig(Vs=(4,), Ks=(1,), Ts=(3,), ds=(4,), ranks=(4,), seeds=1, kappa=2.0))
    one = result["vocabulary"].query("V == 4 and K == 1").reset_index(drop=True)
    for column in ("sink_closed", "diagonal_closed", "sink_exact", "diagonal_exact"):
        np.testing.assert_allclose(doubled["vocabulary"][column], 2 * one[column], rtol=1e-4)
    base = result["geometry"].query("T == 3 and rank == 4 and seed == 0").iloc[0]
    got = doubled["geometry"].iloc[0]
    for column in ("sink_exact", "diagonal_exact", "sink_orthonormal", "diagonal_orthonormal"):
        assert got[column] == pytest.approx(2 * base[column], rel=1e-4)


def test_refusals_read_whole():
    for fields, message in (
        ({"Ts": ()}, "--ts must be one or more positive integers"),
        ({"ranks": (0, 2)}, "--ranks must be one or more positive integers"),
        ({"Vs": (0, 3)}, "--vs must be one or more positive integers"),
        ({"ds": ()}, "--ds must be one or more positive integers"),
        ({"Ks": (0,)}, "--ks must be one or more positive integers (trigger counts K)"),
        ({"seeds": 0}, "--seeds 0 must be ≥ 1 and --kappa 1.0 a finite number > 0"),
        ({"kappa": math.inf}, "--seeds 3 must be ≥ 1 and --kappa inf a finite number > 0"),
        ({"Vs": (2, 3), "Ks": (3, 4)}, "--vs 2,3 --ks 3,4: no vocabulary size exceeds a trigger count, so the "
         "bigram-backcopy table would be empty; give some V > K (e.g. --vs 3,4 --ks 1)"),
        ({"ranks": (17, 20), "ds": (8, 16)}, "--ranks 17,20 --ds 8,16: every rank exceeds every width d (a rank-r "
         "embedding needs r ≤ d), so the geometry table would be empty; give some rank ≤ d (e.g. --ranks 2,4 --ds 16)"),
    ):  # fmt: skip
        with pytest.raises(SinkscopeError) as error:
            RegimeConfig(**fields)
        assert str(error.value) == message, fields
    RegimeConfig(Vs=(2,), Ks=(1,), ranks=(16,), ds=(16,), seeds=1, kappa=1e-9)  # each at its cut
    RegimeConfig(Vs=(2,), Ks=(1,), Ts=(1,), ds=(1,), ranks=(1,))  # 1 is a positive integer


def test_winner_at_its_tolerance():
    assert winner(1.0, 1.0 + 1e-4) == "tie" and winner(1.0 + 1e-4, 1.0) == "tie"
    assert winner(1.0, 1.0 + 1.001e-4 * 1.0002) == "sink" and winner(1.0 + 1.001e-4 * 1.0002, 1.0) == "diagonal"
    assert winner(2.0, 2.1, rtol=0.05) == "tie" and winner(2.1, 2.0, rtol=0.04) == "diagonal"
    assert winner(3.0, math.inf) == "sink"


def test_saved_files(result, tmp_path):
    meta = result["meta"]
    assert meta["config"] == {"Vs": (2, 4), "Ks": (3, 1), "Ts": (3, 5), "ds": (4,), "ranks": (2, 4, 5), "seeds": 2,
                              "kappa": 1.0}  # fmt: skip
    assert 0 < meta["timings"]["seconds"] <= result["elapsed"]
    out = save_cost_regimes(tmp_path / "cr", result)
    for name in ("vocabulary", "geometry", "summary"):
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"regimes_{name}.parquet"), result[name])
    assert json.loads((out / "cost_regimes.json").read_text()) == json.loads(json.dumps(meta))
    assert (out / "figures" / "cost_regimes.png").read_bytes()[:4] == b"\x89PNG"
    page = html.unescape((out / "report.html").read_text())
    table = page.split("<table>")[1].split("</table>")[0]
    assert dict(re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td></tr>", table)) == {
        "Vs": "2, 4", "Ks": "3, 1", "Ts": "3, 5", "ds": "4", "ranks": "2, 4, 5", "seeds": "2", "kappa": "1.0",
        "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    assert re.findall(r"<title>(.*?)</title>", page) == ["sinkscope cost-regimes"]
    assert re.findall(r"<figcaption>(.*?)</figcaption>", page) == ["Sink vs diagonal cost regimes"]
    intro = re.search(r"</h1>\n<p>(.*?)</p>", page, re.S).group(1)
    assert intro.startswith("Where the sink and where the diagonal pattern is the cheaper W_QK: the bigram-backcopy")
    assert intro.endswith("Wendel's feasibility probability and the orthonormal closed forms). Definitions in "
                          "docs/experiments.md.")  # fmt: skip
    assert re.findall(r"<h2>(.*?)</h2>", page)[:2] == ["Per (T, d, rank) (regimes_summary.parquet)",
                                                       "Bigram-backcopy, vocabulary level (regimes_vocabulary.parquet)"]
    with pytest.raises(SinkscopeError):
        save_cost_regimes(out, result)
    save_cost_regimes(out, result, overwrite=True)
