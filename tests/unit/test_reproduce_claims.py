"""Verdict functions of `sinkscope reproduce` on constructed numbers: every verdict of every claim is reachable."""

import json
import math

import pytest

from sinkscope.reproduction import claims as c

M = "m"


def verdicts(*results):
    return [r.verdict for r in results]


def test_middle_layers():
    assert c.middle_layers(9) == [2, 3, 4, 5, 6]
    assert c.middle_layers(1) == [0]
    assert c.middle_layers(2) == [1]  # fallback when no layer lies in [1/4, 3/4] of depth


def test_geometry():
    L = 8
    assert verdicts(
        c.geometry_verdict(M, [1.0] * L, [-0.1] * L),
        c.geometry_verdict(M, [1.0, 1.0, 0.99, 0.1, 0.2, 0.2, 0.0, 0.0], [0.5] * L),
        c.geometry_verdict(M, [0.0] * L, [0.9] * L),
        c.geometry_verdict(M, [], []),
        c.geometry_verdict(M, [math.nan] * L, [0.0] * L),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE, c.NOT_MEASURABLE]


def test_representability():
    assert verdicts(
        c.representability_verdict(M, [0.1] * 8),
        c.representability_verdict(M, [0, 0, 0.1, 0, 0, 0, 0, 0]),
        c.representability_verdict(M, [0.0] * 8),
        c.representability_verdict(M, [math.nan] * 8),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_oversmoothing():
    assert verdicts(
        c.oversmoothing_verdict(M, 0.9, 0.85, 0.9, 100),
        c.oversmoothing_verdict(M, 0.9, 0.3, 0.3, 100),
        c.oversmoothing_verdict(M, 0.4, 0.3, 0.9, 100),
        c.oversmoothing_verdict(M, math.nan, math.nan, math.nan, 0),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_switch():
    result = c.switch_verdict(M, 95, 5, 2, 900)
    assert result.verdict == c.SUPPORTED and result.evidence["p_sink_given_off"] == pytest.approx(0.95)
    assert verdicts(
        c.switch_verdict(M, 60, 40, 200, 700),
        c.switch_verdict(M, 10, 90, 90, 810),
        c.switch_verdict(M, 0, 0, 5, 10),
    ) == [c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_value_drain():
    assert verdicts(
        c.value_drain_verdict(M, [0.1, 0.2, 0.3], [1.0]),
        c.value_drain_verdict(M, [0.8], [1.0]),
        c.value_drain_verdict(M, [1.5, 2.0], [1.0]),
        c.value_drain_verdict(M, [], [1.0]),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_mlp_like():
    assert verdicts(
        c.mlp_like_verdict(M, [0.0, 0.7]),
        c.mlp_like_verdict(M, [0.0, 0.2]),
        c.mlp_like_verdict(M, [0.0, 0.01]),
        c.mlp_like_verdict(M, []),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_ablation_and_dormant_heads():
    assert verdicts(
        c.ablation_verdict("sink_ablation", M, 0.01, [0.1, 0.2]),
        c.ablation_verdict("sink_ablation", M, 0.1, [0.1, 0.2]),
        c.ablation_verdict("sink_ablation", M, 0.3, [0.1, 0.2]),
        c.ablation_verdict("sink_ablation", M, 0.3, [-0.1, 0.0]),
        c.ablation_verdict("sink_ablation_bos", M, 0.01, [0.1, 0.2]),
        c.ablation_verdict("dormant_heads", M, 0.01, [0.1], {"dormant_frac": 0.1}),
        c.ablation_verdict("dormant_heads", M, 0.01, [0.1], {"dormant_frac": 0.01}),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE, c.SUPPORTED, c.SUPPORTED, c.PARTLY]


def test_cost_closed_forms():
    assert verdicts(
        c.cost_closed_forms_verdict(M, 0.52, 0.97, 1e-6),
        c.cost_closed_forms_verdict(M, 0.52, 0.97, 0.1),
        c.cost_closed_forms_verdict(M, 1.0, 0.5, 1e-6),
        c.cost_closed_forms_verdict(M, math.nan, 1.0, 0.0),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_cost_real_layers():
    inf = math.inf
    result = c.cost_real_verdict(M, [1, 2, 3, inf], [2, 3, 4, 5])
    assert result.verdict == c.PARTLY and result.evidence["sink_cheaper_frac"] == 0.75
    assert result.evidence["sink_infeasible"] == 1
    assert verdicts(
        c.cost_real_verdict(M, [1, 1, 1, 1, 1], [2, 2, 2, 2, inf]),
        c.cost_real_verdict(M, [3, inf], [2, 2]),
        c.cost_real_verdict(M, [inf, math.nan], [inf, 1]),
    ) == [c.SUPPORTED, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_regimes():
    sink, diag, dense = ({"bos_mass": 0.9, "diag_mass": 0.0}, {"bos_mass": 0.0, "diag_mass": 0.8},
                         {"bos_mass": 0.1, "diag_mass": 0.1})
    assert verdicts(
        c.regimes_verdict(M, {"torch": (sink, diag), "gpt2": (sink, diag)}),
        c.regimes_verdict(M, {"torch": (sink, diag), "gpt2": (dense, dense)}),
        c.regimes_verdict(M, {"torch": (sink, dense), "gpt2": (sink, dense)}),
        c.regimes_verdict(M, {"torch": (dense, dense)}),
        c.regimes_verdict(M, None, "train-bb is not available"),
    ) == [c.SUPPORTED, c.PARTLY, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_weights():
    low, high = [1.0, 1.1, 1.2, 1.3, 1.4, 1.5], [5.0, 5.1, 5.2, 5.3, 5.4, 5.5, 5.6]
    assert verdicts(
        c.weights_verdict("weights_low_rank", M, low, high, sink_lower=True),
        c.weights_verdict("weights_low_rank", M, [1.0, 6.0, 2.0], [5.0, 1.5, 5.5], sink_lower=True),
        c.weights_verdict("weights_low_rank", M, high, low, sink_lower=True),
        c.weights_verdict("weights_bos_alignment", M, [0.9], high, sink_lower=False),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_gu_sink_rate():
    assert verdicts(
        c.gu_sink_rate_verdict(M, {"natural": 0.5, "random": 0.4, "repeat": 0.3}),
        c.gu_sink_rate_verdict(M, {"natural": 0.5, "random": 0.1, "repeat": 0.3}),
        c.gu_sink_rate_verdict(M, {"natural": 0.1, "random": 0.4, "repeat": 0.3}),
        c.gu_sink_rate_verdict(M, {"natural": 0.5}),
    ) == [c.SUPPORTED, c.PARTLY, c.NOT_SUPPORTED, c.NOT_MEASURABLE]


def test_verdict_serialises_and_validates():
    record = c.switch_verdict(M, 95, 5, 2, 900).to_dict()
    assert json.loads(json.dumps(record))["verdict"] == c.SUPPORTED
    assert c.mlp_like_verdict(M, [math.nan, 0.7]).to_dict()["evidence"]["max"] == 0.7
    with pytest.raises(ValueError):
        c.Verdict("switch", M, "maybe")
    with pytest.raises(ValueError):
        c.Verdict("no-such-claim", M, c.SUPPORTED)


def test_regime_cells_by_init():
    import pandas as pd

    from sinkscope.reproduction.regimes import cells_by_init

    rows = [("torch", True, "softmax", 1e-4, 0.9, 0.0, "sink"), ("torch", False, "softmax", 1e-4, 0.0, 0.8, "diagonal"),
            ("torch", True, "softmax", 0.1, 0.1, 0.1, "dense"), ("gpt2", True, "softmax", 1e-4, 0.7, 0.0, "sink"),
            ("torch", True, "sigmoid_gate", 1e-4, 0.0, 0.0, "null")]
    cells = pd.DataFrame(rows, columns=["init", "bos", "variant", "weight_decay", "bos_mass", "diag_mass", "pattern"])
    cells["agreement"] = "3/3"
    by_init = cells_by_init(cells)
    assert list(by_init) == ["torch"]  # gpt2 lacks its no-BOS cell
    with_bos, without_bos = by_init["torch"]
    assert with_bos["pattern"] == "sink" and without_bos["diag_mass"] == 0.8
    assert c.regimes_verdict(M, by_init).verdict == c.SUPPORTED


def test_config_preset_and_bad_input(tmp_path):
    from sinkscope.errors import SinkscopeError
    from sinkscope.reproduction.config import ReproduceConfig

    quick = ReproduceConfig.preset(True, windows=5)
    assert quick.quick and quick.windows == 5 and quick.anchor_windows == 2 and quick.smoothing_layer_stride == 6
    assert ReproduceConfig.preset(False) == ReproduceConfig()
    with pytest.raises(SinkscopeError, match="regime_cells.parquet"):
        ReproduceConfig(regimes_from=str(tmp_path))
    with pytest.raises(SinkscopeError, match="--models"):
        ReproduceConfig(models=())
