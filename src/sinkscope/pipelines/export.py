"""Every table of a run (or sweep) directory as CSV or JSON, for people who do not use pandas or parquet."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError

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
    out = directory / fmt if out is None else Path(out)
    if out.exists() and not out.is_dir():
        raise SinkscopeError(f"--out {out} exists and is not a directory")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for path in tables:
        table = pd.read_parquet(path)
        target = out / f"{path.stem}.{fmt}"
        tmp = target.with_name(f".{target.name}.tmp")
        if fmt == "csv":
            table.to_csv(tmp, index=False)
        else:
            table.to_json(tmp, orient="records", indent=1, force_ascii=False)
        tmp.replace(target)
        written.append(target)
    return written
