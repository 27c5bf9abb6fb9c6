"""`benchmarks/gpu.py --quick` end to end on the CPU with a 2-layer model (issue 33, item 5): every method and
precision runs at every length, the table has tokens/s, the ratio to the floor and the path of every layer."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from sinkscope.capture import fused_cpu

GPU_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu.py"


@pytest.fixture(scope="module")
def gpu_benchmark():
    spec = importlib.util.spec_from_file_location("gpu_benchmark", GPU_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quick_run_on_the_cpu_reports_every_method_and_layer(gpu_benchmark, tmp_path, capsys):
    out = tmp_path / "gpu.json"
    args = ["--quick", "--device", "cpu", "--tiny", "--seq-lens", "8,16", "--tokens", "32", "--out", str(out)]
    assert gpu_benchmark.main(args) == 0
    report = json.loads(out.read_text())
    precisions, note = gpu_benchmark.precisions_here(list(gpu_benchmark.PRECISIONS))
    route = "compiled" if fused_cpu.available() else "rows"
    assert [r["seq_len"] for r in report["results"]] == [8, 16] and report["skipped"] == []
    assert report["note"] == note
    for result in report["results"]:
        assert result["dtype"] == "bfloat16" and result["windows"] * result["seq_len"] == 32
        for name in ["floor", *(f"sinkscope {p}" for p in precisions), "eager"]:
            assert result[name]["tokens_per_second"] > 0 and result[name]["ratio"] > 0, name
        for p in precisions:  # the CPU's route for plain causal layers: the compiled kernel where it builds
            assert result[f"sinkscope {p}"]["paths"] == f"{route} 0–1"
    printed = capsys.readouterr().out
    assert "| bfloat16 | 16 | 2 | sinkscope exact |" in printed and f"{route} 0–1" in printed


def test_layer_paths_are_runs_over_the_first_forward_pass(gpu_benchmark):
    record = ["flex", "flex", "blocks", "flex", "flex", "flex"]  # a second forward pass's calls follow the first's
    assert gpu_benchmark.layer_paths(record, 4) == "flex 0–1, blocks 2, flex 3"
    assert gpu_benchmark.layer_paths(["rows"] * 3, 3) == "rows 0–2"


def test_cells_past_the_budget_are_skipped_and_named(gpu_benchmark, tmp_path):
    out = tmp_path / "gpu.json"
    args = ["--device", "cpu", "--tiny", "--seq-lens", "8", "--tokens", "16", "--repeats", "1", "--dtypes",
            "float32", "--budget-seconds", "0", "--out", str(out)]  # fmt: skip
    assert gpu_benchmark.main(args) == 0
    report = json.loads(out.read_text())
    assert report["skipped"] == ["float32 T=8"]
