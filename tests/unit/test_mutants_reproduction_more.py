"""Survivors of a second sampled mutmut run over `reproduction/` (at commit 06acb52, with issue 31's round three;
docs/testing.md, "Mutation tool"), each checked against a hand count written out here."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from sinkscope.functional.switch_routes import ROUTES
from sinkscope.reproduction import figures
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.experiment_claims import prevalence_table
from sinkscope.reproduction.files import write_key
from sinkscope.reproduction.geometry_claims import representability_verdict
from sinkscope.reproduction.judge import corpus_verdicts, sink_query_table
from sinkscope.reproduction.regime_section import regime_key, regime_runs
from sinkscope.reproduction.report import write_tables


def test_a_layer_whose_bos_beats_exactly_the_threshold_share_of_controls_is_beyond_them():
    """4 middle layers, H1 and H2 hold, BOS's γ₂/‖z‖ = 0.5 above 19 of 20 controls: 19/20 = 0.95 =
    `beaten_control_frac` reaches it (≥), so every layer counts."""
    controls = [0.1] * 19 + [0.9]
    layers = [{"layer": layer, "n_contexts": 64, "h1": True, "h2": True, "gamma2_rel": 0.5,
               "control_gamma2_rel": controls} for layer in range(4)]  # fmt: skip
    verdict = representability_verdict("m", layers, width=16)
    assert verdict.thresholds["beaten_control_frac"] == 0.95
    assert (
        verdict.evidence["layers_beyond_control"] == 1.0 and verdict.evidence["mean_controls_beaten"] == 0.95
    )


def test_prevalence_table_is_each_layers_mean_share_per_window():
    """Window 0: layer 0 has 2 sink heads of 2, layer 1 one of 2; window 1: layer 0 one of 2, layer 1 none:
    layer 0 sink share (1 + ½)/2 = ¾, layer 1 (½ + 0)/2 = ¼; the whole model (layer −1) (¾ + ¼)/2 = ½."""
    rows = [(0, 0, "sink"), (0, 0, "sink"), (0, 1, "sink"), (0, 1, "dense"),
            (1, 0, "sink"), (1, 0, "dense"), (1, 1, "dense"), (1, 1, "dense")]  # fmt: skip
    table = prevalence_table(pd.DataFrame(rows, columns=["window", "layer", "class"]))
    sink = table[table["class"] == "sink"].set_index("layer")["share"]
    assert sink.to_dict() == pytest.approx({-1: 0.5, 0: 0.75, 1: 0.25})


def test_sink_query_table_rows_are_the_three_sets_of_one_mode():
    """Δloss of the sink queries (mean over 2 windows), the same heads' and random cells' (mean over windows and
    3 draws), all under the one mode `zero on sink queries`."""
    arrays = {"selected": np.array([0.2, 0.4]), "same_heads": np.array([[0.0, 0.1, 0.2], [0.3, 0.4, 0.5]]),
              "random": np.full((2, 3), 0.05)}  # fmt: skip
    table = sink_query_table(arrays)
    assert table["mode"].tolist() == ["zero on sink queries"] * 3
    assert table["selection"].tolist() == ["sink queries", "same heads, non-sink queries", "random heads and queries"]
    assert table["delta_loss"].tolist() == pytest.approx([0.3, 0.25, 0.05])


def test_corpus_verdicts_judge_oversmoothing_when_the_smoothing_columns_are_there():
    """20 heads with observed Δcos and the measured-moment sign: the oversmoothing verdict is computed (not "no
    smoothing columns")."""
    W, L, T = 8, 4, 16
    arrays = {"nonpos": np.full((W, L), T - 1), "nonpos_control": np.zeros((W, L)), "drain": np.ones((W, L, 1)),
              "hard_sink": np.zeros((W, 1, L, 2)), "mlp_like": np.zeros((W, 1, L))}  # fmt: skip
    switch = {"curve": np.ones((W, 3, 14, 4)), "routes": np.zeros((W, 3, 3, len(ROUTES) + 1))}
    rng = np.random.default_rng(0)
    heads = pd.DataFrame({"layer": np.repeat(np.arange(L), 5), "smooth_dcos_obs": rng.normal(size=20),
                          "smooth_dense_more_measured": rng.random(20) > 0.5})  # fmt: skip
    run = SimpleNamespace(heads=heads, meta={"config": {"tau": 0.1, "delta": 0.1}})
    verdicts = {v.claim: v for v in corpus_verdicts("m", "c", run, arrays, switch, T, 1)}
    assert verdicts["oversmoothing"].reason != "no smoothing columns"


def test_write_tables_writes_and_names_the_regime_cells(tmp_path):
    theory = pd.DataFrame(
        {"T": [2], "pattern": ["sink"], "norm": ["nuclear"], "closed_form": [1.0], "exact": [1.0]}
    )
    regimes = pd.DataFrame({"init": ["zeros"], "bos": [True]})
    names = write_tables(tmp_path, {}, theory, regimes)
    assert names == ["cost_theory.csv", "regime_cells.csv"]
    assert pd.read_csv(tmp_path / "regime_cells.csv").to_dict("records") == [{"init": "zeros", "bos": True}]


def test_quick_reads_a_regime_map_already_in_the_output_directory(tmp_path):
    """`--quick` does not train, but reads `OUT/regimes/` when a full run left it there (the module's words)."""
    pytest.importorskip("sinkscope.synthetic.regimes")
    cells = pd.DataFrame({"init": ["zeros", "zeros"], "variant": "softmax", "weight_decay": 0.0, "bos": [True, False],
                          "bos_mass": [0.9, 0.1], "diag_mass": [0.1, 0.8], "pattern": ["sink", "diagonal"],
                          "agreement": ["a", "b"]})  # fmt: skip
    (tmp_path / "regimes").mkdir()
    cells.to_parquet(tmp_path / "regimes" / "regime_cells.parquet")
    write_key(tmp_path / "regimes", regime_key())  # the quick grid and the base configuration
    got = regime_runs(ReproduceConfig(models=("m",), quick=True), tmp_path)
    assert got["inits"]["zeros"][0]["pattern"] == "sink" and got["inits"]["zeros"][1]["pattern"] == "diagonal"


@pytest.mark.filterwarnings("ignore:No artists with labels")  # the real-layer panel is empty here
def test_anchor_bars_of_two_models_sit_side_by_side_and_the_cost_axis_is_labelled():
    """Two models: bars of width 0.8/2 at x = corpus index + model index · 0.4."""
    anchors = pd.DataFrame({"corpus": ["prose", "random"], "sink_rate": [0.7, 0.2]})
    ax = figures.anchors_figure({"m": {"anchors": anchors}, "n": {"anchors": anchors}}).axes[0]
    assert [p.get_x() + p.get_width() / 2 for p in ax.patches] == pytest.approx([0, 1, 0.4, 1.4])
    theory = pd.DataFrame({"T": [2, 4, 2, 4], "pattern": "sink", "norm": ["nuclear"] * 2 + ["frobenius"] * 2,
                           "closed_form": [1.0, 1.5, 0.8, 1.0], "exact": [1.0, np.nan, np.nan, np.nan]})  # fmt: skip
    ax = figures.cost_figure(theory, {}).axes[0]
    assert ax.get_ylabel() == "min ‖W_QK‖ (κ = 1)" and ax.get_xlabel() == "T (contexts)"


