"""Training the lab end to end: it learns (beats the unigram baseline), is deterministic, writes its run dir."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pandas as pd
import pytest
import torch

from sinkscope.cli import train_bb as train_bb_cli
from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.bigram_backcopy import GBBTask
from sinkscope.synthetic.evaluation import METRIC_COLUMNS, evaluate
from sinkscope.synthetic.experiments import run_grid
from sinkscope.synthetic.regimes import CELL_COLUMNS, REGIME_COLUMNS, RegimeGrid, regime_jobs, run_regimes
from sinkscope.synthetic.summary import PATTERNS
from sinkscope.synthetic.train import RunConfig, learning_rate, load_trained_model, train_bb

TINY = {
    "task.vocab_size": 16, "task.length": 33, "model.n_layers": 1, "model.d_model": 32,
    "train.batch_size": 32, "train.eval_batch_size": 64, "train.lr": 3e-3, "train.warmup_steps": 20,
}


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def test_one_layer_model_beats_unigram_and_writes_a_run(tmp_path: Path) -> None:
    config = RunConfig().with_overrides({**TINY, "train.steps": 200, "train.eval_every": 100})
    summary = train_bb(config, tmp_path / "run", log=False)
    run = tmp_path / "run"
    metrics = pd.read_parquet(run / "metrics.parquet")
    assert tuple(metrics.columns) == METRIC_COLUMNS and sorted(metrics["step"].unique()) == [0, 100, 200]
    # the unigram baseline fitted on the eval batch itself, an independent reference
    task = GBBTask.from_config(config.task)
    eval_batch = task.sample(64, torch.Generator().manual_seed(config.train.seed + 1))
    unigram = task.unigram_loss(eval_batch)
    assert summary["loss"] < unigram - 0.3
    assert 0 <= summary["excess_loss_noncopy"] < unigram - summary["bayes_loss"]  # KL to the oracle
    # the checkpoint reloads into a model that reproduces the final evaluation
    _, model = load_trained_model(run)
    row = evaluate(model, eval_batch, step=200)[0]
    assert abs(row["loss"] - summary["loss"]) < 1e-5
    saved = json.loads((run / "config.json").read_text())
    assert {k: saved[k] for k in ("task", "model", "train")} == config.to_dict() and "torch" in saved["versions"]
    page = (run / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 7
    assert not list(tmp_path.glob(".run.*"))  # the temporary folder was renamed


def test_training_is_deterministic(tmp_path: Path) -> None:
    config = RunConfig().with_overrides({**TINY, "train.steps": 10, "train.eval_every": 5})
    train_bb(config, tmp_path / "a", log=False)
    train_bb(config, tmp_path / "b", log=False)
    pd.testing.assert_frame_equal(
        pd.read_parquet(tmp_path / "a" / "metrics.parquet"), pd.read_parquet(tmp_path / "b" / "metrics.parquet")
    )


def test_learning_rate_schedule() -> None:
    train = RunConfig().with_overrides({"train.steps": 1100, "train.warmup_steps": 100}).train
    assert learning_rate(50, train) == pytest.approx(train.lr / 2)
    assert learning_rate(100, train) == pytest.approx(train.lr)
    assert learning_rate(600, train) == pytest.approx(train.lr * (0.1 + 0.9 * 0.5))
    assert learning_rate(1100, train) == pytest.approx(train.lr * 0.1)


def cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="sinkscope")
    train_bb_cli.add_parser(parser.add_subparsers())
    args = parser.parse_args(argv)
    return args.func(args)


def test_cli_grid_from_json_and_bad_input(tmp_path: Path) -> None:
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"soft": {}, "relu": {"model.attention": "relu"}}))
    sets = [f"--set={k}={v}" for k, v in TINY.items()]
    args = ["train-bb", "--out", str(tmp_path / "g"), "--grid", str(grid), "--steps", "10", "--eval-every", "5"]
    assert cli([*args, *sets, "--quiet"]) == 0
    table = pd.read_parquet(tmp_path / "g" / "summary.parquet")
    assert list(table["run"]) == ["soft", "relu"]
    timeline = pd.read_parquet(tmp_path / "g" / "timeline.parquet")
    assert list(timeline["step"]) == [0, 5, 10, 0, 5, 10]
    with pytest.raises(SinkscopeError, match="model.depth"):
        cli(["train-bb", "--out", str(tmp_path / "x"), "--set", "model.depth=3"])
    with pytest.raises(SinkscopeError, match="not empty"):
        train_bb(RunConfig(), tmp_path / "g")


def test_every_head_is_reported(tmp_path: Path) -> None:
    """2 layers × 2 heads: the summary, the one-line headline, the page and the grid timeline name all 4 heads."""
    config = RunConfig().with_overrides({**TINY, "model.n_layers": 2, "model.n_heads": 2, "train.steps": 4,
                                         "train.eval_every": 2})
    table = run_grid({"r": {}}, config, tmp_path / "g", log=False)
    summary = json.loads((tmp_path / "g" / "r" / "summary.json").read_text())
    names = [f"L{layer}H{head}" for layer in range(2) for head in range(2)]
    assert [(h["layer"], h["head"]) for h in summary["heads"]] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(h["pattern"] in PATTERNS for h in summary["heads"])
    assert all(name in summary["heads_line"] for name in names) and table["heads"][0] == summary["heads_line"]
    page = (tmp_path / "g" / "r" / "report.html").read_text()
    assert all(f"{name} " in page for name in names)
    timeline = pd.read_parquet(tmp_path / "g" / "timeline.parquet")
    assert len(timeline) == 3 * 4 and set(zip(timeline["layer"], timeline["head"])) == {(0, 0), (0, 1), (1, 0), (1, 1)}


def test_seeds_give_mean_and_spread(tmp_path: Path) -> None:
    config = RunConfig().with_overrides({**TINY, "train.steps": 3, "train.eval_every": 3})
    table = run_grid({"r": {}}, config, tmp_path / "s", log=False, seeds=(0, 1, 2))
    assert list(table["seed"]) == [0, 1, 2] and (tmp_path / "s" / "r" / "seed_2" / "summary.json").is_file()
    seeds = pd.read_parquet(tmp_path / "s" / "seeds.parquet").iloc[0]
    assert seeds["n_seeds"] == 3 and seeds["agreement"].endswith("/3")
    assert abs(seeds["bos_attn"] - table["bos_attn"].mean()) < 1e-12
    assert abs(seeds["bos_attn_std"] - table["bos_attn"].std(ddof=0)) < 1e-12
    assert table["bos_attn"].nunique() == 3  # the seed changes the model
    with pytest.raises(SinkscopeError, match="--seeds"):
        cli(["train-bb", "--out", str(tmp_path / "x"), "--seeds", "0,a"])


def test_tiny_regime_map_writes_the_documented_columns(tmp_path: Path) -> None:
    base = RunConfig().with_overrides({**TINY, "train.eval_every": 2, "train.checkpoint_every": 2})
    grid = RegimeGrid(inits=("gpt2", "torch"), bos=(True, False), weight_decays=(0.0,), variants=("softmax",),
                      seeds=(0, 1, 2), steps=2)
    rows = run_regimes(base, tmp_path / "m", grid=grid)
    saved = pd.read_parquet(tmp_path / "m" / "regimes.parquet")
    assert tuple(saved.columns) == REGIME_COLUMNS and len(saved) == 4 * 3
    pd.testing.assert_frame_equal(saved, rows)
    assert set(zip(saved["init"], saved["bos"])) == {("gpt2", True), ("gpt2", False), ("torch", True), ("torch", False)}
    assert saved.loc[saved["init"] == "torch", "embedding_init_std"].eq(1.0).all()
    assert abs(saved.loc[saved["init"] == "torch", "init_std"].iloc[0] - 1 / math.sqrt(3 * 32)) < 1e-12
    assert saved["pattern"].isin(PATTERNS).all() and (saved["wqk_nuclear"] >= saved["wqk_frobenius"]).all()
    assert (saved["dwqk_nuclear"] >= saved["dwqk_frobenius"]).all() and (saved["init_wqk_frobenius"] > 0).all()
    cells = pd.read_parquet(tmp_path / "m" / "regime_cells.parquet")
    assert tuple(cells.columns) == CELL_COLUMNS and len(cells) == 4 and cells["agreement"].str.endswith("/3").all()
    assert (tmp_path / "m" / "switch_costs.parquet").is_file() and saved["switch_param_norm"].isna().all()
    for name in ("phase_diagram.png", "wqk_costs.png"):
        assert (tmp_path / "m" / "figures" / name).read_bytes()[:4] == b"\x89PNG"
    config = json.loads((tmp_path / "m" / "runs" / saved["cell"][6] / "seed_0" / "config.json").read_text())
    assert config["model"]["init"] == "torch" and config["task"]["bos"] is True
    with pytest.raises(SinkscopeError, match="3 distinct seeds"):
        RegimeGrid(inits=("gpt2",), bos=(True,), weight_decays=(0.0,), variants=("softmax",), seeds=(0, 1), steps=2)


def test_a_union_of_grids_maps_each_cell_once_with_its_own_grid(tmp_path: Path) -> None:
    """Two grids sharing one cell: the union has each cell once (4 here), the shared one with the first grid's steps
    and seeds; every other cell with its own grid's seeds, steps and run dirs."""
    first = RegimeGrid(inits=("gpt2",), bos=(True,), weight_decays=(0.0,), variants=("softmax",), seeds=(0, 1, 2),
                       steps=1)
    second = RegimeGrid(inits=("gpt2", "torch"), bos=(True, False), weight_decays=(0.0,), variants=("softmax",),
                        seeds=(3, 4, 5), steps=2)
    cells, jobs = regime_jobs(RunConfig().with_overrides(TINY), (first, second), tmp_path)
    assert list(cells) == ["gpt2_bos_wd0_softmax", "gpt2_nobos_wd0_softmax", "torch_bos_wd0_softmax",
                           "torch_nobos_wd0_softmax"]
    assert [(cell, seed) for cell, seed, _, _ in jobs[:6]] == [
        ("gpt2_bos_wd0_softmax", 0), ("gpt2_bos_wd0_softmax", 1), ("gpt2_bos_wd0_softmax", 2),
        ("gpt2_nobos_wd0_softmax", 3), ("gpt2_nobos_wd0_softmax", 4), ("gpt2_nobos_wd0_softmax", 5)]
    assert len(jobs) == 12 and [config.train.steps for _, _, config, _ in jobs] == [1] * 3 + [2] * 9
    assert [(config.train.seed, config.task.bos, config.model.init) for _, _, config, _ in jobs[2:4]] == [
        (2, True, "gpt2"), (3, False, "gpt2")]
    assert jobs[4][3] == tmp_path / "runs" / "gpt2_nobos_wd0_softmax" / "seed_4"
