"""The massive-activations section (report/massive_section.py): the table shows the run's numbers, the note names
the layer with the largest ratio and how many layers BOS leads, the report and the comparison page draw it, and
a run without the columns (written before the statistic) has no section."""

from __future__ import annotations

from test_report_page import _run

from sinkscope.report.html import render_report
from sinkscope.report.massive_section import massive_comparison, massive_section


def _with_massive(directory: str):
    run = _run(directory)
    run.layers = run.layers.assign(
        massive_max=[4.0, 900.0, 1200.0], massive_position=[3, 0, 0], massive_channel=[7, 5, 5],
        massive_median=[1.0, 0.5, 2.0], massive_ratio=[4.0, 1800.0, 600.0], massive_bos_max=[2.0, 900.0, 1200.0],
        massive_rest_max=[4.0, 3.0, 5.0], massive_on_bos=[False, True, True],
    )  # fmt: skip
    return run


def test_section_cells_and_note_are_the_runs_numbers():
    section = massive_section(_with_massive("runs/a").layers)
    assert section["rows"][1] == ["1", "900", "0", "5", "0.5", "1800", "900", "3", "yes"]
    assert section["rows"][0][-1] == "no"
    assert "in 2 of 3 layers" in section["note"] and "1800 (layer 1, channel 5, position 0)" in section["note"]
    assert massive_section(_run("runs/old").layers) is None


def test_report_and_comparison_draw_the_section():
    both = render_report([_with_massive("runs/a"), _with_massive("runs/b")])  # each run's report is folded in it
    assert 'id="massive-activations"' in both and both.count("Massive activations: the largest residual") == 2
    assert "max / median" in both  # the per-layer table's header
    assert massive_comparison([_run("runs/a"), _run("runs/b")], ["a", "b"]) is None  # old runs: no figure
