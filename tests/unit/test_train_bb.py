"""Training the lab end to end: it learns (beats the unigram baseline), is deterministic, writes its run dir."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from sinkscope.cli import train_bb as train_bb_cli
from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.bigram_backcopy import GBBTask
from sinkscope.synthetic.evaluation import METRIC_COLUMNS, evaluate
from sinkscope.synthetic.train import RunConfig, learning_rate, load_checkpoint, train_bb

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
    _, model = load_checkpoint(run)
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
