"""The regime map reuses a run only when it was trained with the configuration asked for (`train-bb --grid regimes`
as every other grid), and `reproduce`'s regimes section is keyed by the base configuration its runs start from."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.regime_section import regime_runs
from sinkscope.synthetic import regimes
from sinkscope.synthetic.regimes import REGIME_BASE, RegimeGrid, run_regimes
from sinkscope.synthetic.train import RunConfig

GRID = RegimeGrid(inits=("gpt2",), bos=(True,), weight_decays=(1e-4,), variants=("softmax",), seeds=(0, 1, 2),
                  steps=6)  # fmt: skip


def base(d_model: int) -> RunConfig:
    return RunConfig().with_overrides({**REGIME_BASE, "model.d_model": d_model, "train.eval_every": 3,
                                       "train.checkpoint_every": 6, "train.eval_batch_size": 16})  # fmt: skip


def trained_widths(out: Path) -> list[int]:
    return [json.loads(p.read_text())["model"]["d_model"] for p in sorted(out.glob("runs/*/seed_*/config.json"))]


def stamps(out: Path) -> list[int]:
    return [p.stat().st_mtime_ns for p in sorted(out.glob("runs/*/seed_*/summary.json"))]


@pytest.fixture
def no_pages(monkeypatch):
    """Skip each run's figures and page (drawn by matplotlib, most of a 6-step run's time)."""
    from sinkscope.synthetic import report_page

    monkeypatch.setattr(report_page, "write_figures", lambda *args, **kwargs: [])
    monkeypatch.setattr(report_page, "write_report", lambda path, *args, **kwargs: Path(path).touch())


def test_a_regime_map_trains_again_the_runs_of_another_base_configuration(tmp_path, capsys, no_pages):
    out = tmp_path / "regimes"
    run_regimes(base(16), out, grid=GRID)
    assert trained_widths(out) == [16, 16, 16]
    first = stamps(out)
    run_regimes(base(16), out, grid=GRID)  # nothing changed: every run reused
    assert stamps(out) == first
    capsys.readouterr()
    run_regimes(base(24), out, grid=GRID)
    assert trained_widths(out) == [24, 24, 24]  # trained at the width asked for, not read from the runs at 16
    assert json.loads((out / "regimes.json").read_text())["base"]["model"]["d_model"] == 24
    err = capsys.readouterr().err
    assert err.count("was trained with another configuration (its config.json): training it again") == 3, err


def test_reproduces_regimes_section_is_trained_again_when_the_base_configuration_changed(tmp_path, monkeypatch):
    trained = []

    def fake_regimes(out_dir, grid, progress, workers=1):  # the map's table, without the minutes of training
        trained.append(out_dir)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        pd.DataFrame({"variant": ["softmax"] * 2, "weight_decay": [1e-4] * 2, "init": ["gpt2"] * 2,
                      "bos": [True, False], "bos_mass": [0.9, 0.1], "diag_mass": [0.1, 0.8],
                      "pattern": ["sink", "diagonal"], "agreement": ["3/3", "3/3"]}).to_parquet(
            Path(out_dir) / "regime_cells.parquet")  # fmt: skip

    monkeypatch.setattr(regimes, "run_regimes", fake_regimes)
    config = ReproduceConfig(models=("m",), corpora=("builtin:prose",))
    regime_runs(config, tmp_path)
    regime_runs(config, tmp_path)
    assert len(trained) == 1  # the same base: reused
    monkeypatch.setitem(REGIME_BASE, "model.d_model", 24)
    regime_runs(config, tmp_path)
    assert len(trained) == 2  # another base: trained again


@pytest.mark.parametrize("field", ["train.lr", "task.length"])
def test_every_base_field_enters_the_regimes_key(tmp_path, monkeypatch, field):
    from sinkscope.reproduction.regime_section import regime_key

    before = regime_key()
    monkeypatch.setitem(REGIME_BASE, field, REGIME_BASE[field] * 2)
    section, name = field.split(".")
    assert regime_key()["base"][section][name] == before["base"][section][name] * 2
