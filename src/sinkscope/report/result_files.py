"""A result directory written whole: its tables (parquet), its metadata (JSON), its figures (PNG) and its page
(`report.html`, `results_page.write_results_page`), staged beside the target and renamed into place with
sinkscope's ownership marker (`staging.staged_directory`). The saves of ablate, evict, prevalence, dense,
switch-assumptions and cost-regimes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from sinkscope.report.results_page import write_results_page
from sinkscope.staging import check_replaceable, staged_directory


def save_result_files(
    directory: str | Path,
    *,
    overwrite: bool,
    tables: Mapping[str, pd.DataFrame],
    meta_name: str,
    meta: Mapping,
    figures: Mapping[str, tuple[str, bytes]],
    title: str,
    intro: str,
    settings: Mapping[str, object],
    shown: Sequence[tuple[str, pd.DataFrame]],
) -> Path:
    """Refuse `directory` unless it is replaceable (`staging.check_replaceable(directory, overwrite)`, before
    anything is written), then write, staged: each of `tables` (file name → frame) as parquet without the index,
    `meta` as `meta_name` (JSON, indent 2, values JSON cannot hold as their `str`), each of `figures` (file name →
    (caption, PNG bytes)) under `figures/`, and `report.html`: `title`, `intro`, `settings`, the figures with their
    captions and the `shown` tables (caption, frame). Returns `directory` as a Path."""
    directory = Path(directory)
    check_replaceable(directory, overwrite)
    with staged_directory(directory) as staging:
        for name, frame in tables.items():
            frame.to_parquet(staging / name, index=False)
        (staging / meta_name).write_text(json.dumps(meta, indent=2, default=str))
        (staging / "figures").mkdir()
        for name, (_, png) in figures.items():
            (staging / "figures" / name).write_bytes(png)
        write_results_page(staging / "report.html", title, intro, settings, shown, list(figures.values()))
    return directory
