"""docs/reproduction.md's findings table equals what `benchmarks/findings_table.py` renders from the stored reproduce
output (`tests/data/reproduce-gemma3-270m/published/verdicts.json`): a regenerated stored run, or a hand edit of the
table, fails here until the table is rendered again."""

from __future__ import annotations

import json
from importlib.machinery import SourceFileLoader
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = SourceFileLoader("findings_table", str(ROOT / "benchmarks" / "findings_table.py")).load_module()
STORED = ROOT / "tests" / "data" / "reproduce-gemma3-270m" / "published" / "verdicts.json"


def test_the_docs_table_is_the_stored_outputs():
    records = json.loads(STORED.read_text())
    page = (ROOT / "docs" / "reproduction.md").read_text()
    assert TABLE.block(page) == TABLE.findings_table([records])


def test_each_row_reads_the_record_itself():
    """Independently of the renderer: every stored record's verdict word and rounded estimate and interval are in
    the docs row of its claim and corpus."""
    rows = {}
    for line in TABLE.block((ROOT / "docs" / "reproduction.md").read_text()).splitlines()[2:]:
        _, claim, corpus, *cells = (part.strip() for part in line.split("|"))
        rows[(claim.strip("`"), corpus)] = cells[0]
    for record in json.loads(STORED.read_text()):
        text = rows[(record["claim"], record.get("corpus") or "–")]
        assert text.split(";")[0] == record["verdict"]
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
