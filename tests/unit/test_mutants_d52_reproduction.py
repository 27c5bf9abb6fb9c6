"""Draw 52 (issue 34) in reproduction/: the switch-assumptions table read at the exact cut of `MIN_DISTANCE`
(|z_0 − P z_0| / |z_0| = 0.05 holds, the next float below does not) and of the rank tolerance, with every column
counted by hand, and the "done in N s" progress lines of `reproduce` and `plan.walk` read under a fake clock (the printed
seconds are the clock's difference, not its sum)."""

from __future__ import annotations

import re
import types

import numpy as np
import pandas as pd
import pytest

from sinkscope.reproduction.experiment_claims import assumptions_table
from sinkscope.reproduction.switch_assumption_claims import MIN_DISTANCE

CUT = MIN_DISTANCE
BELOW = float(np.nextafter(CUT, 0.0))


def _assumption_arrays() -> dict[str, np.ndarray]:
    """8 windows × 3 layers; T − 1 = 4 contexts, width 6 → full rank is 4. Layer 0: distance exactly at the cut
    in every window; layer 1: the next float below; layer 2: 0.5 but rank 3 in windows 0-2. Values: 2 KV heads of
    4 dimensions (one query head each); KV head 1 of layer 1 has its last singular value exactly at 1e-4 of the
    largest (not above: rank 3, dependent); per-head counts random."""
    W, L = 8, 3
    distance = np.empty((W, L))
    distance[:, 0], distance[:, 1], distance[:, 2] = CUT, BELOW, 0.5
    distance[5, 0] = 0.7  # a median and a min that differ
    rank = np.full((W, L), 4)
    rank[:3, 2] = 3
    spectrum = np.tile([1.0, 0.5, 0.25, 0.125], (W, L, 2, 1))
    spectrum[:, 1, 1, 3] = 1e-4
    heads = np.random.default_rng(0).integers(0, 5, size=(W, L, 2, 3)).astype(float)
    return {"distance": distance, "rank": rank, "value_sv": spectrum, "heads": heads, "n_contexts": np.int64(4),
            "width": np.int64(6), "head_dim": np.int64(4)}  # fmt: skip


def test_assumptions_table_at_the_min_distance_cut_column_by_column():
    arrays = _assumption_arrays()
    table = assumptions_table(arrays)
    assert list(table.columns) == ["layer", "holds_frac", "rank_median", "span_distance_median",
                                   "span_distance_min", "value_independent_frac", "value_rank_median",
                                   "switched_off", "switched_off_sink"]  # fmt: skip
    assert table["layer"].tolist() == [0, 1, 2]
    # the cut itself holds, the float below does not, rank 3 < 4 fails whatever the distance
    assert table["holds_frac"].tolist() == [1.0, 0.0, 5 / 8]
    assert table["rank_median"].tolist() == [4.0, 4.0, 4.0]
    assert table["span_distance_median"].tolist() == [CUT, BELOW, 0.5]
    assert table["span_distance_min"].tolist() == [CUT, BELOW, 0.5]
    assert table["value_independent_frac"].tolist() == [1.0, 0.5, 1.0]
    assert table["value_rank_median"].tolist() == [4.0, 3.5, 4.0]
    for layer in range(3):
        cells = [arrays["heads"][w, layer, h] for w in range(8) for h in range(2)]
        assert table["switched_off"][layer] == sum(c[1] for c in cells)
        assert table["switched_off_sink"][layer] == sum(c[0] for c in cells)


class _Clock:
    """perf_counter stand-in: returns the given times in order."""

    def __init__(self, *times: float):
        self.times = list(times)

    def perf_counter(self) -> float:
        return self.times.pop(0)


def test_reproduce_prints_the_clock_difference(tmp_path, monkeypatch, capsys):
    from sinkscope.reproduction import run
    from sinkscope.reproduction.config import ReproduceConfig

    P = "sinkscope.reproduction."
    monkeypatch.setattr("sinkscope.corpus.sources.check_source", lambda corpus: None)
    monkeypatch.setattr(P + "claim_texts.with_claim_text", lambda d: d)
    monkeypatch.setattr(P + "cost_section.cost_theory", lambda config, out: None)
    monkeypatch.setattr(P + "experiment_sections.cost_regimes_theory",
                        lambda config, out: {"geometry": None, "vocabulary": None, "cells": None})  # fmt: skip
    verdict = types.SimpleNamespace(to_dict=lambda: {})
    monkeypatch.setattr(P + "experiment_claims.cost_boundary_verdict", lambda **kw: verdict)
    monkeypatch.setattr(P + "experiment_claims.cost_boundary_trained_verdict", lambda *a, **kw: verdict)
    monkeypatch.setattr(P + "regime_section.regime_runs", lambda config, out: {"inits": None})
    monkeypatch.setattr(P + "experiment_sections.boundary_lab", lambda config, out: {"reason": "none"})
    monkeypatch.setattr(P + "judge.judge_theory", lambda theory, regimes: [])
    monkeypatch.setattr(P + "report.write_reports", lambda *args: None)
    plan = types.SimpleNamespace(in_order=lambda: [], measurements=lambda read: None)
    monkeypatch.setattr(P + "plan.model_plan", lambda name, config, out: plan)
    monkeypatch.setattr(P + "plan.model_opener", lambda name, config: None)
    monkeypatch.setattr(P + "plan.walk", lambda *a: types.SimpleNamespace(read={}, reused=[], seconds={}))
    monkeypatch.setattr(P + "judge.judge_model", lambda name, config, m, claims: ([], {}))
    clock = _Clock(1000.0, 1003.25, 1012.4)  # start; the summary's seconds; the final line
    monkeypatch.setattr(run, "time", clock)
    summary = run.reproduce(ReproduceConfig(models=("a",)), str(tmp_path))
    assert summary["seconds"] == pytest.approx(3.25) and not clock.times
    last = capsys.readouterr().err.splitlines()[-1]
    assert re.fullmatch(rf"\[reproduce \d\d:\d\d:\d\d\] done in 12 s: {re.escape(str(tmp_path / 'report.html'))}",
                        last)  # fmt: skip


def test_walk_prints_and_keeps_each_computed_sections_clock_difference(tmp_path, monkeypatch, capsys):
    from sinkscope.reproduction import plan

    computed = []
    sections = [types.SimpleNamespace(label=label, directory=tmp_path / label, key={"k": label},
                                      compute=lambda lm, d: (d.mkdir(), computed.append(d.name)),
                                      load=lambda d: d.name, work=0.0) for label in ("one", "two")]  # fmt: skip
    clock = _Clock(50.0, 57.6, 100.0, 100.4)
    monkeypatch.setattr(plan, "time", clock)
    walked = plan.walk("m", sections, lambda: "lm")
    assert computed == ["one", "two"] and not clock.times
    assert walked.seconds == pytest.approx({"one": 7.6, "two": 0.4})
    err = capsys.readouterr().err
    assert re.search(r"\] m: one: done in 8 s\n", err) and re.search(r"\] m: two: done in 0 s\n", err)
    assert "] m: one: computing\n" in err and "] m: two: computing\n" in err


def test_judge_theory_fits_the_exponent_from_t_64_on():
    from sinkscope.reproduction.judge import judge_theory

    costs = {32: 5.0, 64: 5000.0, 128: 128.0**2, 256: 256.0**2}  # off the T² line at 32 and at 64
    rows = [{"norm": "nuclear", "T": T, "pattern": p, "closed_form": c, "exact": np.nan}
            for T, c in costs.items() for p in ("sink", "diagonal")]  # fmt: skip
    rows.append({"norm": "frobenius", "T": 128, "pattern": "sink", "closed_form": 1.0, "exact": np.nan})
    closed, _ = judge_theory(pd.DataFrame(rows), {})
    x, y = np.log([64.0, 128.0, 256.0]), np.log([5000.0, 128.0**2, 256.0**2])
    slope = ((x - x.mean()) * (y - y.mean())).sum() / ((x - x.mean()) ** 2).sum()  # least squares by hand
    assert closed.evidence["sink_exponent"] == pytest.approx(slope)
    assert closed.evidence["diagonal_exponent"] == pytest.approx(slope)


def test_cost_layers_a_tie_is_not_a_sink_win():
    from sinkscope.reproduction.judge import cost_layers_verdict

    inf, nan = np.inf, np.nan
    per_layer = [(1.0, 1.0), (1.0, 2.0), (1.0, 0.5), (1.0, inf), (inf, 1.0), (nan, nan)]  # (sink, diagonal)
    rows = [{"T": T, "window": w, "layer": layer, "pattern": pattern, "cost": cost}
            for w in range(8) for T in (4, 8) for layer, pair in enumerate(per_layer)
            for pattern, cost in zip(("sink", "diagonal"), pair)]  # fmt: skip
    verdict = cost_layers_verdict("m", "c", pd.DataFrame(rows), 0)
    # wins: layer 1 (cheaper) and 3 (the diagonal infeasible); the tie, 2 and 4 lose; layer 5 is left out
    assert verdict.evidence["sink_cheaper_frac"] == pytest.approx(2 / 5)
    assert verdict.evidence["sink_cheaper_frac_T4"] == pytest.approx(2 / 5)
    assert verdict.evidence["pairs"] == 8 * 2 * 5
