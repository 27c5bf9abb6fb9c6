"""The paper's cost question asked of every attention variant: what does each way of switching a head off cost?

From a regime map's rows (`regimes.REGIME_COLUMNS`, one per cell and seed, read from the run's dominant switch head),
keep the runs that learned the task to a common level (copy accuracy ≥ `ACCURACY_FLOOR`: "at equal task accuracy"),
group them by variant, init, BOS, weight decay and the pattern the head switches off with (sink, diagonal, null =
the row's mass goes nowhere, gated, ...), and give, per group, the number of seeds and the mean with a 95% Student-t
interval over them of the norms the paper compares: `‖W_QK‖_*` and `‖W_QK‖_F` of the switch head, plus the Frobenius
norm of its own switch parameters (`switch_param_norm`: the gate's weights and bias, or |sink logit|;
`TinyTransformer`'s `switch_parameter_norm`), and its switched-off share and row mass on non-trigger queries.
"""

from __future__ import annotations

import math

import pandas as pd
from scipy import stats

ACCURACY_FLOOR = 0.9
GROUP = ("variant", "init", "bos", "weight_decay", "pattern")
MEASURES = ("wqk_nuclear", "wqk_frobenius", "switch_param_norm", "switch_off", "row_mass", "gate", "copy_acc")
COST_COLUMNS = (*GROUP, "n_seeds", "n_below_floor",
                *(f"{m}{suffix}" for m in MEASURES for suffix in ("", "_ci")))  # fmt: skip


def t_interval(values: pd.Series, level: float = 0.95) -> float:
    """Half-width of the Student-t interval of the mean at `level` (NaN for fewer than 2 finite values)."""
    values = values.dropna()
    n = len(values)
    if n < 2:
        return math.nan
    return float(stats.t.ppf(0.5 + level / 2, n - 1) * values.std(ddof=1) / math.sqrt(n))


def switch_cost_table(rows: pd.DataFrame, floor: float = ACCURACY_FLOOR) -> pd.DataFrame:
    """One row per (variant, init, BOS, weight decay, pattern) among the runs with `copy_acc ≥ floor`: `n_seeds`,
    `n_below_floor` (runs of the cell left out for accuracy), and `X` (mean) with `X_ci` (95% t half-width) for
    every `MEASURES` column. `rows`: a regimes.parquet table (columns `REGIME_COLUMNS`)."""
    kept = rows[rows["copy_acc"] >= floor]
    below = (rows["copy_acc"] < floor).groupby([rows[k] for k in GROUP[:-1]]).sum()
    out = []
    for key, group in kept.groupby(list(GROUP), sort=False):
        entry = dict(zip(GROUP, key))
        entry["n_seeds"] = len(group)
        entry["n_below_floor"] = int(below.get(key[:-1], 0))
        for measure in MEASURES:
            entry[measure] = group[measure].mean()
            entry[f"{measure}_ci"] = t_interval(group[measure])
        out.append(entry)
    return pd.DataFrame(out, columns=list(COST_COLUMNS))
