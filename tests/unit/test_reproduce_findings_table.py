"""docs/reproduction.md's findings table equals what `benchmarks/findings_table.py` renders from the stored outputs
of the default `sinkscope reproduce` on both embedded models (`tests/data/reproduce-default/*/verdicts.json`): a
regenerated stored run, or a hand edit of the table, fails here until the table is rendered again."""

from __future__ import annotations

import json
from importlib.machinery import SourceFileLoader
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = SourceFileLoader("findings_table", str(ROOT / "benchmarks" / "findings_table.py")).load_module()
STORED = [ROOT / "tests" / "data" / "reproduce-default" / model / "verdicts.json"
          for model in ("smollm2-135m", "gemma3-270m")]


def test_the_docs_table_is_the_stored_outputs():
    runs = [json.loads(path.read_text()) for path in STORED]
    page = (ROOT / "docs" / "reproduction.md").read_text()
    assert TABLE.block(page) == TABLE.findings_table(runs)


def test_each_row_reads_the_record_itself():
    """Independently of the renderer: every stored record's verdict word and rounded estimate and interval are in
    the docs row of its claim and corpus."""
    rows = {}
    lines = TABLE.block((ROOT / "docs" / "reproduction.md").read_text()).splitlines()
    assert [part.strip() for part in lines[0].split("|")][3:5] == ["smollm2-135m", "gemma3-270m"]
    for line in lines[2:]:
        _, claim, corpus, *cells = (part.strip() for part in line.split("|"))
        rows[(claim.strip("`"), corpus)] = cells
    for column, path in enumerate(STORED):
        for record in json.loads(path.read_text()):
            check_cell(rows[(record["claim"], record.get("corpus") or "–")][column], record)


def check_cell(text: str, record: dict) -> None:
    """The cell holds the record's word, then its interval's estimate and ends to 3 significant digits."""
    assert text.split(";")[0] == record["verdict"], (record["claim"], text)
    interval = record.get("interval") or {}
    if interval.get("estimate") is not None:
        assert f"{interval['estimate']:.3g} [{interval['low']:.3g}, {interval['high']:.3g}]" in text


def test_the_renderer_names_a_page_without_markers():
    try:
        TABLE.replace_block("no markers here", "| t |")
    except SystemExit as error:
        assert "no findings markers" in str(error)
    else:
        raise AssertionError("a page without markers was accepted")
