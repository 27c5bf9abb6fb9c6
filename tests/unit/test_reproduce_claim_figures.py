"""Issue 36's claims show their own figure in the reproduction report (`reproduction.experiment_figures`, placed by
`reproduction.report`): each claim's block in report.html holds the PNG written to figures/CLAIM.png and report.md
links it; a claim whose data this reproduction lacks shows none; and the drawn numbers are the tables' (the
eviction bars are the mean loss changes of hand-made windows, the lab's dots the runs' masses)."""

import base64
import re

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from sinkscope.reproduction import figures, report
from sinkscope.reproduction.claim_texts import with_claim_text
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.experiment_claims import cost_boundary_trained_verdict
from sinkscope.reproduction.experiment_figures import claim_figures

CLAIMS = ("sink_in_use", "dense_causal", "prevalence", "switch_assumptions", "cost_boundary", "cost_boundary_trained")


def evidence():
    W = 8
    noise = np.random.default_rng(0).normal(0, 0.05, W)
    eviction = pd.DataFrame({"loss_full": 3.0 + noise, "loss_recent": 6.0 + noise, "loss_sink": 3.5 + noise,
                             "loss_control": 5.9 + noise, "window": range(W), "recent_window": 4})  # fmt: skip
    dense = pd.DataFrame({"layer": [0, 0, 0, 1, 1, 1], "head": [0, 1, -1, 0, 1, -1],
                          "dcos": [0.01, -0.01, 0.02, 0.03, 0.0, 0.04]})  # fmt: skip
    prevalence = pd.DataFrame({"layer": [0, 0, 1, -1, -1], "class": ["sink", "dense", "sink", "sink", "dense"],
                               "share": [0.5, 0.5, 1.0, 0.75, 0.25]})  # fmt: skip
    assumptions = pd.DataFrame({"layer": [0, 1], "holds_frac": [0.0, 1.0], "span_distance_median": [0.1, 0.8],
                                "span_distance_min": [0.05, 0.7], "switched_off": [0, 10],
                                "switched_off_sink": [0, 9]})  # fmt: skip
    return {"m": {"eviction": eviction, "dense": dense, "prevalence": prevalence, "switch_assumptions": assumptions}}


def extra():
    vocabulary = pd.DataFrame([{"V": V, "K": 1, "norm": "nuclear", "sink_closed": V / 2, "sink_exact": V / 2,
                                "diagonal_closed": V - 1.0, "diagonal_exact": V - 1.0} for V in (3, 4, 6)])  # fmt: skip
    geometry = pd.DataFrame([{"T": T, "d": 16, "rank": r, "seed": 0, "cheaper_exact": "sink", "sink_status": "optimal",
                              "p_h1": 1.0, "cheaper_predicted": "sink", "agree": True} for T in (4, 8) for r in (8, 16)])  # fmt: skip
    runs = pd.DataFrame([{"setting": f"V32_T{T}_d{d}", "predicted": side, "seed": s, "pattern": "sink",
                          "bos_mass": 0.6 + 0.1 * s, "diag_mass": 0.05 * s, "steps": 100}
                         for T, d, side in ((32, 8, "diagonal"), (8, 16, "sink")) for s in range(3)])  # fmt: skip
    return {"cost_regimes": geometry, "cost_regimes_vocabulary": vocabulary, "cost_boundary_trained": runs}


def blank(*_args, **_kwargs):
    return Figure(figsize=(1, 1))


@pytest.fixture
def written(tmp_path, monkeypatch):
    """write_reports on the constructed tables; the sections' own figures (other tables) drawn blank."""
    for name in ("geometry_figure", "smoothing_figure", "switch_figure", "ablation_figure", "cost_figure",
                 "weights_figure", "anchors_figure"):  # fmt: skip
        monkeypatch.setattr(figures, name, blank)
    verdict = cost_boundary_trained_verdict(extra()["cost_boundary_trained"])
    summary = {"config": ReproduceConfig(models=("m",)).to_dict(), "verdicts": [with_claim_text(verdict.to_dict())],
               "seconds": 1.0, "section_seconds": {"m": {}}, "reused": {"m": []}, "regimes": {}}  # fmt: skip
    theory = pd.DataFrame({"T": [2], "pattern": ["sink"], "norm": ["nuclear"], "closed_form": [1.0], "exact": [1.0]})
    report.write_reports(tmp_path, summary, evidence(), theory, {}, extra())
    return tmp_path


def block(text: str, start: str, ends: tuple[str, ...]) -> str:
    """The text from `start` to the first of `ends` after it."""
    begin = text.index(start)
    stops = [i for i in (text.find(end, begin + len(start)) for end in ends) if i >= 0]
    return text[begin : min(stops) if stops else len(text)]


def test_every_claim_of_issue_36_shows_its_figure_in_both_reports(written):
    html = (written / "report.html").read_text()
    markdown = (written / "report.md").read_text()
    for claim in CLAIMS:
        png = (written / "figures" / f"{claim}.png").read_bytes()
        assert png.startswith(b"\x89PNG")
        shown = re.findall(r'src="data:image/png;base64,([^"]+)"', block(html, f'<h3 id="{claim}">', ("<h3", "</section>")))
        assert [base64.b64decode(s) for s in shown] == [png], claim
        assert f"![{claim}](figures/{claim}.png)" in block(markdown, f"### `{claim}`", ("\n### ", "\n## "))
    # a claim without a figure of its own shows none in its block
    assert "<img" not in block(html, '<h3 id="switch">', ("<h3", "</section>"))


def test_a_claim_whose_data_is_missing_shows_no_figure():
    without = {k: v for k, v in extra().items() if k != "cost_boundary_trained"}
    assert set(claim_figures(evidence(), without)) == set(CLAIMS) - {"cost_boundary_trained"}
    assert set(claim_figures({}, {})) == set()


def test_the_figures_draw_the_tables_numbers():
    drawn = claim_figures(evidence(), extra())
    bars = [patch.get_height() for patch in drawn["sink_in_use"].axes[0].patches]
    assert bars == pytest.approx([3.0, 0.5, 2.9])  # recent, + BOS, + random token, minus the full cache
    lab = drawn["cost_boundary_trained"].axes[0]
    bos = [line for line in lab.lines if line.get_label() == "BOS mass" or line.get_marker() == "o"]
    assert np.concatenate([line.get_ydata() for line in bos]) == pytest.approx([0.6, 0.7, 0.8] * 2)
