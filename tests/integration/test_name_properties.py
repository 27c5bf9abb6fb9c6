"""Property tests (hypothesis) of names built from user input (issue 26): train-bb grid run names, sweep models and
corpora. Whatever the strings, every path written stays under `--out`, and distinct inputs never share a folder.

The training and the analysis are replaced by stubs that write a minimal result through the real staging code,
so each example takes milliseconds while the path logic (`safe_name`, `cell_name`, `child`, the staged writes)
is the real one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinkscope.corpus.windows
import sinkscope.models.load
import sinkscope.pipelines.analysis
import sinkscope.report.sweep_page
import sinkscope.synthetic.experiments as experiments
from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.run import Run
from sinkscope.pipelines.sweep import SweepConfig, cell_name, sweep
from sinkscope.staging import safe_name, staged_directory
from sinkscope.synthetic.config import RunConfig

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
# Any text, surrogates and control characters included, as JSON grid keys and command-line lists can carry them.
TEXT = st.text(st.characters(codec=None), max_size=80)


def files_under(root: Path) -> list[Path]:
    """Every file and folder below `root` (symlinks not followed)."""
    return [Path(base) / name for base, dirs, files in os.walk(root) for name in dirs + files]


def inside(path: Path, folder: Path) -> bool:
    return Path(os.path.realpath(path)).is_relative_to(os.path.realpath(folder))


def is_plain_component(name: str) -> bool:
    return (
        name not in ("", ".", "..") and not name.startswith(".") and "/" not in name and "\0" not in name
        and len(name.encode("utf-8", "surrogatepass")) <= 255
    )  # fmt: skip


@SETTINGS
@given(st.lists(TEXT, min_size=1, max_size=8, unique=True))
def test_safe_names_are_one_plain_folder_and_distinct(texts):
    names = [safe_name(text) for text in texts]
    assert all(is_plain_component(name) for name in names), names
    assert len(set(names)) == len(names), (texts, names)
    assert all(safe_name(t) == t for t in texts if t.isascii() and t.replace("_", "a").replace("-", "a")
               .replace("+", "a").replace(".", "a").isalnum() and not t.startswith(".") and len(t) <= 64)  # fmt: skip


@SETTINGS
@given(st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=8, unique=True), st.integers(2, 10**6))
def test_sweep_cell_names_are_one_plain_folder_and_distinct(pairs, seq_len):
    names = [cell_name(model, corpus, seq_len) for model, corpus in pairs]
    assert all(is_plain_component(name) for name in names), names
    assert len(set(names)) == len(names), (pairs, names)


@pytest.fixture
def fake_training(monkeypatch):
    """train_bb writes a staged run holding summary.json; the timeline and summary row are stubs."""

    def train(config, out_dir, overwrite=False, log=True):
        with staged_directory(out_dir) as staging:
            (staging / "summary.json").write_text("{}")
        return {}

    monkeypatch.setattr(experiments, "train_bb", train)
    monkeypatch.setattr(experiments, "summary_row", lambda name, summary: {"run": name})
    monkeypatch.setattr(experiments, "head_timeline", lambda run_dir: pd.DataFrame({"step": [0]}))


@SETTINGS
@given(grid_names=st.lists(TEXT, min_size=1, max_size=6, unique=True))
def test_grid_runs_stay_under_out_and_never_share_a_folder(fake_training, grid_names):
    with tempfile.TemporaryDirectory() as root:
        out = Path(root) / "out"
        grid = {name: {} for name in grid_names}
        folders = [safe_name(name) for name in grid_names]
        assert len(set(folders)) == len(folders)
        if not all(name == name.encode("utf-8", "replace").decode() for name in grid_names):  # lone surrogates
            with pytest.raises(SinkscopeError, match="is not valid Unicode text"):
                experiments.run_grid(grid, RunConfig(), out, log=False)
            assert not Path(root, "out").exists()
            return
        if len({folder.casefold() for folder in folders}) < len(folders):  # 'A' and 'a': one folder on macOS
            with pytest.raises(SinkscopeError, match="would share one folder"):
                experiments.run_grid(grid, RunConfig(), out, log=False)
            assert not Path(root, "out").exists()
            return
        experiments.run_grid(grid, RunConfig(), out, log=False)
        written = files_under(Path(root))
        assert all(inside(path, out) for path in written), written
        runs = [path.parent for path in written if path.name == "summary.json"]
        assert len(runs) == len(grid_names) and all(path.parent == out for path in runs)


def tiny_tables() -> dict[str, pd.DataFrame]:
    """The smallest tables `Run.load` accepts (one layer, one head)."""
    return {"heads": pd.DataFrame({"layer": [0], "head": [0], "sink_score": [0.1], "diag_score": [0.2],
                                   "head_class": ["mixed"]}),
            "layers": pd.DataFrame({"layer": [0], "sink_rate": [0.5]}),
            "positions": pd.DataFrame({"layer": [0], "position": [0]})}  # fmt: skip


@pytest.fixture
def fake_analysis(monkeypatch):
    """The sweep's model, windows and analysis are stubs; the cell is a real (tiny) run directory."""

    class Stream:
        def __init__(self, corpus, *args, **kwargs):
            self.corpus = corpus

        def available(self) -> int:
            return 1

    def analyze(lm, stream, config, progress=False):
        meta = {"model": {"name": "m"}, "corpus": {"source": stream.corpus, "windows": 1},
                "summary": {"sink_rates": {"0.3": 0.5}, "sink_rates_of_mean": {"0.3": 0.5}, "mean_sink_score": 0.1,
                            "mean_diag_score": 0.2, "sink_rate": 0.5, "epsilon": 0.3},
                "timings": {"analyze_seconds": 0.0}}  # fmt: skip
        return Run(meta=meta, **tiny_tables())

    class Model:
        tokenizer = None
        max_positions = None

    monkeypatch.setattr(sinkscope.models.load, "load_model", lambda *args, **kwargs: Model())
    monkeypatch.setattr(sinkscope.corpus.windows, "windows", Stream)
    monkeypatch.setattr(sinkscope.pipelines.analysis, "analyze", analyze)
    monkeypatch.setattr(sinkscope.report.sweep_page, "write_sweep_report", lambda *args, **kwargs: None)


# A corpus is a file, so its name is what a file system allows: no '/' or NUL, not '.' or '..'.
FILE_NAME = st.text(st.characters(codec="utf-8", exclude_characters="/\0"), min_size=1, max_size=40).filter(
    lambda name: name not in (".", "..") and len(name.encode()) <= 200
)


@SETTINGS
@given(corpora=st.lists(FILE_NAME, min_size=1, max_size=4, unique=True), models=st.lists(TEXT, min_size=1,
       max_size=2, unique=True))  # fmt: skip
def test_sweep_cells_stay_under_out_and_rows_point_at_their_own_cell(fake_analysis, corpora, models):
    with tempfile.TemporaryDirectory() as root:
        (Path(root) / "corpora").mkdir()
        paths = []
        for name in corpora:
            (Path(root) / "corpora" / name).write_text("w1 w2 w3")
            paths.append(str(Path(root) / "corpora" / name))
        out = Path(root) / "out"
        try:
            config = SweepConfig(models=tuple(models), corpora=tuple(paths), seq_lens=(4,), epsilons=(0.3,),
                                 max_windows=1)  # fmt: skip
            table = sweep(config, out, progress=False, echo=lambda line: None)
        except SinkscopeError as err:  # only for names that are not text, or coincide ignoring case
            assert not out.exists()
            if "is not valid UTF-8 text" in str(err):
                assert any(m != m.encode("utf-8", "replace").decode() for m in models)
                return
            assert "would share a folder" in str(err)
            names = [cell_name(m, c, 4) for m in models for c in paths]
            assert len({name.casefold() for name in names}) < len(set(names)) == len(names)
            return
        written = [path for path in files_under(Path(root)) if not inside(path, Path(root) / "corpora")]
        assert all(inside(path, out) for path in written), written
        assert table["cell"].nunique() == len(models) * len(corpora) == len(list((out / "cells").iterdir()))
        for row in table.itertuples():
            run = Run.load(out / "cells" / row.cell)
            assert run.meta["sweep_cell"]["corpus"] == row.corpus and run.meta["sweep_cell"]["model"] == row.model


@SETTINGS
@given(name=FILE_NAME)
def test_a_run_saved_under_any_name_leaves_only_that_folder(name):
    """`--out` may be any file name (spaces, non-Latin, leading '-' or '.', glob characters): the lock and the staged
    folder beside it go, the run is exactly where it was asked, and replacing it keeps that true."""
    from sinkscope.staging import claimed_output

    meta = {"model": {"name": "m"}, "corpus": {"source": "c"},
            "summary": {"sink_rate": 0.5, "epsilon": 0.3, "mean_sink_score": 0.1, "mean_diag_score": 0.2}}
    with tempfile.TemporaryDirectory() as root:
        out = Path(root) / name
        for overwrite in (False, True):
            with claimed_output(out, overwrite=overwrite):
                Run(meta=meta, **tiny_tables()).save(out, overwrite=True, report=False)
            assert os.listdir(root) == [name]
            assert Run.load(out).meta == meta
