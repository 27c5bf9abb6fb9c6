"""`sinkscope reproduce` end to end on a tiny random Llama directory: outputs, verdict records, and reuse."""

import json
from html import unescape

import pandas as pd
import pytest

from sinkscope.reproduction.claim_texts import CLAIMS
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.experiment_sections import boundary_lab
from sinkscope.reproduction.files import KEY_FILE
from sinkscope.reproduction.run import reproduce
from sinkscope.reproduction.verdicts import VERDICTS
from sinkscope.synthetic import boundary_runs

from .tiny_checkpoint import save_tiny_llama


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return str(save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama"))


def section_stamps(out):
    return {path.parent.name: path.stat().st_mtime_ns for path in out.rglob(KEY_FILE)}


def test_reproduce_writes_every_claim_and_reuses_finished_sections(tiny_model, tmp_path, monkeypatch):
    # The regime map trains models of its own (the slow test runs it); here it is switched off. The boundary lab
    # (12 small models) is read back from a finished section written before, with constructed runs.
    config = ReproduceConfig.preset(True, models=(tiny_model,), corpora=("builtin:prose",), seq_len=16,
                                    geometry_cap=16, regimes=False)
    out = tmp_path / "repro"
    lab = pd.DataFrame([{"setting": f"s{side}{i}", "predicted": side, "seed": seed, "pattern": side, "bos_mass": 0.9,
                         "diag_mass": 0.1, "steps": 10} for side in ("diagonal", "sink") for i in range(2)
                        for seed in range(3)])  # fmt: skip
    monkeypatch.setattr(boundary_runs, "run_boundary", lambda out_dir, progress=None, workers=1: lab)
    boundary_lab(ReproduceConfig(), out)
    first = reproduce(config, out)
    records = json.loads((out / "verdicts.json").read_text())
    assert {r["claim"] for r in records} == set(CLAIMS)
    fields = {"claim", "model", "verdict", "evidence", "thresholds", "reason", "paper_claim", "test", "control",
              "interval", "sensitivity"}
    for record in records:
        assert record["verdict"] in VERDICTS and set(record) >= fields
        assert record["paper_claim"] == CLAIMS[record["claim"]].paper_claim
        # A judged claim with an interval also has its threshold sensitivity (half and double each threshold; a
        # setting the measurement fixed is recorded once, scale None, with the reason).
        if record["interval"] is not None and record["verdict"] not in ("descriptive", "not measurable here"):
            assert {r["scale"] for r in record["sensitivity"] if r["threshold"] in record["thresholds"]} == {0.5, 2.0}
            assert all(r["not_varied"] for r in record["sensitivity"] if r["scale"] is None)
    assert next(r for r in records if r["claim"] == "mlp_like")["verdict"] == "descriptive"
    assert next(r for r in records if r["claim"] == "cost_boundary_trained")["verdict"] == "supported"
    html = (out / "report.html").read_text()
    # a figure per section, and one per issue-36 claim
    assert html.count("data:image/png;base64") == 6 + 6 and all(f'id="{claim}"' in html for claim in CLAIMS)
    assert sorted(p.stem for p in (out / "figures").glob("*_*.png")) == [
        "cost_boundary", "cost_boundary_trained", "dense_causal", "sink_in_use", "switch_assumptions"]
    assert (out / "figures" / "prevalence.png").is_file()
    for claim in CLAIMS.values():  # every claim links to the table it was computed from, and quotes the paper
        written = claim.table != "regime_cells"  # the regime map is switched off here
        assert (f'href="tables/{claim.table}.csv"' in html) == written and claim.paper_claim in unescape(html)
    assert '"estimate"' not in html and "{'" not in html  # readable text, no raw JSON or dict reprs
    assert "## 6. Anchors from earlier work" in (out / "report.md").read_text()
    for name in ("geometry", "switch", "switch_routes", "value_drain", "certificates", "heads", "weights", "ablation", "cost_layers",
                 "anchors", "cost_theory"):
        assert (out / "tables" / f"{name}.csv").stat().st_size > 0
    assert first["reused"][tiny_model] == []
    stamps = section_stamps(out)
    # 3 analyses and their 3 per-window evidence passes, the switch pass, certificates, ablate (zero, bos, sink
    # queries), cost-layers, weights, theory; issue 36's evict, dense, prevalence, switch-assumptions and the theory's
    # cost regimes and the boundary lab; the KV plan of the measures
    assert len(stamps) == 21

    second = reproduce(config, out)
    assert len(second["reused"][tiny_model]) == 18 and second["section_seconds"][tiny_model] == {}
    assert section_stamps(out) == stamps  # nothing recomputed
    assert json.loads((out / "verdicts.json").read_text()) == records

    third = reproduce(ReproduceConfig.preset(True, **{**_overrides(config), "ablation_fraction": 0.25}), out)
    assert list(third["section_seconds"][tiny_model]) == ["ablate 0.25 of heads (2 windows)",
                                                          "ablate (bos) 0.25 of heads (2 windows)",
                                                          "ablate 0.25 of heads on their sink queries (2 windows)"]


def _overrides(config):
    return dict(models=config.models, corpora=config.corpora, seq_len=config.seq_len, geometry_cap=config.geometry_cap,
                regimes=False)
