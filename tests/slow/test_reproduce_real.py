"""`sinkscope reproduce --quick` on the embedded SmolLM2: every claim judged in minutes, and a rerun reuses it all."""

from __future__ import annotations

import json
import time

import pytest

from sinkscope.cli.main import main
from sinkscope.models.load import embedded_installed
from sinkscope.reproduction.claims import CLAIMS, NOT_MEASURABLE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not embedded_installed("smollm2-135m"), reason="embedded smollm2-135m not installed"),
]


def test_quick_reproduction_on_smollm2(tmp_path, capsys):
    out = tmp_path / "repro"
    argv = ["reproduce", "--models", "smollm2-135m", "--corpora", "builtin:prose", "--quick", "--out", str(out)]
    started = time.perf_counter()
    assert main(argv) == 0
    assert time.perf_counter() - started < 600  # the bound for --quick on one model
    records = json.loads((out / "verdicts.json").read_text())
    assert {r["claim"] for r in records} == set(CLAIMS)
    measured = {r["claim"]: r for r in records if r["verdict"] != NOT_MEASURABLE}
    # Everything but the bigram-backcopy regimes is measurable on a real model.
    assert set(CLAIMS) - set(measured) <= {"bigram_backcopy_regimes"}
    assert measured["oversmoothing"]["evidence"]["n_heads"] == 5 * 9  # every 6th of 30 layers, 9 heads each
    assert 0 <= measured["gu_sink_rate"]["evidence"]["sink_rate_natural"] <= 1
    assert "gu_sink_rate" in capsys.readouterr().out

    started = time.perf_counter()
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["section_seconds"]["smollm2-135m"] == {} and len(summary["reused"]["smollm2-135m"]) == 11
    assert json.loads((out / "verdicts.json").read_text()) == records
    assert time.perf_counter() - started < 120
