"""The lab trained across Figure 3's predicted cost boundary (`synthetic.boundary_runs`) and its claim
`cost_boundary_trained` (`reproduction.experiment_claims`): the settings sit where Wendel's formula puts them, the
attention input's rank is d − 1 (LayerNorm), each run's row carries its classifier pattern against the
prediction, and the verdict reads only the diagonal side, with the sink side as its control."""

import json
import math

import numpy as np
import pandas as pd
import torch

from sinkscope.reproduction import verdicts as v
from sinkscope.reproduction.claim_texts import CLAIMS, with_claim_text
from sinkscope.reproduction.experiment_claims import THRESHOLDS, cost_boundary_trained_verdict
from sinkscope.synthetic import boundary_runs
from sinkscope.synthetic.boundary_runs import (
    BOUNDARY_SETTINGS,
    BoundarySetting,
    boundary_config,
    run_boundary,
)
from sinkscope.synthetic.train import build_model

S, P, N, NM = v.SUPPORTED, v.PARTLY, v.NOT_SUPPORTED, v.NOT_MEASURABLE


def wendel(T, r):
    """P(H1) by the count of Wendel's theorem, written out: 2^{-(T-1)} Σ_{k<r} C(T-1, k)."""
    return sum(math.comb(T - 1, k) for k in range(min(r, T))) / 2 ** (T - 1)


def test_the_settings_sit_firmly_on_their_side_of_the_boundary():
    sides = {s.name: s.predicted for s in BOUNDARY_SETTINGS}
    assert sorted(sides.values()) == ["diagonal", "diagonal", "sink", "sink"]
    for s in BOUNDARY_SETTINGS:
        if s.predicted == "diagonal":
            assert wendel(s.contexts, s.width - 1) < 1e-3  # far below ½
        else:
            assert s.width - 1 >= s.contexts + 1


def test_the_attention_input_has_rank_d_minus_one():
    """The rank the prediction uses: the lab's pre-LayerNorm output on every position of many sequences."""
    setting = BoundarySetting(32, 8, 16)
    config = boundary_config(setting, seed=0, steps=10)
    assert config.task.length == 9 and config.model.d_model == 16 and config.train.steps == 10
    model = build_model(config)
    ids = torch.randint(0, 33, (64, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        z = model(ids)[1][0].z.reshape(-1, 16).double()
    singular = torch.linalg.svdvals(z)
    assert int((singular > 1e-4 * singular[0]).sum()) == setting.rank == 15


def test_run_boundary_rows_hold_the_trained_pattern_against_the_prediction(tmp_path, monkeypatch):
    """A stand-in for training whose switch-head pattern is known per width; a second call reuses the runs."""
    trained = []
    patterns = {8: "mixed", 16: "sink", 32: "sink"}

    def fake_train(config, run_dir, overwrite, log):
        trained.append((config.task.length, config.model.d_model, config.train.seed))
        summary = {"switch_head": {"pattern": patterns[config.model.d_model]}, "copy_acc": 0.9, "seconds": 1.0,
                   "switch_head_final": {"bos_attn": 0.8, "diag_attn": 0.1, "entropy": 0.2}}  # fmt: skip
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps(summary))
        return summary

    monkeypatch.setattr(boundary_runs, "train_bb", fake_train)
    settings = (BoundarySetting(32, 32, 8), BoundarySetting(32, 8, 16))
    table = run_boundary(tmp_path, settings, seeds=(0, 1), steps=5)
    assert trained == [(33, 8, 0), (33, 8, 1), (9, 16, 0), (9, 16, 1)]
    assert table["predicted"].tolist() == ["diagonal"] * 2 + ["sink"] * 2
    assert table["pattern"].tolist() == ["mixed"] * 2 + ["sink"] * 2
    assert table["matches"].tolist() == [False, False, True, True]
    assert table["rank"].tolist() == [7, 7, 15, 15] and table["p_h1"].iloc[0] == wendel(32, 7)
    again = run_boundary(tmp_path, settings, seeds=(0, 1), steps=5)
    assert len(trained) == 4 and again.equals(table)


def runs(diagonal_side, sink_side):
    """Two settings per side, one row per seed: `diagonal_side`/`sink_side` are per-setting lists of patterns."""
    rows = []
    for predicted, settings in (("diagonal", diagonal_side), ("sink", sink_side)):
        for index, patterns in enumerate(settings):
            rows += [{"setting": f"{predicted}{index}", "predicted": predicted, "pattern": p, "steps": 100}
                     for p in patterns]  # fmt: skip
    return pd.DataFrame(rows)


def test_cost_boundary_trained_reads_the_diagonal_side_with_the_sink_side_as_control():
    sinks = [["sink"] * 3, ["sink"] * 3]
    found = cost_boundary_trained_verdict(runs([["diagonal"] * 3, ["diagonal"] * 3], sinks))
    assert found.verdict == S and found.interval["estimate"] == 1.0 and found.interval["n"] == 12
    assert "within strata" in found.interval["over"] and found.evidence["sink_side_match"] == 1.0
    missed = cost_boundary_trained_verdict(runs([["sink", "mixed", "sink"], ["sink"] * 3], sinks))
    assert missed.verdict == N and missed.interval["estimate"] == 0.0
    assert np.isclose(missed.evidence["diagonal_side_sink_share"], 5 / 6)
    most = cost_boundary_trained_verdict(runs([["diagonal"] * 3, ["diagonal", "mixed", "diagonal"]], sinks))
    assert most.verdict == P and np.isclose(most.interval["estimate"], 5 / 6)
    # the lab forms no switch where the sink is predicted: the diagonal side cannot be judged
    no_control = cost_boundary_trained_verdict(runs([["diagonal"] * 3] * 2, [["mixed"] * 3] * 2))
    assert no_control.verdict == NM and no_control.reason.startswith("the control fails: 0.00 of the runs")
    few = cost_boundary_trained_verdict(runs([["diagonal"]] * 2, [["sink"]] * 2))
    assert few.verdict == NM and few.reason.startswith("too few lab runs")
    one_side = cost_boundary_trained_verdict(runs([], sinks))
    assert one_side.verdict == NM and "diagonal_side_match" in one_side.reason
    skipped = cost_boundary_trained_verdict(None, "not trained under --quick")
    assert skipped.verdict == NM and skipped.reason == "not trained under --quick"


def test_cost_boundary_trained_has_its_words_and_its_thresholds_vary():
    record = cost_boundary_trained_verdict(runs([["diagonal"] * 3] * 2, [["sink"] * 3] * 2))
    varied = {r["threshold"] for r in record.sensitivity if "not_varied" not in r}
    assert varied == set(THRESHOLDS["cost_boundary_trained"])
    fixed = {r["threshold"]: r["not_varied"] for r in record.sensitivity if "not_varied" in r}
    assert list(fixed) == ["settings"] and "fixed by the boundary" in fixed["settings"]  # the lab's settings, recorded
    text = with_claim_text(record.to_dict())
    assert text["paper_claim"] == CLAIMS["cost_boundary_trained"].paper_claim
    assert text["table"] == "cost_boundary_trained"


def test_reproduce_trains_the_boundary_lab_once_and_not_under_quick(tmp_path, monkeypatch):
    """`experiment_sections.boundary_lab`: not trained under --quick or regimes=False; otherwise trained into
    out/regimes-boundary/ with its key, and read back (not retrained) by the next reproduction."""
    from sinkscope.reproduction.config import ReproduceConfig
    from sinkscope.reproduction.experiment_sections import boundary_lab

    calls = []

    def fake_run(out_dir, progress=None, workers=1):
        calls.append(out_dir)
        return runs([["diagonal"] * 3] * 2, [["sink"] * 3] * 2).assign(seed=0)

    monkeypatch.setattr(boundary_runs, "run_boundary", fake_run)
    assert "--quick" in boundary_lab(ReproduceConfig.preset(True), tmp_path)["reason"]
    assert "regimes=False" in boundary_lab(ReproduceConfig(regimes=False), tmp_path)["reason"]
    assert calls == []
    first = boundary_lab(ReproduceConfig(), tmp_path)["runs"]
    assert len(calls) == 1 and (tmp_path / "regimes-boundary" / "reproduce-key.json").is_file()
    again = boundary_lab(ReproduceConfig.preset(True), tmp_path)  # a finished lab is read back, even under --quick
    assert len(calls) == 1 and again["runs"].equals(first)
    assert cost_boundary_trained_verdict(again["runs"]).verdict == S
    monkeypatch.setattr(boundary_runs, "REGIME_BASE", boundary_runs.REGIME_BASE | {"train.lr": 1e-3})
    boundary_lab(ReproduceConfig(), tmp_path)  # another base: the finished lab is stale and retrained
    assert len(calls) == 2
