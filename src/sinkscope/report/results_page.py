"""The page of a result directory that is not an analysis run: `sinkscope ablate` (loss change when heads are
switched off) and `sinkscope cost` (sink vs diagonal representation costs). One template,
`templates/results.html.j2`, in the analyze report's house style: the settings, the figures inlined, then the
tables, so every number on the page is a cell of a file written beside it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from sinkscope.report.glossary import RESULTS_TERMS, definitions, headers
from sinkscope.report.page import cell_text, png_figure, write_page


def shown_table(frame: pd.DataFrame, digits: int = 4) -> dict[str, object]:
    """A table for the template: header, cell texts (floats to `digits` significant digits, missing values as an
    en dash) and one CSS class per column (`num` right-aligns numbers)."""
    def text(value) -> str:
        if value is None or value is pd.NA or (isinstance(value, float) and value != value):
            return cell_text(None)
        if isinstance(value, float):
            return f"{value:.{digits}g}"
        return cell_text(value)

    numeric = [pd.api.types.is_numeric_dtype(frame[c]) and not pd.api.types.is_bool_dtype(frame[c]) for c in frame]
    return {
        "header": header_cells([str(c) for c in frame.columns]),
        "rows": [[text(v) for v in row] for row in frame.itertuples(index=False)],
        "classes": ["num" if n else None for n in numeric],
    }


def header_cells(names: list[str]) -> list:
    """Each column name with its definition (`glossary.RESULTS_TERMS`), or as plain text when it has none: a column
    added to ablation.parquet or cost.parquet still gets its page (the browser tests ask for every definition)."""
    return [headers([name], terms=RESULTS_TERMS)[0] if name in RESULTS_TERMS else name for name in names]


def write_results_page(
    path: str | Path,
    title: str,
    intro: str,
    settings: Mapping[str, object],
    tables: Sequence[tuple[str, pd.DataFrame]],
    figures: Sequence[tuple[str, bytes]],
) -> Path:
    """Write `path` (`results.html.j2`): `title` (also the `<title>`), an `intro` sentence, a two-column settings
    table, the PNG `figures` (caption, bytes) and the `tables` (caption, frame) in that order."""
    shown = [{"caption": caption, **shown_table(frame)} for caption, frame in tables]
    settings_header = header_cells(["setting", "value"])
    defined = [[cell for cell in table["header"] if isinstance(cell, dict)] for table in shown]
    return write_page(
        path, "results.html.j2",
        title=title, intro=intro,
        settings_header=settings_header,
        settings=[[str(k), cell_text(v)] for k, v in settings.items()],
        figures=[png_figure(png, caption) for caption, png in figures],
        tables=shown,
        terms=definitions(settings_header, *defined),
    )  # fmt: skip
