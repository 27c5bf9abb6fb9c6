"""A folder sinkscope did not make is never treated as its own: a train-bb grid and a sweep continue only a folder
their own command stamped (or an older one holding nothing but their tables and sinkscope's results), and a file
`--out` never replaces a file another command wrote (a run's run.json). Each case compares every byte of the
user's folder before and after with the bytes the test wrote itself."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from sinkscope.cli.main import main
from sinkscope.ownership import MARKER

from .test_reliability_two import TINY_BB, analyze_args, no_report, one_error, tiny  # noqa: F401 (fixtures)


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every path under `folder` with its bytes (None for a folder)."""
    return {p.relative_to(folder).as_posix(): None if p.is_dir() else p.read_bytes() for p in folder.rglob("*")}


def user_grid_folder(root: Path) -> Path:
    """A project folder of the user's that happens to hold a `summary.parquet` and a run-like `summary.json`."""
    folder = root / "project"
    (folder / "exp1").mkdir(parents=True)
    (folder / "summary.parquet").write_bytes(b"PAR1 the user's own table PAR1")
    (folder / "exp1" / "summary.json").write_text('{"mine": true}')
    return folder


@pytest.mark.parametrize("contents", ["summary.parquet and a run-like folder", "only summary.parquet"])
def test_a_grid_never_writes_into_a_users_folder_holding_its_table_names(tmp_path, capsys, contents):
    folder = user_grid_folder(tmp_path)
    if contents == "only summary.parquet":
        (folder / "exp1" / "summary.json").unlink()
        (folder / "exp1").rmdir()
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"a": {}}))
    before = snapshot(folder)
    line = one_error(capsys, ["train-bb", "--grid", str(grid), "--out", str(folder), *TINY_BB])
    assert "no train-bb grid wrote" in line and str(folder) in line
    assert snapshot(folder) == before


def test_a_grid_continues_the_folder_it_made_and_an_older_unstamped_grid(tmp_path):
    out, grid = tmp_path / "g", tmp_path / "g.json"
    grid.write_text(json.dumps({"a": {}}))
    assert main(["train-bb", "--grid", str(grid), "--out", str(out), *TINY_BB]) == 0
    assert json.loads((out / MARKER).read_text())["kind"] == "train-bb grid"
    (out / MARKER).unlink()  # a grid written before grids were stamped: only its tables and sinkscope's runs
    stamp = (out / "a" / "summary.json").stat().st_mtime_ns
    grid.write_text(json.dumps({"a": {}, "b": {"train.weight_decay": 0.5}}))
    assert main(["train-bb", "--grid", str(grid), "--out", str(out), *TINY_BB]) == 0
    assert (out / "a" / "summary.json").stat().st_mtime_ns == stamp and (out / "b" / "summary.json").is_file()
    assert json.loads((out / MARKER).read_text())["kind"] == "train-bb grid"


def test_a_refused_grid_leaves_no_folder_behind(tmp_path, capsys):
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"a": {"train.no_such_field": 1}}))
    one_error(capsys, ["train-bb", "--grid", str(grid), "--out", str(tmp_path / "new"), *TINY_BB])
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("cells", ["the user's own cells", "an empty cells folder"])
def test_a_sweep_never_takes_over_a_folder_with_a_cells_subfolder(tiny, tmp_path, capsys, cells):  # noqa: F811
    model, corpus = tiny
    folder = tmp_path / "study"
    (folder / "cells").mkdir(parents=True)
    if cells == "the user's own cells":
        (folder / "cells" / "a").mkdir()
        (folder / "cells" / "a" / "run.json").write_text('{"mine": true}')
    (folder / "sweep.csv").write_text("my,own\n1,2\n")
    before = snapshot(folder)
    line = one_error(capsys, ["sweep", "--models", str(model), "--corpora", str(corpus), "--seq-lens", "8",
                              "--max-windows", "2", "--quiet", "--out", str(folder)])  # fmt: skip
    assert "not a sweep directory" in line and str(folder) in line
    assert snapshot(folder) == before and not (folder / "figures").exists()


def test_a_sweep_continues_the_folder_it_made(tiny, tmp_path):  # noqa: F811
    model, corpus = tiny
    out = tmp_path / "sw"
    argv = ["sweep", "--models", str(model), "--corpora", str(corpus), "--seq-lens", "8", "--max-windows", "2",
            "--quiet", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    assert json.loads((out / MARKER).read_text())["kind"] == "sweep"
    (cell,) = (out / "cells").iterdir()
    stamp = (cell / "run.json").stat().st_mtime_ns
    assert main(argv) == 0
    assert (cell / "run.json").stat().st_mtime_ns == stamp


@pytest.mark.parametrize("command", ["view", "report"])
def test_a_page_never_replaces_a_file_another_command_wrote(tiny, tmp_path, capsys, no_report, command):  # noqa: F811
    model, _ = tiny
    run = tmp_path / "run"
    assert main(analyze_args(tiny, "--out", str(run))) == 0
    assert "run.json" in json.loads((run / MARKER).read_text())["entries"]  # listed as the run's own file
    before = snapshot(run)
    argv = {"view": ["view", "--model", str(model), "--text", "w1 w2 w3", "--out", str(run / "run.json")],
            "report": ["report", str(run), "--out", str(run / "run.json")]}[command]
    line = one_error(capsys, argv)
    assert "exists and is not a page sinkscope wrote" in line
    assert snapshot(run) == before
