"""`sinkscope reproduce --quick` on the embedded SmolLM2: every claim judged (or said to be not measurable, with the
reason) in minutes, and a rerun reuses it all."""

from __future__ import annotations

import json

import pytest

from integration.waiting import cpu_seconds
from sinkscope.cli.main import main
from sinkscope.models.load import embedded_installed
from sinkscope.reproduction.claim_texts import CLAIMS
from sinkscope.reproduction.verdicts import NOT_MEASURABLE

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not embedded_installed("smollm2-135m"), reason="embedded smollm2-135m not installed"),
]


def test_quick_reproduction_on_smollm2(tmp_path, capsys):
    out = tmp_path / "repro"
    argv = ["reproduce", "--models", "smollm2-135m", "--corpora", "builtin:prose", "--quick", "--out", str(out)]
    started = cpu_seconds()  # the work, which other processes on the machine do not lengthen (wall clock they do)
    assert main(argv) == 0
    assert cpu_seconds() - started < 600  # the bound for --quick on one model
    records = json.loads((out / "verdicts.json").read_text())
    assert {r["claim"] for r in records} == set(CLAIMS)
    by_claim = {r["claim"]: r for r in records}
    # --quick says when it cannot decide, and why: every "not measurable here" carries its reason.
    assert all(r["reason"] for r in records if r["verdict"] == NOT_MEASURABLE)
    # 4 windows × 63 context tokens are fewer than SmolLM2's width (576): the certificate test has no power.
    assert by_claim["representability"]["verdict"] == NOT_MEASURABLE and "width" in by_claim["representability"]["reason"]
    assert by_claim["mlp_like"]["verdict"] == "descriptive"
    for claim in ("geometry", "switch", "switch_routes", "oversmoothing"):  # 8 windows: intervals and sensitivity
        assert by_claim[claim]["interval"]["n"] >= 8 and by_claim[claim]["sensitivity"], claim
    assert by_claim["oversmoothing"]["evidence"]["n_heads"] == 5 * 9  # every 6th of 30 layers, 9 heads each
    # Below the stated minimum of units there is no verdict: 2 anchor windows, 2 ablation windows and 2 draws.
    for claim, what in (("gu_sink_rate", "windows"), ("sink_ablation", "windows"), ("dormant_heads", "windows")):
        assert by_claim[claim]["verdict"] == NOT_MEASURABLE and by_claim[claim]["reason"].startswith(f"too few {what}")
    assert "gu_sink_rate" in capsys.readouterr().out

    started = cpu_seconds()
    assert main(argv) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["section_seconds"]["smollm2-135m"] == {} and len(summary["reused"]["smollm2-135m"]) == 18  # with kv-plan/
    assert json.loads((out / "verdicts.json").read_text()) == records
    assert cpu_seconds() - started < 120
