"""`reproduce` trains the regime map's runs and the boundary lab's in parallel worker processes where the CPUs are
free (`regime_section.regime_workers`), and parallel training gives what serial training gives: every run's numbers
but its wall-clock seconds, run by run, on a tiny grid."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.regime_section import regime_runs
from sinkscope.synthetic import regimes
from sinkscope.synthetic.boundary_runs import BoundarySetting, run_boundary
from sinkscope.synthetic.regimes import REGIME_BASE, RegimeGrid, run_regimes
from sinkscope.synthetic.train import RunConfig

GRID = RegimeGrid(inits=("gpt2", "torch"), bos=(True, False), weight_decays=(1e-4,), variants=("softmax",),
                  seeds=(0, 1, 2), steps=4)  # fmt: skip
TINY = {**REGIME_BASE, "task.vocab_size": 16, "task.length": 33, "model.n_layers": 1, "model.d_model": 16,
        "train.batch_size": 16, "train.eval_batch_size": 32, "train.eval_every": 4, "train.checkpoint_every": 4}  # fmt: skip


def test_parallel_workers_train_the_serial_map(tmp_path):
    base = RunConfig().with_overrides(TINY)
    serial = run_regimes(base, tmp_path / "serial", grid=GRID, workers=1)
    parallel = run_regimes(base, tmp_path / "parallel", grid=GRID, workers=2)
    assert len(serial) == 12 and serial["copy_acc"].nunique() > 1  # 12 distinct runs, not one repeated
    drop = [name for name in serial.columns if name in ("seconds", "run_dir")]
    pd.testing.assert_frame_equal(serial.drop(columns=drop), parallel.drop(columns=drop))
    cells = [pd.read_parquet(tmp_path / name / "regime_cells.parquet") for name in ("serial", "parallel")]
    pd.testing.assert_frame_equal(*cells)


def test_parallel_workers_train_the_serial_boundary_lab(tmp_path):
    settings = (BoundarySetting(8, 4, 4), BoundarySetting(8, 3, 8))
    serial = run_boundary(tmp_path / "serial", settings, seeds=(0,), steps=4)
    parallel = run_boundary(tmp_path / "parallel", settings, seeds=(0,), steps=4, workers=2)
    assert len(serial) == 2 and serial["copy_acc"].nunique() > 1  # two distinct runs
    pd.testing.assert_frame_equal(serial.drop(columns="seconds"), parallel.drop(columns="seconds"))


@pytest.mark.parametrize(("threads", "workers"), [(1, 1), (2, 2), (64, 12)])
def test_the_section_trains_as_many_runs_at_once_as_it_has_threads(tmp_path, monkeypatch, threads, workers):
    asked = []

    def fake_regimes(out_dir, grid, progress, workers=1):  # the map's table, without the training
        asked.append(workers)
        out_dir.mkdir(parents=True)
        pd.DataFrame({"variant": ["softmax"] * 2, "weight_decay": [1e-4] * 2, "init": ["gpt2"] * 2,
                      "bos": [True, False], "bos_mass": [0.9, 0.1], "diag_mass": [0.1, 0.8],
                      "pattern": ["sink", "diagonal"], "agreement": ["3/3", "3/3"]}).to_parquet(
            out_dir / "regime_cells.parquet")  # fmt: skip

    monkeypatch.setattr(regimes, "run_regimes", fake_regimes)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        regime_runs(ReproduceConfig(models=("m",), corpora=("builtin:prose",)), tmp_path)
    finally:
        torch.set_num_threads(before)
    assert asked == [workers]  # the quick grid's 12 runs at most
