"""`sinkscope train-bb --out`: claimed before training, one-line refusals, grids resume into their own folder."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from sinkscope.cli.main import main
from sinkscope.staging import claimed_output

TINY = ["--steps", "4", "--eval-every", "2", "--layers", "1", "--heads", "1", "--d-model", "16", "--length", "9",
        "--vocab-size", "8", "--triggers", "2", "--batch-size", "4", "--set", "train.eval_batch_size=8",
        "--set", "train.warmup_steps=1", "--quiet"]  # fmt: skip


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _refused(capsys, argv: list[str], match: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and match in err, err
    return err


def test_second_train_bb_on_the_same_out_is_refused_in_one_line(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bb"
    assert main(["train-bb", "--out", str(out), *TINY]) == 0
    before = (out / "summary.json").read_text()
    _refused(capsys, ["train-bb", "--out", str(out), *TINY], "already exists")
    assert (out / "summary.json").read_text() == before
    assert main(["train-bb", "--out", str(out), *TINY, "--overwrite"]) == 0
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    _refused(capsys, ["train-bb", "--out", str(foreign), *TINY, "--overwrite"], "not a sinkscope result")
    assert (foreign / "notes.txt").read_text() == "keep"


def test_a_concurrent_writer_is_refused_before_any_training(tmp_path: Path, capsys) -> None:
    out = tmp_path / "bb"
    with claimed_output(out):  # another process holding the lock looks the same (flock is per open file)
        _refused(capsys, ["train-bb", "--out", str(out), *TINY], "being written by another sinkscope process")
        _refused(capsys, ["train-bb", "--out", str(out), *TINY, "--seeds", "0,1"], "being written by another")
        assert not any(out.iterdir())


def test_a_grid_resumes_into_its_own_folder_but_not_a_foreign_one(tmp_path: Path, capsys) -> None:
    out = tmp_path / "g"
    assert main(["train-bb", "--out", str(out), "--seeds", "0,1", *TINY]) == 0
    stamp = (out / "run" / "seed_0" / "summary.json").stat().st_mtime_ns
    assert main(["train-bb", "--out", str(out), "--seeds", "0,1,2", *TINY]) == 0  # resumes: reuses seeds 0, 1
    assert (out / "run" / "seed_0" / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "run" / "seed_2" / "summary.json").is_file()
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("keep")
    _refused(capsys, ["train-bb", "--out", str(foreign), "--seeds", "0", *TINY], "no train-bb grid wrote")
