"""Draw 51, pre-emptive: config refusals and presets, minima, files' key matching, the regime and sink-rate
verdicts on every path and at each threshold's boundary, the regime cells, the cost theory's key and columns,
and the per-window switch arrays by hand (reproduction/ modules nobody covered in draw 51)."""

from __future__ import annotations

import dataclasses
import json
import platform
import re

import numpy as np
import pandas as pd
import pytest
import torch

from sinkscope.errors import SinkscopeError
from sinkscope.reproduction import minima
from sinkscope.reproduction.config import ANCHOR_CORPORA, DELTA_SCALES, SINK_QUERY_DELTA, ReproduceConfig
from sinkscope.reproduction.files import KEY_FILE, _defaults, _matches, is_fresh, write_key
from sinkscope.reproduction.regime_claims import REGIMES, regimes_verdict
from sinkscope.reproduction.regime_section import (
    QUICK_REASON,
    UNAVAILABLE,
    cells_by_init,
    regime_key,
    regime_runs,
)
from sinkscope.reproduction.sink_rate_claims import GU, gu_sink_rate_verdict
from sinkscope.reproduction.switch_evidence import _nonpos, _switch_cells

# ----------------------------------------------------------------------------------------------- config


def test_module_constants_and_documented_defaults():
    assert DELTA_SCALES == (0.5, 1.0, 2.0) and SINK_QUERY_DELTA == 0.1
    assert ANCHOR_CORPORA == ("builtin:prose", "builtin:random", "builtin:repeat")
    assert ReproduceConfig().to_dict() == {
        "models": ("smollm2-135m", "gemma3-270m"), "corpora": ("builtin:prose", "builtin:code"), "seq_len": 64,
        "windows": 32, "anchor_windows": 32, "geometry_cap": 256, "ablation_windows": 16, "ablation_fraction": 0.1,
        "random_draws": 20, "sensitivity_draws": 5, "bos_draws": 8, "certificate_windows": 24,
        "certificate_controls": 20, "cost_contexts": (8, 16, 32), "cost_windows": 8, "cost_layer_stride": 6,
        "smoothing_layer_stride": 1, "cost_exact_Ts": (2, 4, 8, 16), "regimes": True, "regimes_from": None,
        "switch_tau": 0.1, "switch_drain_max": 0.1,
        "quick": False, "seed": 0, "device": "cpu", "dtype": "float32",
    }  # fmt: skip


def test_preset_quick_values_and_overrides():
    assert ReproduceConfig.preset() == ReproduceConfig()
    assert ReproduceConfig.preset(seed=3) == ReproduceConfig(seed=3)
    quick = ReproduceConfig.preset(quick=True)
    small = dict(windows=8, anchor_windows=2, geometry_cap=32, ablation_windows=2, random_draws=2, bos_draws=2,
                 cost_contexts=(8,), cost_windows=1, cost_layer_stride=6, smoothing_layer_stride=6,
                 cost_exact_Ts=(2, 4, 8), certificate_windows=4, certificate_controls=2, quick=True)  # fmt: skip
    assert quick == dataclasses.replace(ReproduceConfig(), **small)
    # an override wins over the quick value; the other quick values stay
    mine = ReproduceConfig.preset(quick=True, windows=5, cost_contexts=(16,))
    assert mine == dataclasses.replace(quick, windows=5, cost_contexts=(16,))


COUNTED = ("windows", "anchor_windows", "ablation_windows", "random_draws", "sensitivity_draws", "bos_draws",
           "cost_windows", "cost_layer_stride", "smoothing_layer_stride", "certificate_windows",
           "certificate_controls")  # fmt: skip


@pytest.mark.parametrize(
    ("overrides", "message"),
    [({"models": ()}, "--models needs at least one model, e.g. --models smollm2-135m"),
     ({"corpora": ()}, "--corpora needs at least one corpus, e.g. --corpora builtin:prose"),
     ({"seq_len": 7}, "--seq-len 7 is too short: use at least 8 (Gu et al. use 64)"),
     ({"ablation_fraction": 0.0}, "ablation_fraction 0.0 must lie in (0, 1]"),
     ({"ablation_fraction": 1.5}, "ablation_fraction 1.5 must lie in (0, 1]"),
     ({"cost_contexts": ()}, "cost_contexts (): use T in 2..32 (exact programs beyond are slow)"),
     ({"cost_contexts": (1, 8)}, "cost_contexts (1, 8): use T in 2..32 (exact programs beyond are slow)"),
     ({"cost_contexts": (8, 33)}, "cost_contexts (8, 33): use T in 2..32 (exact programs beyond are slow)"),
     ({"regimes_from": "/nonexistent/regimes"}, "--regimes-from /nonexistent/regimes: no regime_cells.parquet "
      "there; pass the --out of `sinkscope train-bb --grid regimes`")]
    + [({name: 0}, f"{name} 0 must be at least 1") for name in COUNTED],
)  # fmt: skip
def test_each_refusal_reads_whole(overrides, message):
    with pytest.raises(SinkscopeError) as err:
        ReproduceConfig(**overrides)
    assert str(err.value) == message


def test_each_bound_itself_is_accepted(tmp_path):
    (tmp_path / "regime_cells.parquet").write_bytes(b"")
    edge = ReproduceConfig(seq_len=8, ablation_fraction=1.0, cost_contexts=(2, 32), regimes_from=str(tmp_path),
                           **{name: 1 for name in COUNTED})  # fmt: skip
    assert edge.seq_len == 8 and edge.cost_contexts == (2, 32)
    assert ReproduceConfig(ablation_fraction=1e-9).ablation_fraction == 1e-9


# ----------------------------------------------------------------------------------------------- minima


def test_minima_values():
    assert (minima.MIN_WINDOWS, minima.MIN_DRAWS, minima.MIN_RUNS, minima.MIN_HEADS, minima.MIN_LAYERS,
            minima.MIN_CONTROLS, minima.MIN_STRATA, minima.MIN_COST_WINDOWS) == (8, 20, 6, 20, 4, 20, 2, 8)  # fmt: skip


# ----------------------------------------------------------------------------------------------- files


@dataclasses.dataclass(frozen=True)
class _Opts:
    a: int = 1
    b: tuple = (1, 2)
    c: list = dataclasses.field(default_factory=lambda: [3])
    d: int | None = None


def test_defaults_spells_every_default_as_json():
    @dataclasses.dataclass
    class Need:
        x: int
        y: int = 2

    assert _defaults(_Opts) == {"a": 1, "b": [1, 2], "c": [3], "d": None}
    assert _defaults(Need) == {"y": 2}


def test_matches_on_each_side():
    key = {"n": 1, "xs": [1, 2], "opts": _Opts(a=5)}
    stamp = {"n": 1, "xs": [1, 2], "opts": {"a": 5, "b": [1, 2], "c": [3], "d": None}}
    assert _matches(stamp, key)
    assert not _matches(stamp | {"extra": 0}, key)  # a key the settings lack
    assert not _matches({k: v for k, v in stamp.items() if k != "n"}, key)  # a key the stamp lacks
    assert not _matches(stamp | {"n": 2}, key)
    assert not _matches(stamp | {"xs": [1]}, key) and not _matches(stamp | {"xs": [1, 2, 3]}, key)
    assert not _matches(stamp | {"xs": [1, 3]}, key) and not _matches(stamp | {"xs": {"0": 1}}, key)
    assert not _matches([1], {"n": 1}) and not _matches({"0": 1}, [1])
    opts = stamp["opts"]
    # a field the stamp lacks matches only at its default, on every field kind
    for name in ("a", "b", "c", "d"):
        lacking = {k: v for k, v in opts.items() if k != name}
        assert _matches(lacking, _Opts(a=lacking.get("a", 1))), name
    assert not _matches({k: v for k, v in opts.items() if k != "a"}, _Opts(a=5))
    assert not _matches({"b": [1, 2]}, _Opts(c=[4]))
    assert _matches({"b": [1, 2]}, _Opts())
    assert not _matches(opts | {"gone": 1}, _Opts(a=5))  # a field the config no longer has
    assert not _matches([5], _Opts(a=5))  # a stamp that is not a config
    assert not _matches(opts | {"a": 6}, _Opts(a=5))


def test_is_fresh_and_write_key(tmp_path):
    key = {"b": (1, 2), "a": "x"}
    assert not is_fresh(tmp_path, key)  # no stamp
    write_key(tmp_path, key)
    text = (tmp_path / KEY_FILE).read_text()
    assert KEY_FILE == "reproduce-key.json"
    assert text == json.dumps({"identity": {"a": "x", "b": [1, 2]}, "stored": {}}, indent=2, sort_keys=True)
    assert is_fresh(tmp_path, key) and not is_fresh(tmp_path, key | {"a": "y"})
    (tmp_path / KEY_FILE).write_text("{not json")
    assert not is_fresh(tmp_path, key)


# ----------------------------------------------------------------------------------------------- sink rate

M = "m"


def _scores(n_windows: int, rates: dict[str, int], rest: float = 0.3) -> dict[str, np.ndarray]:
    """(W, 1, 5) scores: `rates[name]` of 5 heads at 1.0 in every window, the rest at `rest` (ε: not above)."""
    out = {}
    for name, above in rates.items():
        s = np.full((n_windows, 1, 5), rest)
        s[:, :, :above] = 1.0
        out[name] = s
    return out


def test_gu_sink_rate_not_measurable_paths():
    full = _scores(8, {"natural": 5, "random": 5, "repeat": 5})
    for scores in ({k: v for k, v in full.items() if k != "repeat"}, full | {"random": np.zeros((0, 1, 5))}):
        v = gu_sink_rate_verdict(M, scores)
        assert (v.claim, v.model, v.verdict, v.evidence, v.thresholds, v.reason, v.interval, v.sensitivity) == (
            "gu_sink_rate", M, "not measurable here", {}, {"epsilon": 0.3, "present_rate": 0.2},
            "a corpus was not analysed", None, [])  # fmt: skip
    few = gu_sink_rate_verdict(M, _scores(7, {"natural": 5, "random": 5, "repeat": 5}))
    assert (few.verdict, few.reason, few.evidence) == (
        "not measurable here",
        "too few windows: 7 (a verdict needs at least 8)",
        {"n_windows": 7},
    )
    assert GU == {"epsilon": 0.3, "present_rate": 0.2}


def test_gu_sink_rate_at_the_present_rate_boundary_and_epsilon_strict():
    # natural: 1 of 5 heads above ε (rate 0.2 = present_rate exactly: present); a score of exactly ε is not above
    v = gu_sink_rate_verdict(M, _scores(8, {"natural": 1, "random": 5, "repeat": 5}))
    assert v.evidence == {
        "min_rate": 0.2,
        "sink_rate_natural": 0.2,
        "sink_rate_random": 1.0,
        "sink_rate_repeat": 1.0,
    }
    # supported at the point, lowered to partly by present_rate × 2: shown with the rate partly reads (natural)
    assert v.interval == {"effect": "sink_rate_natural", "estimate": 0.2, "low": 0.2, "high": 0.2, "level": 0.95,
                          "over": "windows", "n": 8,
                          "primary": {"effect": "min_rate", "estimate": 0.2, "low": 0.2, "high": 0.2}}  # fmt: skip
    # present_rate × 2 on the odds scale: 1/3 > 0.2, natural no longer present → not supported
    third = 1 / 3
    assert v.sensitivity == [
        {"threshold": "epsilon", "scale": 0.5, "value": 0.15, "verdict": "supported"},
        {"threshold": "epsilon", "scale": 2.0, "value": 0.6, "verdict": "supported"},
        {"threshold": "present_rate", "scale": 0.5, "value": pytest.approx(1 / 9), "verdict": "supported"},
        {
            "threshold": "present_rate",
            "scale": 2.0,
            "value": pytest.approx(third),
            "verdict": "not supported",
        },
    ]
    assert (v.verdict, v.reason) == (
        "partly",
        "depends on present_rate (present_rate: not supported at 0.333)",
    )


def test_gu_sink_rate_each_decision():
    cases = {(5, 5, 5): "supported", (5, 0, 5): "partly", (5, 5, 0): "partly", (0, 5, 5): "not supported"}
    for (nat, ran, rep), expected in cases.items():
        # 5 of 5 or 0 of 5: no threshold scale moves a rate across present_rate
        v = gu_sink_rate_verdict(M, _scores(8, {"natural": nat, "random": ran, "repeat": rep}, rest=0.0))
        assert (v.verdict, v.reason) == (expected, ""), (nat, ran, rep)
        assert v.evidence["min_rate"] == min(nat, ran, rep) / 5


# ----------------------------------------------------------------------------------------------- regimes


def _cell(bos_mass: float) -> dict:
    return {"bos_mass": bos_mass, "diag_mass": 0.1, "pattern": "sink", "agreement": "3/3"}


def test_regimes_not_measurable_paths():
    for inits, reason, expected in (
        (None, "", "no runs"),
        ({}, "", "no runs"),
        (None, "no map here", "no map here"),
    ):
        v = regimes_verdict(M, inits, reason)
        assert (v.claim, v.model, v.verdict, v.evidence, v.thresholds, v.reason) == (
            "bigram_backcopy_regimes",
            M,
            "not measurable here",
            {},
            {"bos_mass": 0.5},
            expected,
        )
    assert REGIMES == {"bos_mass": 0.5}


def test_regimes_each_decision_with_whole_evidence():
    inits = {"pytorch": (_cell(0.9), _cell(0.05)), "gpt2": (_cell(0.8), _cell(0.02))}
    v = regimes_verdict(M, inits)
    assert (v.verdict, v.reason, v.thresholds) == ("supported", "", {"bos_mass": 0.5})
    assert v.evidence == {"pytorch_bos": _cell(0.9), "pytorch_nobos": _cell(0.05), "gpt2_bos": _cell(0.8),
                          "gpt2_nobos": _cell(0.02), "inits_with_sink": 1.0,
                          "interval_note": "seed means per cell (agreement over seeds in the evidence)"}  # fmt: skip
    assert [r["value"] for r in v.sensitivity] == [pytest.approx(1 / 3), pytest.approx(2 / 3)]
    none = regimes_verdict(M, {"pytorch": (_cell(0.1), _cell(0.9)), "gpt2": (_cell(0.2), _cell(0.9))})
    assert (none.verdict, none.reason, none.evidence["inits_with_sink"]) == ("not supported", "", 0.0)
    part = regimes_verdict(M, {"pytorch": (_cell(0.1), _cell(0.9)), "gpt2": (_cell(0.95), _cell(0.0)),
                               "mitchell": (_cell(0.9), _cell(0.0))})  # fmt: skip
    assert part.verdict == "partly" and part.evidence["inits_with_sink"] == pytest.approx(2 / 3)
    assert part.reason == "init-dependent: a sink with BOS at gpt2, mitchell only"


def test_regimes_partly_by_inits_and_by_the_threshold_reads_both_in_order():
    v = regimes_verdict(M, {"pytorch": (_cell(0.5), _cell(0.0)), "gpt2": (_cell(0.1), _cell(0.0))})
    assert [r["verdict"] for r in v.sensitivity] == ["partly", "not supported"]
    assert (v.verdict, v.reason) == (
        "partly",
        "init-dependent: a sink with BOS at pytorch only; fragile: not supported at bos_mass = 0.667",
    )


def test_regimes_bos_mass_boundary_counts_as_a_sink():
    v = regimes_verdict(M, {"pytorch": (_cell(0.5), _cell(0.0))})  # BOS mass = threshold exactly: a sink
    assert v.evidence["inits_with_sink"] == 1.0
    assert [r["verdict"] for r in v.sensitivity] == ["supported", "not supported"]
    # partly by the threshold alone: no "init-dependent" note (every init sinks)
    assert (v.verdict, v.reason) == ("partly", "depends on bos_mass (bos_mass: not supported at 0.667)")
    below = regimes_verdict(M, {"pytorch": (_cell(0.4), _cell(0.0))})  # no init sinks, but at 1/3 it would
    assert [r["verdict"] for r in below.sensitivity] == ["supported", "not supported"]
    # a variant never raises: no init sinks, so not supported, noted fragile
    assert (below.verdict, below.reason) == ("not supported", "fragile: supported at bos_mass = 0.333")


# ----------------------------------------------------------------------------------------------- regime section


def _cells_table() -> pd.DataFrame:
    rows = []
    for init in ("pytorch", "gpt2", "lonely"):
        for bos in (True, False):
            for wd, variant in ((0.0, "softmax"), (0.1, "softmax"), (0.0, "linear")):
                if init == "lonely" and not bos:
                    continue  # no without-BOS cell: dropped
                mass = {"pytorch": 0.9, "gpt2": 0.7, "lonely": 0.5}[init] - (0 if bos else 0.5) + wd
                mass += 0.01 if variant == "linear" else 0
                rows.append({"init": init, "bos": bos, "weight_decay": wd, "variant": variant, "bos_mass": mass,
                             "diag_mass": 1 - mass, "pattern": f"p-{init}-{bos}", "agreement": f"a{wd}"})  # fmt: skip
    return pd.DataFrame(rows)


def test_cells_by_init_by_hand():
    out = cells_by_init(_cells_table())
    assert list(out) == ["pytorch", "gpt2"]
    assert out["pytorch"] == (
        {"bos_mass": 0.9, "diag_mass": pytest.approx(0.1), "pattern": "p-pytorch-True", "agreement": "a0.0"},
        {"bos_mass": pytest.approx(0.4), "diag_mass": pytest.approx(0.6), "pattern": "p-pytorch-False",
         "agreement": "a0.0"})  # fmt: skip
    assert out["gpt2"][0]["bos_mass"] == pytest.approx(0.7) and out["gpt2"][1]["bos_mass"] == pytest.approx(
        0.2
    )


def _never_train(*_args, **_kwargs):
    raise AssertionError("a regime map was trained")


def test_regime_runs_paths(tmp_path, monkeypatch):
    monkeypatch.setattr("sinkscope.synthetic.regimes.run_regimes", _never_train)
    table = _cells_table()
    (tmp_path / "map").mkdir()
    table.to_parquet(tmp_path / "map" / "regime_cells.parquet")
    read = regime_runs(ReproduceConfig(regimes_from=str(tmp_path / "map")), tmp_path / "out")
    assert set(read) == {"inits", "cells", "source"} and read["source"] == str(tmp_path / "map")
    assert read["inits"] == cells_by_init(table)
    off = regime_runs(ReproduceConfig(regimes=False), tmp_path / "out")
    assert off == {"reason": "the regime map was switched off (regimes=False)"}
    quick = regime_runs(ReproduceConfig(quick=True), tmp_path / "out")
    assert quick == {"reason": QUICK_REASON}
    assert QUICK_REASON == (
        "--quick does not train the bigram-backcopy regime map (12 small models, minutes of CPU); "
        "run without --quick, or rerun --quick into an output directory that already holds it"
    )
    assert UNAVAILABLE.format(error="E") == ("this installation has no bigram-backcopy regime map "
                                             "(`train-bb --grid regimes`): E")  # fmt: skip


def test_regime_runs_reuses_a_fresh_map_under_quick(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("sinkscope.synthetic.regimes.run_regimes", _never_train)
    from sinkscope.synthetic.regimes import QUICK_GRID

    directory = tmp_path / "regimes"
    directory.mkdir()
    _cells_table().to_parquet(directory / "regime_cells.parquet")
    grid = json.loads(json.dumps(QUICK_GRID.__dict__, default=list))
    write_key(directory, regime_key())  # the quick grid and the base configuration
    got = regime_runs(ReproduceConfig(quick=True), tmp_path)
    assert set(got) == {"inits", "cells", "grid"} and got["grid"] == grid
    assert got["inits"] == cells_by_init(_cells_table())
    assert capsys.readouterr().err.endswith(f"] regimes: reusing {directory}\n")


# ----------------------------------------------------------------------------------------------- cost section


def test_cost_theory_key_columns_and_reuse(tmp_path):
    from sinkscope.reproduction.cost_section import cost_theory

    frame = cost_theory(ReproduceConfig(cost_exact_Ts=(2, 3)), tmp_path)
    directory = tmp_path / "theory" / "cost"
    assert json.loads((directory / KEY_FILE).read_text())["identity"] == {"section": "cost-theory", "exact_Ts": [2, 3],
                                                                           "version": 1}  # fmt: skip
    assert list(frame.columns) == ["T", "pattern", "norm", "closed_form", "exact"]
    Ts = [2, 3, 4, 8, 16, 32, 64, 128, 256, 512, 1024]
    assert list(frame["T"]) == [T for T in Ts for _ in range(4)]
    assert list(frame["pattern"][:4]) == ["sink", "sink", "diagonal", "diagonal"]
    assert list(frame["norm"][:4]) == ["nuclear", "frobenius", "nuclear", "frobenius"]
    solved = frame["exact"].notna()
    assert set(frame.loc[solved, "T"]) == {2, 3}
    # orthonormal sink, nuclear norm: the exact program meets the closed form where solved
    assert np.allclose(frame.loc[solved, "exact"], frame.loc[solved, "closed_form"], rtol=1e-3)
    pd.testing.assert_frame_equal(pd.read_parquet(directory / "cost_theory.parquet"), frame)
    written = (directory / "cost_theory.parquet").stat().st_mtime_ns
    pd.testing.assert_frame_equal(cost_theory(ReproduceConfig(cost_exact_Ts=(2, 3)), tmp_path), frame)
    assert (directory / "cost_theory.parquet").stat().st_mtime_ns == written  # read back, not computed again


def test_cost_layers_section_key_label_and_directory(tmp_path):
    from sinkscope.reproduction.cost_section import cost_layers_section

    c = ReproduceConfig(corpora=("builtin:code", "builtin:prose"), cost_contexts=(8, 16), cost_windows=3,
                        cost_layer_stride=2, seed=7, dtype="bfloat16")  # fmt: skip
    section = cost_layers_section("tiny", c, tmp_path)
    corpus = {"builtin": "builtin:code", "python": platform.python_version()}  # "tiny": no such folder, a hub id
    assert section.key == {"section": "cost-layers", "model": {"hub": "tiny"}, "corpus": corpus, "contexts": [8, 16],
                           "windows": 3, "stride": 2, "seed": 7, "dtype": "bfloat16", "version": 2}  # fmt: skip
    assert section.label == "exact costs on layers (T = 8, 16, 3 window(s), stride 2)"
    assert section.directory.name == "cost-layers" and tmp_path in section.directory.parents


# ----------------------------------------------------------------------------------------------- switch evidence


def test_switch_cells_by_hand():
    # B = 1, H = 2, T = 4; t = 0 counts in no cell
    off = torch.tensor([[[True, True, False, False], [False, True, True, False]]])
    sink = torch.tensor([[[True, True, True, False], [False, False, True, True]]])
    off[..., 0] = False
    sink[..., 0] = False
    # head 0, t = 1..3: (off,sink) (on,sink) (on,no); head 1: (off,no) (off,sink) (on,sink)
    assert _switch_cells(off, sink).tolist() == [[2, 1, 2, 1]]


def test_nonpos_by_hand():
    h = torch.tensor([[[1.0, 0.0], [1.0, 1.0], [-1.0, 0.0], [0.0, 1.0], [0.0, -2.0]]])  # (1, 5, 2)
    # cos(h0, h_t), t = 1..4: >0, <0, =0, =0 → 3 non-positive
    # control r = 3 (h_r = (0, 1)): t = 1 >0, t = 2 =0, t = 3 excluded, t = 4 <0 → 2
    nonpos, control = _nonpos(h, torch.tensor([3]))
    assert nonpos.tolist() == [3.0] and control.tolist() == [2.0]
    _, control1 = _nonpos(h, torch.tensor([1]))  # h_r = (1, 1): t = 2 <0, t = 3 >0, t = 4 <0 → 2
    assert control1.tolist() == [2.0]
    # a zero anchor h_r: cos taken as 0 (norm clamped), so every other t ≥ 1 counts
    zero_r = h.clone()
    zero_r[0, 2] = 0.0
    _, control0 = _nonpos(zero_r, torch.tensor([2]))
    assert control0.tolist() == [3.0]


def test_layer_switch_evidence_by_brute_force():
    from sinkscope.reproduction.switch_claims import GRID, TAU_CURVE
    from sinkscope.reproduction.switch_evidence import layer_switch_evidence

    # B = 2, H = 2, T = 6; ‖v_j‖ = 1, so query t is off when ‖o_t‖ ≤ τ (dyadic values: the boundaries are exact)
    B, H, T = 2, 2, 6
    masses = torch.tensor([[[0.0, 1.0, 0.875, 0.75, 0.5, 0.25], [0.0, 0.5, 0.75, 0.0, 1.0, 0.875]],
                           [[0.0, 0.25, 0.5, 0.875, 0.75, 1.0], [0.0, 1.0, 1.0, 0.5, 0.25, 0.75]]])  # fmt: skip
    outs = torch.tensor([[[3.0, 0.0, 0.25, 0.5, 0.125, 2.0], [3.0, 0.25, 0.0, 0.75, 0.5, 1.0]],
                         [[3.0, 0.5, 0.25, 0.0, 1.0, 0.125], [3.0, 2.0, 0.25, 0.5, 0.0, 0.25]]])  # fmt: skip
    attn = torch.zeros(B, H, T, T)
    attn[..., 0] = masses
    for t in range(T):
        attn[:, :, t, t] += 1 - masses[:, :, t]
    values = torch.ones(B, H, T)
    tau, delta = 0.5, 0.5
    got = layer_switch_evidence(attn, values, outs, tau, delta)
    for b in range(B):
        for i, ds in enumerate(GRID):
            sink = [[float(masses[b, h, t]) >= 1 - delta * ds for t in range(1, T)] for h in range(H)]
            for k, tk in enumerate(TAU_CURVE):
                off = [[float(outs[b, h, t]) <= tk for t in range(1, T)] for h in range(H)]
                cells = [0, 0, 0, 0]
                for h in range(H):
                    for t in range(T - 1):
                        cells[(0 if off[h][t] else 2) + (0 if sink[h][t] else 1)] += 1
                assert got["curve"][b, i, k].tolist() == cells, (b, ds, tk)
            for j, ts in enumerate(GRID):
                off = [(h, t) for h in range(H) for t in range(1, T) if float(outs[b, h, t]) <= tau * ts]
                routes = got["routes"][b, i, j]
                assert float(routes.sum()) == len(off), (b, ds, ts)  # every off query in one route
                hard = [(h, t) for h, t in off if float(masses[b, h, t]) >= 1 - delta * ds]
                assert float(routes[0]) == len(hard), (b, ds, ts)  # the first route: the hard sink
                if ds == 1.0 and ts == 1.0:
                    assert got["routes_at"][b].tolist() == routes.tolist()
                    assert float(got["bos_mass"][b, 0]) == sum(float(masses[b, h, t]) for h, t in hard)
                    assert float(got["bos_mass"][b].sum()) == sum(float(masses[b, h, t]) for h, t in off)
    assert got["curve"].shape == (B, len(GRID), len(TAU_CURVE), 4)
    assert got["routes"].shape == got["routes"].shape[:3] + (6,) and got["bos_mass"].shape == (B, 6)


# ----------------------------------------------------------------------------------------------- run (wiring)


class _V:
    def __init__(self, claim: str, **given):
        self.claim, self.given = claim, given

    def to_dict(self) -> dict:
        return {"claim": self.claim, **self.given}


@pytest.mark.parametrize("trained_runs", [True, False])
def test_reproduce_wires_every_step_in_order(tmp_path, monkeypatch, capsys, trained_runs):
    import types

    from sinkscope.reproduction.run import reproduce

    calls: dict[str, list] = {"sources": [], "reports": []}
    P = "sinkscope.reproduction."
    monkeypatch.setattr(
        "sinkscope.corpus.sources.check_source", lambda corpus: calls["sources"].append(corpus)
    )
    monkeypatch.setattr(P + "claim_texts.with_claim_text", lambda d: d | {"text": True})
    monkeypatch.setattr(P + "cost_section.cost_theory", lambda config, out: ("theory", out))
    boundary = {"geometry": "G", "vocabulary": "V", "cells": "B"}
    monkeypatch.setattr(P + "experiment_sections.cost_regimes_theory", lambda config, out: boundary)
    monkeypatch.setattr(P + "experiment_claims.cost_boundary_verdict", lambda **kw: _V("boundary", **kw))
    monkeypatch.setattr(P + "experiment_claims.cost_boundary_trained_verdict",
                        lambda runs, reason, seed: _V("trained", runs=runs, reason=reason, seed=seed))  # fmt: skip

    def model_plan(name, config, out):
        return types.SimpleNamespace(in_order=lambda: f"order-{name}", measurements=lambda read: f"m-{read}")

    monkeypatch.setattr(P + "plan.model_plan", model_plan)
    monkeypatch.setattr(P + "plan.model_opener", lambda name, config: f"opener-{name}")
    monkeypatch.setattr(P + "plan.walk", lambda name, order, opener: types.SimpleNamespace(
        read=f"{name}:{order}:{opener}", reused=[f"r-{name}"], seconds={"s": len(name)}))  # fmt: skip
    monkeypatch.setattr(
        P + "judge.judge_model", lambda name, config, m, claims: ([_V(f"model-{name}", m=m)], f"t-{name}")
    )
    monkeypatch.setattr(
        P + "judge.judge_theory", lambda theory, regimes: [_V("theory", regimes=regimes["inits"])]
    )
    regimes = {"inits": "I", "cells": "C", "grid": "g"}
    monkeypatch.setattr(P + "regime_section.regime_runs", lambda config, out: regimes)
    trained = {"runs": "R"} if trained_runs else {"reason": "no lab"}
    monkeypatch.setattr(P + "experiment_sections.boundary_lab", lambda config, out: trained)
    monkeypatch.setattr(P + "report.write_reports", lambda *args: calls["reports"].append(args))

    config = ReproduceConfig(models=("a", "bb"), corpora=("builtin:code", "builtin:random"), seed=4)
    out = tmp_path / "new" / "dir"
    summary = reproduce(config, str(out))
    assert out.is_dir()
    # each corpus checked once, main corpora first, then the anchors
    assert calls["sources"] == ["builtin:code", "builtin:random", "builtin:prose", "builtin:repeat"]
    assert set(summary) == {"config", "verdicts", "seconds", "section_seconds", "reused", "regimes"}
    assert summary["config"] == config.to_dict() and summary["seconds"] >= 0
    assert summary["verdicts"] == [
        {"claim": "theory", "regimes": "I", "text": True},
        {"claim": "boundary", "geometry": "G", "vocabulary": "V", "cells": "B", "seed": 4, "text": True},
        {"claim": "trained", "runs": "R" if trained_runs else None, "reason": "" if trained_runs else "no lab",
         "seed": 4, "text": True},
        {"claim": "model-a", "m": "m-a:order-a:opener-a", "text": True},
        {"claim": "model-bb", "m": "m-bb:order-bb:opener-bb", "text": True},
    ]  # fmt: skip
    assert summary["reused"] == {"a": ["r-a"], "bb": ["r-bb"]}
    assert summary["section_seconds"] == {"a": {"s": 1}, "bb": {"s": 2}}
    assert summary["regimes"] == {"inits": "I", "grid": "g"}  # the cells table left out
    (report,) = calls["reports"]
    extra = {"cost_regimes": "G", "cost_regimes_vocabulary": "V"} | ({"cost_boundary_trained": "R"} if trained_runs
                                                                     else {})  # fmt: skip
    assert report == (out, summary, {"a": "t-a", "bb": "t-bb"}, ("theory", out), regimes, extra)
    err = capsys.readouterr().err
    for line in (
        "model 1/2: a",
        "model 2/2: bb",
        "writing the report",
    ):
        assert f"] {line}\n" in err, line
    assert re.search(rf"\] done in \d+ s: {re.escape(str(out / 'report.html'))}\n", err)


def test_progress_lines(tmp_path, capsys, monkeypatch):
    from sinkscope.reproduction.cost_section import cost_theory
    from sinkscope.reproduction.files import log

    log("hello")
    assert re.fullmatch(r"\[reproduce \d\d:\d\d:\d\d\] hello\n", capsys.readouterr().err)
    config = ReproduceConfig(cost_exact_Ts=(2,))
    cost_theory(config, tmp_path)
    assert capsys.readouterr().err.endswith("] theory: cost closed forms and exact programs\n")
    cost_theory(config, tmp_path)
    assert capsys.readouterr().err.endswith(
        f"] theory: cost closed forms: reusing {tmp_path / 'theory' / 'cost'}\n"
    )
    (tmp_path / "map").mkdir()
    _cells_table().to_parquet(tmp_path / "map" / "regime_cells.parquet")
    regime_runs(ReproduceConfig(regimes_from=str(tmp_path / "map")), tmp_path)
    assert capsys.readouterr().err.endswith(f"] regimes: reading {tmp_path / 'map'}\n")
    monkeypatch.setitem(
        __import__("sys").modules, "sinkscope.synthetic.regimes", None
    )  # the map not installed
    got = regime_runs(ReproduceConfig(), tmp_path)
    assert set(got) == {"reason"} and got["reason"].startswith(
        "this installation has no bigram-backcopy regime map (`train-bb --grid regimes`): "
    )
    assert "sinkscope.synthetic.regimes" in got["reason"]
