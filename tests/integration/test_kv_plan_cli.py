"""`sinkscope kv-plan` end to end on a tiny random Llama directory (2 layers, 4 heads on 2 KV heads): the plan folder
and the evaluation, a plan from an analyze run, and the refusals of another model's run or plan folder — one line,
before the work, nothing written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from tests.integration.tiny_checkpoint import save_tiny_llama, write_corpus

from sinkscope.cli.main import main

WINDOWS = ["--seq-len", "40", "--max-windows", "2", "--batch-size", "2", "--threads", "1"]
PLAN = ["--sink-size", "2", "--recent-size", "8", "--share", "0.5"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt")


def test_plan_and_evaluation_files(tiny, tmp_path, capsys):
    model, corpus = tiny
    out = tmp_path / "plan"
    argv = ["kv-plan", "--model", str(model), "--corpus", str(corpus), *WINDOWS, *PLAN, "--evaluate", "--shares",
            "0.5", "--draws", "2", "--span", "8", "--out", str(out)]  # fmt: skip
    assert main(argv) == 0
    values = np.loadtxt(out / "full_attention_heads.tsv", delimiter="\t")
    assert values.shape == (2, 2) and (values > 0.5).sum() == 2  # 2 layers × 2 KV heads, half of them full
    summary = pd.read_parquet(out / "kv_plan_eval_summary.parquet")
    assert set(summary["policy"]) == {"streaming", "sinkscope", "far-mass", "random", "oracle", "full"}
    assert (out / "figures" / "kv_plan_eval.png").is_file()
    heads = pd.read_parquet(out / "kv_plan_heads.parquet")
    for row in heads.itertuples():  # each head's row names the entry of the file it explains
        assert row.value == pytest.approx(values[row.layer, row.kv_head], abs=1e-6) and row.full == (row.value > 0.5)

    run = tmp_path / "run"
    assert main(["analyze", "--model", str(model), "--corpus", str(corpus), *WINDOWS, "--out", str(run)]) == 0
    again = tmp_path / "again"
    assert main(["kv-plan", "--model", str(model), "--corpus", str(corpus), *WINDOWS, *PLAN, "--run", str(run),
                 "--far-mass-on", "probes", "--span", "8", "--out", str(again)]) == 0  # fmt: skip
    # the `measures` rule reads the run's statistics: the same plan; far mass now comes from the probe windows
    np.testing.assert_array_equal(np.loadtxt(again / "full_attention_heads.tsv", delimiter="\t") > 0.5, values > 0.5)
    probed = pd.read_parquet(again / "kv_plan_heads.parquet")
    assert json.loads((again / "config.json").read_text())["sinkscope"]["far_mass_on"] == "probes"
    assert np.abs(probed["far_mass"].to_numpy() - heads["far_mass"].to_numpy()).max() > 1e-5  # random weights: small


def test_another_models_plan_is_one_line_before_the_work(tiny, tmp_path, capsys):
    model, corpus = tiny
    other = tmp_path / "other"
    other.mkdir()
    np.savetxt(other / "full_attention_heads.tsv", np.ones((3, 2)), delimiter="\t")
    (other / "config.json").write_text('{"sink_size": 2, "recent_size": 8}')
    out = tmp_path / "out"
    argv = ["kv-plan", "--model", str(model), "--corpus", str(corpus), *WINDOWS, *PLAN, "--evaluate", "--plan",
            str(other), "--out", str(out)]  # fmt: skip
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("sinkscope kv-plan:")]  # besides the load's bar
    assert len(lines) == 1 and "is 3 layers × 2 KV heads but the model has 2 × 2" in lines[0], err
    assert "Traceback" not in err
    assert not out.exists()
