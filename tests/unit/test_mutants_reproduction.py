"""Survivors of the sampled mutmut run over `reproduction/` (docs/testing.md, "Mutation tool"): each test checks
the evidence tables, figures and sections against hand counts written out here, never the code path under test."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from sinkscope.errors import SinkscopeError
from sinkscope.functional.switch_routes import ROUTES
from sinkscope.reproduction import figures
from sinkscope.reproduction.config import DELTA_SCALES, ReproduceConfig
from sinkscope.reproduction.cost_claims import cost_closed_forms_verdict
from sinkscope.reproduction.cost_section import cost_theory
from sinkscope.reproduction.judge import Measurements, corpus_verdicts, geometry_table, judge_model
from sinkscope.reproduction.plan import model_plan
from sinkscope.reproduction.regime_section import QUICK_REASON, cells_by_init, regime_runs
from sinkscope.reproduction.sink_rate_claims import gu_sink_rate_verdict
from sinkscope.reproduction.strata import rowwise_spearman
from sinkscope.reproduction.switch_claims import mlp_like_verdict, switch_verdict


def test_geometry_table_counts_each_layer_on_its_own():
    """W = 2 windows of T = 6 tokens, L = 3 layers: BOS non-positive against 5, 3, 0 (window 0) and 4, 1, 0
    (window 1) of its T − 1 = 5 others → 9/10, 4/10, 0; the control against T − 2 = 4: 1+3, 0+4, 2+2 of 8."""
    W, T = 2, 6
    nonpos = np.array([[5, 3, 0], [4, 1, 0]])
    control = np.array([[1, 0, 2], [3, 4, 2]])
    mlp_like = np.zeros((W, 1, 3))
    mlp_like[:, 0, 1] = [2, 3]
    run = SimpleNamespace(layers=pd.DataFrame({"layer": [0, 1, 2], "gamma1": [0.1, 0.2, 0.3], "unlisted": 1}))
    frame = geometry_table(run, {"nonpos": nonpos, "nonpos_control": control, "mlp_like": mlp_like}, T)
    assert frame["nonpos_frac_bos"].tolist() == pytest.approx([9 / 10, 4 / 10, 0.0])
    assert frame["nonpos_frac_control"].tolist() == pytest.approx([4 / 8, 4 / 8, 4 / 8])
    assert frame["mlp_like_frac_windows"].tolist() == pytest.approx([0.0, 5 / 10, 0.0])
    assert list(frame.columns[:2]) == ["layer", "gamma1"] and "unlisted" not in frame


def test_rowwise_spearman_of_an_indicator_uses_its_tied_ranks():
    """Layer 0: x = (F, F, T, T), y = 1..4 → ranks (1.5, 1.5, 3.5, 3.5) vs (1, 2, 3, 4): centred (−1, −1, 1, 1)
    · (−1.5, −0.5, 0.5, 1.5) = 4 over 2 · √5; layer 1: x = (T, F, F, F), y = (4, 3, 2, 1) → ranks (4, 2, 2, 2) vs
    (4, 3, 2, 1): centred (2, 0, 0, 0)·(1.5, .5, −.5, −1.5) = 3 over √3 · √5. A bool indicator is a valid x."""
    x = np.array([[False, False, True, True], [True, False, False, False]])
    y = np.array([[1.0, 2, 3, 4], [4, 3, 2, 1]])
    rho, used = rowwise_spearman(x, y)
    expected = (4 / (2 * math.sqrt(5)) + 3 / (math.sqrt(3) * math.sqrt(5))) / 2
    assert used == 2 and rho == pytest.approx(expected, rel=1e-12)


def _cells() -> pd.DataFrame:
    rows = []
    for init in ("zeros", "normal"):  # the grid's order, not the alphabet's
        for variant in ("softmax", "relu"):
            for decay in (0.1, 0.0):
                for bos in (True, False):
                    tag = f"{init}/{variant}/{decay}/{bos}"
                    rows.append({"init": init, "variant": variant, "weight_decay": decay, "bos": bos,
                                 "bos_mass": len(rows) / 100, "diag_mass": 1 - len(rows) / 100, "pattern": tag,
                                 "agreement": f"a{len(rows)}"})  # fmt: skip
    rows.append({"init": "orphan", "variant": "softmax", "weight_decay": 0.0, "bos": True, "bos_mass": 0.5,
                 "diag_mass": 0.5, "pattern": "x", "agreement": "x"})  # fmt: skip
    return pd.DataFrame(rows)


def test_cells_by_init_reads_softmax_at_the_smallest_decay_in_the_grids_order():
    """Rows 0–15 are init × variant × decay × bos in that order; softmax at decay 0 is rows 2, 3 (zeros) and
    10, 11 (normal); an init without both BOS settings is left out."""
    out = cells_by_init(_cells())
    assert list(out) == ["zeros", "normal"]
    for init, (with_bos, without) in zip(("zeros", "normal"), ((2, 3), (10, 11))):
        assert out[init][0] == {"bos_mass": with_bos / 100, "diag_mass": 1 - with_bos / 100,
                                "pattern": f"{init}/softmax/0.0/True", "agreement": f"a{with_bos}"}  # fmt: skip
        assert (
            out[init][1]["pattern"] == f"{init}/softmax/0.0/False"
            and out[init][1]["agreement"] == f"a{without}"
        )


def test_regime_runs_says_why_when_switched_off_and_when_quick(tmp_path):
    off = regime_runs(ReproduceConfig(models=("m",), regimes=False, quick=True), tmp_path)
    assert off == {"reason": "the regime map was switched off (regimes=False)"}
    quick = regime_runs(ReproduceConfig(models=("m",), regimes=True, quick=True), tmp_path)
    assert quick == {"reason": QUICK_REASON}


# --- figures: what each draws, read back from the matplotlib objects ---


def test_ablation_figure_bars_are_the_mean_loss_change_of_each_set_in_its_colour():
    """Five bars in the order sink-like zero, dormant zero, random zero, sink-like → BOS, random → BOS; each the
    mean of its rows' Δ loss (hand means below), the dots every row."""
    rows = [("zero", "highest-hard-sink", 0.4), ("zero", "highest-hard-sink", 0.6), ("zero", "lowest-ahon-ln", 0.1),
            ("zero", "random", 0.02), ("zero", "random", 0.04), ("zero", "random", 0.06), ("bos", "highest-hard-sink",
            0.3), ("bos", "random", -0.01)]  # fmt: skip
    curve = pd.DataFrame(rows, columns=["mode", "selection", "delta_loss"])
    ax = figures.ablation_figure({"m": {"ablation": curve}}).axes[0]
    heights = [patch.get_height() for patch in ax.patches]
    assert heights == pytest.approx([0.5, 0.1, 0.04, 0.3, -0.01])
    assert [to_hex(p.get_facecolor()[:3]) for p in ax.patches] == ["#c0392b", "#7d3c98", "#909497", "#e59866",
                                                                   "#bfc9ca"]  # fmt: skip
    assert [t.get_text() for t in ax.get_xticklabels()][1] == "dormant\nzero" and ax.get_title() == "m"


def test_smoothing_and_switch_figures_label_their_axes_and_panels():
    heads = pd.DataFrame({"smooth_dcos_pred": [0.1, -0.2], "smooth_dcos_obs": [0.05, -0.1]})
    ax = figures.smoothing_figure({"model-a": {"heads": heads}}).axes[0]
    (dots,) = ax.collections
    assert dots.get_offsets().tolist() == [[0.1, 0.05], [-0.2, -0.1]] and dots.get_sizes().tolist() == [8]
    assert (ax.get_xlabel(), ax.get_ylabel(), ax.get_title()) == ("predicted Δcos (λ: 0 → 1)", "observed Δcos",
                                                                  "model-a")  # fmt: skip
    switch = pd.DataFrame({"delta_scale": [1.0, 1.0, 2.0], "tau": [0.1, 0.2, 0.1], "corpus": "c",
                           "p_sink_given_off": [0.9, 0.8, 0.1], "p_off_given_sink": [0.3, 0.4, 0.5]})  # fmt: skip
    ax = figures.switch_figure({"model-b": {"switch": switch}}).axes[0]
    assert ax.get_title() == "model-b" and [line.get_ydata().tolist() for line in ax.lines] == [[0.9, 0.8],
                                                                                               [0.3, 0.4]]  # fmt: skip


def test_anchors_legend_and_weight_jitter():
    anchors = pd.DataFrame({"corpus": ["prose", "random"], "sink_rate": [0.7, 0.2]})
    ax = figures.anchors_figure({"m": {"anchors": anchors}, "n": {"anchors": anchors}}).axes[0]
    assert ax.get_legend().get_texts()[0].get_fontsize() == 7
    assert [p.get_height() for p in ax.patches] == pytest.approx([0.7, 0.2, 0.7, 0.2])
    weights = pd.DataFrame({"is_sink": [True] * 20 + [False] * 20, "qk_effective_rank": np.arange(40.0),
                            "qk_bos_gain": 1.0, "vo_bos_gain": 2.0})  # fmt: skip
    fig = figures.weights_figure({"m": {"weights": weights}})
    for ax in fig.axes:
        dots = [line for line in ax.lines if line.get_linestyle() == "None" and line.get_marker() == "."]
        assert len(dots) == 2
        for x, line in enumerate(dots, 1):  # jitter within ±0.15 of the box's position
            assert np.all(np.abs(np.asarray(line.get_xdata()) - x) <= 0.15) and line.get_xdata().size == 20


def _measurements(corpora: tuple[str, ...], W: int = 8, L: int = 4, H: int = 2, T: int = 16) -> Measurements:
    """Per corpus i (1, 2, …): BOS non-positive against T − 1 − i of its others in layer i mod L, T − 1 elsewhere;
    run.json's summary numbers 0.1·i, 0.2·i, 0.3·i and W + i windows; no ablation, costs or certificates."""
    runs, evidence, switch = {}, {}, {}
    for i, corpus in enumerate(corpora, 1):
        nonpos = np.full((W, L), T - 1)
        nonpos[:, i % L] = T - 1 - i
        evidence[corpus] = {"nonpos": nonpos, "nonpos_control": np.zeros((W, L)), "drain": np.ones((W, L, 1)),
                            "hard_sink": np.zeros((W, 1, L, H)), "mlp_like": np.zeros((W, 1, L)),
                            "sink_column": np.ones((W, L, H))}  # fmt: skip
        routes = np.zeros((W, 3, 3, len(ROUTES) + 1))
        routes[:, 1, 1, :3] = [95, 2, 3]
        switch[corpus] = {"curve": np.ones((W, 3, 14, 4)), "routes": routes,
                          "routes_by_layer": np.ones((W, L, len(ROUTES) + 1))}  # fmt: skip
        heads = pd.DataFrame({"layer": [0], "head": [0], "head_class": ["sink"], "sink_score": [0.5],
                              "hard_sink_frac": [0.4]})  # fmt: skip
        meta = {
            "config": {"tau": 0.1, "delta": 0.1},
            "model": {"head_dim": 8},  # the level of weights_low_rank is read against it
            "corpus": {"windows": W + i},
            "summary": {"sink_rate": 0.1 * i, "sink_rate_of_mean": 0.2 * i, "mean_sink_score": 0.3 * i},
        }
        runs[corpus] = SimpleNamespace(heads=heads, layers=pd.DataFrame({"layer": range(L)}), meta=meta)
    return Measurements(runs=runs, ablation=pd.DataFrame(columns=["mode", "selection", "n_heads", "fraction",
                                                                  "delta_loss"]),
                        costs=pd.DataFrame(), weights=pd.DataFrame({"layer": [0], "head": [0],
                                                                    "qk_effective_rank": [1.0]}),
                        evidence=evidence, certificates=pd.DataFrame(),
                        alignment=pd.DataFrame({"layer": [0], "head": [0], "qk_pq_score": [0.1]}), sink_queries={},
                        switch=switch)  # fmt: skip


def test_judge_model_tables_carry_each_corpus_own_numbers():
    """The anchors table is each corpus's run.json summary; the geometry table each corpus's per-layer counts:
    corpus i has (T − 1 − i)/(T − 1) in layer i, 1 elsewhere (T = 16)."""
    corpora = ("builtin:prose", "builtin:random")
    config = ReproduceConfig(models=("m",), corpora=corpora, seq_len=16)
    _, tables = judge_model("m", config, _measurements(corpora))
    anchors = tables["anchors"]
    assert anchors.to_dict("records") == [
        {"corpus": "builtin:prose", "sink_rate": 0.1, "sink_rate_of_mean": 0.2, "mean_sink_score": 0.3,
         "windows": 9},
        {"corpus": "builtin:random", "sink_rate": 0.2, "sink_rate_of_mean": 0.4, "mean_sink_score": 0.6,
         "windows": 10},
    ]  # fmt: skip
    geometry = tables["geometry"]
    for i, corpus in enumerate(corpora, 1):
        got = geometry[geometry["corpus"] == corpus].set_index("layer")["nonpos_frac_bos"]
        expected = [(15 - i) / 15 if layer == i else 1.0 for layer in range(4)]
        assert got.tolist() == pytest.approx(expected)
    drain = tables["value_drain"]
    assert list(drain.columns) == ["layer", "kv_head", "value_drain", "max_hard_sink_frac", "corpus"]
    assert len(drain) == 8 and drain["value_drain"].eq(1.0).all()


COUNTS = ("windows", "anchor_windows", "ablation_windows", "random_draws", "bos_draws", "cost_windows",
          "cost_layer_stride", "smoothing_layer_stride", "certificate_windows", "certificate_controls")  # fmt: skip


@pytest.mark.parametrize("name", COUNTS)
def test_a_count_below_one_is_refused_by_name(name):
    with pytest.raises(SinkscopeError, match=f"^{name} 0 must be at least 1$"):
        ReproduceConfig(models=("m",), **{name: 0})


def test_quick_preset_uses_less_of_every_count_and_two_bos_draws():
    """--quick: every count at most the full setting's; the draws (random and BOS) are 2."""
    full, quick = ReproduceConfig.preset(models=("m",)), ReproduceConfig.preset(True, models=("m",))
    assert all(getattr(quick, name) <= getattr(full, name) for name in COUNTS if "stride" not in name)
    assert (quick.random_draws, quick.bos_draws) == (2, 2) and full.bos_draws > 2 and quick.quick


def test_the_plan_runs_three_delta_passes_on_the_main_corpora_unless_quick(tmp_path):
    full = model_plan("m", ReproduceConfig(models=("m",), corpora=("builtin:prose",)), tmp_path)
    assert full.evidence["builtin:prose"].key["delta_scales"] == [0.5, 1.0, 2.0] == list(DELTA_SCALES)
    assert full.evidence["builtin:random"].key["delta_scales"] == [1.0]  # an anchor corpus: δ alone
    quick = model_plan("m", ReproduceConfig(models=("m",), corpora=("builtin:prose",), quick=True), tmp_path)
    assert quick.evidence["builtin:prose"].key["delta_scales"] == [1.0]


def test_cost_theory_is_written_where_the_layout_says(tmp_path):
    """docs/reproduction.md: `theory/cost/` under the output directory."""
    frame = cost_theory(ReproduceConfig(models=("m",), cost_exact_Ts=(2,)), tmp_path)
    written = pd.read_parquet(tmp_path / "theory" / "cost" / "cost_theory.parquet")
    assert written.equals(frame) and sorted(p.name for p in tmp_path.iterdir()) == ["theory"]


def test_cost_closed_forms_evidence_names_its_inputs():
    verdict = cost_closed_forms_verdict("m", 0.5, 1.0, 0.0)
    assert {k: verdict.evidence[k] for k in ("sink_exponent", "diagonal_exponent", "exact_rel_error")} == {
        "sink_exponent": 0.5,
        "diagonal_exponent": 1.0,
        "exact_rel_error": 0.0,
    }
    assert verdict.verdict == "supported"


def test_not_measurable_verdicts_keep_their_thresholds():
    gu = gu_sink_rate_verdict("m", {"natural": np.ones((8, 2, 2))})
    assert gu.verdict == "not measurable here" and gu.thresholds == {"epsilon": 0.3, "present_rate": 0.2}
    mlp = mlp_like_verdict("m", np.zeros((0, 4)), 15)
    assert mlp.thresholds == {} and mlp.to_dict()["thresholds"] == {}


def test_switch_verdict_interval_is_over_windows_and_partly_min_varies_on_the_odds_scale():
    """W = 12 windows of per-head counts; halving or doubling `partly_min` = x acts on its odds: x/(1 − x) · s
    mapped back by o/(1 + o) (docs: fractions on the odds scale)."""
    rng = np.random.default_rng(3)
    counts = rng.integers(1, 20, size=(12, 3, 3, 2, 3, 3)).astype(float)
    arrays = {"head_counts": counts, "head_drain": rng.random((12, 2, 3)) / 5, "tau": np.array(0.1),
              "delta": np.array(0.1)}  # fmt: skip
    verdict = switch_verdict("m", arrays, 63, 0.1, seed=1)
    assert verdict.interval["over"] == "windows" and verdict.interval["n"] == 12
    x = verdict.thresholds["partly_min"]
    for scale in (0.5, 2.0):
        (record,) = [r for r in verdict.sensitivity if r["threshold"] == "partly_min" and r["scale"] == scale]
        odds = x / (1 - x) * scale
        assert record["value"] == pytest.approx(odds / (1 + odds), rel=1e-12)


def test_value_drain_fractions_are_out_of_t_minus_one_queries():
    """L = 4 layers, 2 heads on one KV head, T = 16 → 15 queries: head 0 hard-sinks on 0, 3, 6, 9 per window
    (fractions 0, .2, .4, .6), drains 4, 3, 2, 1. The sink groups are those with fraction ≥ the threshold."""
    W, L, T = 8, 4, 16
    hard = np.zeros((W, 1, L, 2))
    hard[:, 0, :, 0] = [0, 3, 6, 9]
    drains = np.broadcast_to(np.array([4.0, 3, 2, 1])[None, :, None], (W, L, 1)).copy()
    arrays = {"nonpos": np.full((W, L), T - 1), "nonpos_control": np.zeros((W, L)), "drain": drains,
              "hard_sink": hard, "mlp_like": np.zeros((W, 1, L))}  # fmt: skip
    routes = np.zeros((W, 3, 3, len(ROUTES) + 1))
    routes[:, 1, 1, :3] = [95, 2, 3]
    switch = {"curve": np.ones((W, 3, 14, 4)), "routes": routes}
    run = SimpleNamespace(heads=pd.DataFrame({"layer": [0]}), meta={"config": {"tau": 0.1, "delta": 0.1}})
    drain = {v.claim: v for v in corpus_verdicts("m", "c", run, arrays, switch, T, 1)}["value_drain"]
    threshold = drain.thresholds["sink_head_hard_frac"]
    fractions = np.array([0, 3, 6, 9]) / 15
    sink = fractions >= threshold
    assert 0 < sink.sum() < 4  # the threshold splits the groups
    assert drain.evidence["n_sink_groups"] == sink.sum()
    assert drain.evidence["median_drain_sink_groups"] == np.median(np.array([4.0, 3, 2, 1])[sink])
    assert drain.evidence["rho_all_groups"] == pytest.approx(-1.0)
