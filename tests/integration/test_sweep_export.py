"""`sinkscope sweep` (one pass per cell, every ε counted at once, resumable) and `sinkscope export`."""

import json

import pandas as pd
import pytest
import torch

from sinkscope.cli.main import main
from sinkscope.corpus.windows import windows
from sinkscope.errors import SinkscopeError
from sinkscope.models.load import load_model
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze
from sinkscope.pipelines.export import export_tables
from sinkscope.pipelines.sweep import SweepConfig, sweep

from .tiny_checkpoint import save_tiny_llama, write_corpus


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return str(save_tiny_llama(root / "model")), str(write_corpus(root / "corpus.txt"))


def test_sweep_counts_every_epsilon_in_one_pass_and_resumes(tiny, tmp_path):
    torch.set_num_threads(1)
    model, corpus = tiny
    config = SweepConfig(models=(model,), corpora=(corpus, "builtin:random"), seq_lens=(8, 12),
                         epsilons=(0.1, 0.3, 0.5), max_windows=4, batch_size=2)
    lines: list[str] = []
    table = sweep(config, tmp_path / "sw", progress=False, echo=lines.append)
    assert len(table) == 1 * 2 * 2 * 3 and sum("analysing" in line for line in lines) == 4
    assert pd.read_csv(tmp_path / "sw" / "sweep.csv").shape == table.shape
    assert {p.name for p in (tmp_path / "sw" / "figures").iterdir()} == {
        f"sink_rate_vs_{x}.{kind}" for x in ("epsilon", "seq_len") for kind in ("png", "svg")}  # vector beside PNG
    # Each ε counted in the shared pass equals a separate analysis at that ε alone.
    lm = load_model(model)
    for epsilon in config.epsilons:
        stream = windows("builtin:random", lm.tokenizer, 12, 4, batch_size=2)
        alone = analyze(lm, stream, AnalyzeConfig(epsilon=epsilon, geometry_cap=0), progress=False)
        row = table[(table["corpus"] == "builtin:random") & (table["seq_len"] == 12) & (table["epsilon"] == epsilon)]
        assert row["sink_rate"].item() == pytest.approx(alone.meta["summary"]["sink_rate"])
        assert row["sink_rate_of_mean"].item() == pytest.approx(alone.meta["summary"]["sink_rate_of_mean"])
    # Rerun: every cell is skipped; remove one cell and only that one runs again.
    lines.clear()
    again = sweep(config, tmp_path / "sw", progress=False, echo=lines.append)
    assert sum("skipped" in line for line in lines) == 4
    pd.testing.assert_frame_equal(again, table)
    cell = tmp_path / "sw" / "cells" / table["cell"].iloc[0]
    for path in cell.iterdir():
        path.unlink()
    cell.rmdir()
    lines.clear()
    resumed = sweep(config, tmp_path / "sw", progress=False, echo=lines.append)
    numeric = ["sink_rate", "sink_rate_of_mean", "mean_sink_score", "mean_diag_score"]
    pd.testing.assert_frame_equal(resumed[numeric], table[numeric], rtol=1e-9, atol=1e-12)
    assert sum("analysing" in line for line in lines) == 1
    # Other settings in the same directory are refused before any work.
    other = SweepConfig(models=(model,), corpora=(corpus,), seq_lens=(8,), epsilons=(0.2,), max_windows=4)
    with pytest.raises(SinkscopeError, match="other settings"):
        sweep(other, tmp_path / "sw", progress=False, echo=lines.append)


def test_sweep_rejects_bad_lists_before_loading_a_model(tmp_path, capsys):
    assert main(["sweep", "--models", "m", "--corpora", "builtin:prose", "--seq-lens", "64,x", "--out",
                 str(tmp_path / "s")]) == 2  # fmt: skip
    assert "--seq-lens '64,x'" in capsys.readouterr().err
    with pytest.raises(SinkscopeError, match="--epsilons 1.5"):
        SweepConfig(models=("m",), corpora=("builtin:prose",), seq_lens=(64,), epsilons=(0.3, 1.5))
    with pytest.raises(SinkscopeError, match="no-such-file"):
        SweepConfig(models=("m",), corpora=("no-such-file.txt",), seq_lens=(64,))


def test_a_short_corpus_is_announced_and_the_export_of_a_sweep_names_the_cells(tiny, tmp_path, capsys):
    model, _ = tiny
    short = str(write_corpus(tmp_path / "short.txt", documents=2, words=40))  # 81 tokens: 5 windows of T = 16
    # and a sixth of the last 15 tokens (issue 35: no token dropped)
    config = SweepConfig(models=(model,), corpora=(short,), seq_lens=(16,), epsilons=(0.3,), max_windows=8,
                         batch_size=2)  # fmt: skip
    lines: list[str] = []
    table = sweep(config, tmp_path / "sw", progress=False, echo=lines.append)
    assert any(line.endswith("analysing 6 windows (the corpus gives 6 of the 8 asked for)") for line in lines), lines
    assert table["windows"].tolist() == [6]
    capsys.readouterr()
    assert main(["export", str(tmp_path / "sw"), "--format", "json"]) == 0
    wrote, cells = capsys.readouterr().out.strip().splitlines()
    assert wrote == f"wrote 1 table to {tmp_path / 'sw' / 'json'}: sweep.json"
    assert cells == (f"each sweep cell's own tables: sinkscope export {tmp_path / 'sw' / 'cells'}/NAME --format json "
                     f"(cells: {table['cell'].iloc[0]})")  # fmt: skip


def test_export_writes_every_table_as_csv_and_json(tiny, tmp_path):
    model, corpus = tiny
    lm = load_model(model)
    run = analyze(lm, windows(corpus, lm.tokenizer, 10, 4), AnalyzeConfig(geometry_cap=0), progress=False)
    run.save(tmp_path / "run", report=False)
    assert main(["export", str(tmp_path / "run"), "--format", "csv"]) == 0
    assert main(["export", str(tmp_path / "run"), "--format", "json", "--out", str(tmp_path / "j")]) == 0
    names = {p.stem for p in (tmp_path / "run").glob("*.parquet")}
    assert names >= {"heads", "layers", "positions", "tokens", "token_layers", "windows", "massive_activations"}
    assert {p.stem for p in (tmp_path / "run" / "csv").iterdir() if not p.name.startswith(".")} == names
    for name in names:
        original = pd.read_parquet(tmp_path / "run" / f"{name}.parquet")
        from_csv = pd.read_csv(tmp_path / "run" / "csv" / f"{name}.csv", keep_default_na=False, na_values=[""])
        rows = json.loads((tmp_path / "j" / f"{name}.json").read_text())
        assert len(from_csv) == len(rows) == len(original)
        numeric = original.select_dtypes("number").columns
        pd.testing.assert_frame_equal(from_csv[numeric], original[numeric], check_dtype=False)
        from_json = pd.DataFrame(rows, columns=original.columns)
        pd.testing.assert_frame_equal(from_json[numeric].astype(float), original[numeric].astype(float))
    with pytest.raises(SinkscopeError, match="holds no tables"):
        export_tables(tmp_path / "j", "csv")
