"""Every table of a run (or sweep) directory as CSV or JSON, for people who do not use pandas or parquet.

The export folder is written like a run directory: staged beside `--out` and renamed into place, so a full disk
leaves no half export; it replaces only an earlier export (a folder holding nothing but `<table>.<format>` files
of this run's tables), never a folder of other files.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.ownership import MARKER, foreign_entries
from sinkscope.staging import real_target, staged_directory

FORMATS = ("csv", "json")


def export_tables(directory: str | Path, fmt: str, out: str | Path | None = None) -> list[Path]:
    """Write each `*.parquet` table of `directory` to `out` (default `directory/<fmt>/`) as `<table>.<fmt>`.

    CSV: a header row, then one line per row. JSON: an array of row objects, NaN written as null. Returns the
    written paths (sorted by table name).
    """
    directory = Path(directory)
    if fmt not in FORMATS:
        raise SinkscopeError(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    tables = sorted(directory.glob("*.parquet")) if directory.is_dir() else []
    if not tables:
        raise SinkscopeError(
            f"{directory} holds no tables (*.parquet); pass a directory written by `sinkscope analyze` or `sweep`"
        )
    out = real_target(directory / fmt if out is None else Path(out))
    names = {f"{path.stem}.{fmt}" for path in tables}

    def replaceable(folder: Path) -> None:
        """An earlier export of this run may be replaced; a folder holding anything else may not."""
        if not folder.is_dir():
            raise SinkscopeError(f"--out {folder} exists and is not a directory; choose another --out")
        if not any(folder.iterdir()):
            return
        foreign = foreign_entries(folder)  # None: no sinkscope marker, so nothing in it is provably an export
        foreign = sorted({e.name for e in folder.iterdir()} - names - {MARKER} if foreign is not None else
                         {e.name for e in folder.iterdir()}) + (foreign or [])  # fmt: skip
        if foreign:
            raise SinkscopeError(
                f"--out {folder} holds files that are not an export of {directory} ({', '.join(foreign[:3])}), so "
                "export will not replace it; choose a new or empty folder"
            )

    if out.exists():
        replaceable(out)  # before any table is read
    with staged_directory(out, replaceable, kind="export") as staging:
        for path in tables:
            table = _read(path)
            target = staging / f"{path.stem}.{fmt}"
            if fmt == "csv":
                table.to_csv(target, index=False)
            else:
                target.write_text(json_records(table), encoding="utf-8")
    return [out / f"{path.stem}.{fmt}" for path in tables]


def _read(path: Path) -> pd.DataFrame:
    try:
        return pd.read_parquet(path)
    except Exception:  # pyarrow raises ArrowInvalid, OSError and others for a damaged file
        raise SinkscopeError(f"{path} is damaged or truncated (not a readable parquet table); rerun the command "
                             "that wrote it") from None


def json_records(table: pd.DataFrame) -> str:
    """`table` as a JSON list of records with every float at full precision (repr: 3e-15 stays 3e-15, not 0.0);
    NaN is null and ±inf, which JSON cannot hold, is the string "inf" / "-inf" rather than a silent null."""

    def value(item):
        item = item.item() if hasattr(item, "item") else item
        if isinstance(item, float) and not math.isfinite(item):
            return None if math.isnan(item) else ("inf" if item > 0 else "-inf")
        return item

    records = [{k: value(v) for k, v in row.items()} for row in table.to_dict(orient="records")]
    return json.dumps(records, indent=1, ensure_ascii=False, allow_nan=False, default=str)
