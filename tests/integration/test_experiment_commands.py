"""The issue-36 commands end to end on a tiny random Llama directory: each writes its tables, figure and page,
and refuses a bad argument with one line before loading anything."""

from __future__ import annotations

import pandas as pd
import pytest
from tests.integration.tiny_checkpoint import save_tiny_llama, write_corpus

from sinkscope.cli.main import main

RUNS = {
    "evict": (["--seq-len", "24", "--window", "4", "--ks", "0,1,2", "--max-windows", "2"],
              ["eviction.parquet", "eviction_summary.parquet", "figures/eviction.png"]),
    "dense": (["--seq-len", "12", "--max-windows", "2", "--lambdas", "0.5,1"],
              ["dense_heads.parquet", "dense_layers.parquet", "dense_regimes.parquet", "figures/dense.png"]),
    "prevalence": (["--seq-len", "16", "--max-windows", "3"], ["prevalence.parquet", "figures/prevalence.png"]),
    "switch-assumptions": (["--seq-len", "16", "--max-windows", "3"],
                           ["switch_conditioned.parquet", "switch_offenders.parquet", "figures/switch_assumptions.png"]),
}  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt")


@pytest.mark.parametrize("command", list(RUNS))
def test_command_writes_its_outputs(command, tiny, tmp_path, capsys):
    model, corpus = tiny
    args, files = RUNS[command]
    out = tmp_path / "out"
    assert main([command, "--model", str(model), "--corpus", str(corpus), *args, "--out", str(out)]) == 0
    for name in [*files, "report.html"]:
        assert (out / name).is_file(), name
    assert pd.read_parquet(out / files[0]).shape[0] > 0
    assert "sinkscope " in (out / "report.html").read_text()


def test_cost_regimes_command(tmp_path):
    out = tmp_path / "cr"
    assert main(["cost-regimes", "--vs", "3,4", "--ks", "1", "--ts", "4", "--ds", "6", "--ranks", "2,6", "--seeds",
                 "1", "--out", str(out)]) == 0  # fmt: skip
    assert pd.read_parquet(out / "regimes_vocabulary.parquet").shape[0] == 4
    assert (out / "figures" / "cost_regimes.png").is_file()


@pytest.mark.parametrize("argv, message", [
    (["evict", "--window", "70", "--seq-len", "64"], "--window 70 leaves no evicted query"),
    (["evict", "--ks", "-1"], "--ks -1 must be one or more sizes"),
    (["dense", "--lambdas", "0,1"], "each λ must be in (0, 1]"),
    (["prevalence", "--epsilon", "1.5"], "--epsilon 1.5 must be between 0 and 1"),
    (["switch-assumptions", "--tau", "0"], "--tau 0.0 must be between 0 and 1"),
])  # fmt: skip
def test_bad_arguments_are_one_line(argv, message, tmp_path, capsys):
    assert main([*argv, "--model", "no-such-model-dir", "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_attribute_result_is_marked_and_replaced_by_overwrite(tiny, tmp_path):
    """`attribute` writes one staged, marked result: a rerun with --overwrite replaces it (an unmarked folder is
    refused by the ownership rule, docs/reliability.md)."""
    model, corpus = tiny
    argv = ["attribute", "--model", str(model), "--corpus", str(corpus), "--seq-len", "16", "--max-windows", "2",
            "--out", str(tmp_path / "a")]  # fmt: skip
    assert main(argv) == 0
    assert (tmp_path / "a" / ".sinkscope-result.json").is_file()
    assert main([*argv, "--overwrite"]) == 0
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == [
        ".sinkscope-result.json", "attribution.csv", "attribution.json", "attribution.parquet", "figures"]
