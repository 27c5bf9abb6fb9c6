"""The CLI end to end: a run directory from `analyze`, `report` over two runs, and one clear line for bad input."""

import json
import subprocess
import sys

import pytest

from integration.waiting import HANG_GUARD

pytestmark = pytest.mark.slow


def sinkscope(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "sinkscope.cli.main", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=HANG_GUARD)


def test_analyze_and_report(tmp_path):
    for corpus in ("builtin:prose", "builtin:repeat"):
        result = sinkscope("analyze", "--model", "smollm2-135m", "--corpus", corpus, "--seq-len", "16",
                           "--max-windows", "4", "--out", str(tmp_path / corpus[8:]), "--quiet")
        assert result.returncode == 0, result.stderr
        assert "sink rate" in result.stdout
    run = tmp_path / "prose"
    for name in ("run.json", "heads.parquet", "layers.parquet", "positions.parquet", "report.html"):
        assert (run / name).is_file(), name
    meta = json.loads((run / "run.json").read_text())
    assert meta["model"]["sha256"] and meta["corpus"]["windows"] == 4 and meta["versions"]["torch"]
    result = sinkscope("report", str(run), str(tmp_path / "repeat"), "--out", str(tmp_path / "cmp.html"))
    assert result.returncode == 0, result.stderr
    assert "sinkscope comparison: " in (tmp_path / "cmp.html").read_text()


def bad_inputs(tmp_path):
    corrupt = tmp_path / "broken.gguf"
    corrupt.write_bytes(b"GGUF" + b"\x00" * 64)
    (tmp_path / "notamodel").mkdir()
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    base = ["--corpus", "builtin:prose", "--seq-len", "16", "--max-windows", "2"]
    return {
        "unknown model": (["--model", "no-such-model", *base], "unknown model"),
        "directory without a model": (["--model", str(tmp_path / "notamodel"), *base], "no config.json"),
        "corrupt gguf": (["--model", str(corrupt), *base], "could not read GGUF"),
        "missing corpus": (["--model", "smollm2-135m", "--corpus", str(tmp_path / "nope.txt"), "--seq-len", "16"],
                           "not found"),
        "empty corpus": (["--model", "smollm2-135m", "--corpus", str(empty), "--seq-len", "16"], "gave 0 tokens"),
        "seq-len 1": (["--model", "smollm2-135m", "--corpus", "builtin:prose", "--seq-len", "1"], "too short"),
        "seq-len above context": (["--model", "smollm2-135m", "--corpus", "builtin:prose", "--seq-len", "100000"],
                                  "exceeds the model's context"),
    }


def test_bad_inputs_give_one_clear_line_and_no_run_directory(tmp_path):
    for case, (args, message) in bad_inputs(tmp_path).items():
        out = tmp_path / f"out-{case.replace(' ', '-')}"
        result = sinkscope("analyze", *args, "--out", str(out), "--quiet")
        assert result.returncode == 2, f"{case}: {result.returncode} {result.stderr[-500:]}"
        errors = [line for line in result.stderr.splitlines() if line.startswith("sinkscope analyze: error:")]
        assert len(errors) == 1 and message in errors[0], f"{case}: {result.stderr[-500:]}"
        assert "Traceback" not in result.stderr, case
        assert not out.exists(), case
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
