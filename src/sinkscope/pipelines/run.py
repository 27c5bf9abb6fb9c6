"""A run directory (SPEC §8): run.json, heads/layers/positions.parquet, figures/*.png and report.html.

Written to a temporary sibling directory and renamed into place, so a crash never leaves a half run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.locking import is_held
from sinkscope.staging import check_replaceable, staged_directory

TABLES = ("heads", "layers", "positions")


@dataclass
class Run:
    """Results of one analysis: `meta` (config, model and corpus identity, versions, timings, summary) and
    the tables `heads` (one row per layer, head), `layers` (one row per layer), `positions` (layer, key)."""

    meta: dict
    heads: pd.DataFrame
    layers: pd.DataFrame
    positions: pd.DataFrame
    extra: dict[str, pd.DataFrame] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.meta['model'].get('name', '?')} · {self.meta['corpus'].get('source', '?')}"

    def save(self, directory: str | Path, *, overwrite: bool = False, report: bool = True) -> Path:
        """Write the run directory atomically; `report` also draws the figures and report.html."""
        directory = Path(directory)
        if not is_held(directory):  # a claimed --out was checked at the start; if its place is taken now, the
            ensure_writable(directory, overwrite)  # staged save below keeps the result beside it instead
        with staged_directory(directory, kind="run") as staging:
            (staging / "run.json").write_text(json.dumps(self.meta, indent=2, default=str))
            for name in TABLES:
                getattr(self, name).to_parquet(staging / f"{name}.parquet", index=False)
            for name, table in self.extra.items():
                table.to_parquet(staging / f"{name}.parquet", index=False)
            if report:
                from sinkscope.report.html import write_report

                write_report([self], staging / "report.html", figures_dir=staging / "figures")
        return directory

    @classmethod
    def load(cls, directory: str | Path) -> Run:
        """Read a run directory written by `save`."""
        directory = Path(directory)
        if not (directory / "run.json").is_file():
            raise SinkscopeError(f"{directory} is not a sinkscope run directory (no run.json)")
        try:
            meta = json.loads((directory / "run.json").read_text(encoding="utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise SinkscopeError(f"{directory / 'run.json'} is corrupt ({err}); rerun `sinkscope analyze`") from None
        if not isinstance(meta, dict) or not all(isinstance(meta.get(k), dict) for k in ("model", "corpus", "summary")):
            raise SinkscopeError(
                f"{directory / 'run.json'} lacks the model, corpus or summary of an analyze run; rerun `sinkscope analyze`"
            )
        tables = {name: _read_table(directory / f"{name}.parquet") for name in TABLES}
        problem = damage(meta, tables)
        if problem:
            raise SinkscopeError(
                f"{directory} is damaged or was written by an older sinkscope ({problem}); rerun `sinkscope analyze`"
            )
        extra = {
            path.stem: _read_table(path) for path in sorted(directory.glob("*.parquet")) if path.stem not in TABLES
        }
        return cls(meta=meta, extra=extra, **tables)


# What every page and comparison reads of a run: summary keys, and numeric columns of each table with its key.
SUMMARY_KEYS = ("mean_sink_score", "mean_diag_score", "sink_rate", "epsilon")
COLUMNS = {"heads": ("layer", "head", "sink_score", "diag_score"), "layers": ("layer", "sink_rate"),
           "positions": ("layer", "position")}  # fmt: skip
LABELS = {"heads": ("head_class",)}  # text columns the pages colour and count by
KEYS = {"heads": ["layer", "head"], "layers": ["layer"], "positions": ["layer", "position"]}


def damage(meta: dict, tables: dict[str, pd.DataFrame]) -> str | None:
    """The first thing wrong with a loaded run that a page would trip over (a missing summary key, a missing or
    non-numeric column, an empty table, a duplicated row), or None."""
    missing = [key for key in SUMMARY_KEYS if key not in meta["summary"]]
    if missing:
        return f"run.json's summary lacks {', '.join(missing)}"
    for name, columns in COLUMNS.items():
        table = tables[name]
        absent = [c for c in (*columns, *LABELS.get(name, ())) if c not in table.columns]
        if absent:
            return f"{name}.parquet lacks the column{'s' if len(absent) > 1 else ''} {', '.join(absent)}"
        mistyped = [c for c in columns if not pd.api.types.is_numeric_dtype(table[c])]
        if mistyped:
            return f"{name}.parquet column {mistyped[0]} is {table[mistyped[0]].dtype}, not numbers"
        if name != "positions" and table.empty:
            return f"{name}.parquet has no rows"
        if table.duplicated(KEYS[name]).any():
            return f"{name}.parquet repeats a row of the same {' and '.join(KEYS[name])}"
    return None


def _read_table(path: Path) -> pd.DataFrame:
    """One table of a run directory, or one clear line when it is missing or damaged."""
    if not path.is_file():
        raise SinkscopeError(f"{path} is missing: the run directory is incomplete; rerun `sinkscope analyze`")
    try:
        return pd.read_parquet(path)
    except Exception:  # pyarrow raises ArrowInvalid, OSError and others for a damaged file
        raise SinkscopeError(
            f"{path} is damaged or truncated (not a readable parquet table); rerun `sinkscope analyze`"
        ) from None


def ensure_writable(directory: Path, overwrite: bool) -> None:
    """Refuse to replace an existing non-empty directory unless asked, and never one that is not a sinkscope
    result (checked before any work starts; see `staging.check_replaceable`)."""
    check_replaceable(directory, overwrite)
