"""`report.result_files.save_result_files`: every file read back with pandas/json/bytes, the page holds what it was
given, and an existing result is replaced only with `overwrite` (the refusal comes before anything is written)."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pandas as pd
import pytest

from sinkscope.errors import SinkscopeError
from sinkscope.report.result_files import save_result_files


def _save(out: Path, frame: pd.DataFrame, overwrite: bool = False) -> Path:
    return save_result_files(
        out, overwrite=overwrite, tables={"t.parquet": frame}, meta_name="m.json",
        meta={"where": Path("/x/y"), "n": 2}, figures={"f.png": ("Caption of f", b"\x89PNG-bytes")},
        title="sinkscope test: page", intro="An intro.", settings={"model": "tiny"},
        shown=[("The table", frame)],
    )  # fmt: skip


def test_files_page_and_overwrite(tmp_path):
    out, frame = tmp_path / "out", pd.DataFrame({"a": [1, 2], "b": [0.5, 1.5]}, index=[5, 7])  # index not saved
    assert _save(out, frame) == out
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*")) == [
        ".sinkscope-result.json", "figures", "figures/f.png", "m.json", "report.html", "t.parquet"]
    pd.testing.assert_frame_equal(pd.read_parquet(out / "t.parquet"), frame.reset_index(drop=True))
    assert json.loads((out / "m.json").read_text()) == {"where": "/x/y", "n": 2}
    assert (out / "figures" / "f.png").read_bytes() == b"\x89PNG-bytes"
    page = (out / "report.html").read_text()
    assert all(text in page for text in ("sinkscope test: page", "An intro.", "Caption of f", "The table", "tiny"))
    assert base64.b64encode(b"\x89PNG-bytes").decode() in page
    with pytest.raises(SinkscopeError, match="already exists"):
        _save(out, frame.iloc[:1])
    assert len(pd.read_parquet(out / "t.parquet")) == 2
    _save(out, frame.iloc[:1], overwrite=True)
    assert len(pd.read_parquet(out / "t.parquet")) == 1
