"""Compare two run directories table by table: same columns (and their order), same rows, max |difference| of
every numeric column, equal text columns, equal run.json summaries. Used to show that a refactor left the numbers
unchanged, e.g. `make demo` before and after:

    python benchmarks/compare_runs.py runs/demo-before runs/demo-after
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd


def compare(before: Path, after: Path) -> float:
    """Print one line per table and return the largest absolute difference over all numeric columns."""
    worst = 0.0
    for path in sorted(before.glob("*.parquet")):
        x, y = pd.read_parquet(path), pd.read_parquet(after / path.name)
        if set(x.columns) != set(y.columns) or len(x) != len(y):
            raise SystemExit(f"{path.name}: columns or rows differ ({set(x.columns) ^ set(y.columns)}, {len(x)} vs {len(y)})")
        order = list(x.columns) == list(y.columns)
        y = y[x.columns]
        diff = 0.0
        for column in x.columns:
            if pd.api.types.is_numeric_dtype(x[column]) and not pd.api.types.is_bool_dtype(x[column]):
                a, b = x[column].to_numpy(float), y[column].to_numpy(float)
                if not (np.isnan(a) == np.isnan(b)).all():
                    raise SystemExit(f"{path.name}.{column}: missing values differ")
                diff = max(diff, float(np.nanmax(np.abs(a - b), initial=0.0)))
            elif not (x[column].astype(str).to_numpy() == y[column].astype(str).to_numpy()).all():
                raise SystemExit(f"{path.name}.{column}: values differ")
        worst = max(worst, diff)
        print(f"{path.name}: {len(x)} rows × {x.shape[1]} columns, same column order: {order}, max |diff| {diff:.3g}")
    summaries = [json.loads((d / "run.json").read_text())["summary"] for d in (before, after)]
    print(f"run.json summary equal: {summaries[0] == summaries[1]}")
    return worst


if __name__ == "__main__":
    print(f"largest difference: {compare(Path(sys.argv[1]), Path(sys.argv[2])):.3g}")
