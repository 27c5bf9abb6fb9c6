"""The variant cost table (synthetic/switch_costs.py) on hand-made regime rows: runs below the accuracy floor are
left out and counted, each (cell, pattern) group gets the mean and the 95% Student-t half-width computed by hand."""

from __future__ import annotations

import math

import pandas as pd

from sinkscope.synthetic.switch_costs import ACCURACY_FLOOR, COST_COLUMNS, switch_cost_table

T_975_2DF = 4.302652729911275  # Student t quantile 0.975 with 2 degrees of freedom (tables)


def rows() -> pd.DataFrame:
    base = {"variant": "softmax1", "init": "gpt2", "bos": True, "weight_decay": 1e-4, "switch_off": 0.5,
            "row_mass": 0.2, "gate": math.nan, "switch_param_norm": math.nan, "wqk_frobenius": 1.0}  # fmt: skip
    table = [
        {**base, "pattern": "null", "wqk_nuclear": 2.0, "copy_acc": 0.95},
        {**base, "pattern": "null", "wqk_nuclear": 4.0, "copy_acc": 0.99},
        {**base, "pattern": "null", "wqk_nuclear": 9.0, "copy_acc": 0.91},
        {**base, "pattern": "sink", "wqk_nuclear": 5.0, "copy_acc": 0.97},
        {**base, "pattern": "null", "wqk_nuclear": 100.0, "copy_acc": ACCURACY_FLOOR - 0.01},  # not learned
    ]
    return pd.DataFrame(table)


def test_groups_floor_and_intervals() -> None:
    table = switch_cost_table(rows())
    assert tuple(table.columns) == COST_COLUMNS and len(table) == 2
    null = table[table["pattern"] == "null"].iloc[0]
    assert null["n_seeds"] == 3 and null["n_below_floor"] == 1
    assert null["wqk_nuclear"] == 5.0  # (2 + 4 + 9) / 3: the run below the floor is left out
    sample_sd = math.sqrt(((2 - 5) ** 2 + (4 - 5) ** 2 + (9 - 5) ** 2) / 2)
    assert math.isclose(null["wqk_nuclear_ci"], T_975_2DF * sample_sd / math.sqrt(3), rel_tol=1e-9)
    sink = table[table["pattern"] == "sink"].iloc[0]
    assert sink["n_seeds"] == 1 and math.isnan(sink["wqk_nuclear_ci"])  # one seed: no interval
    assert math.isnan(null["switch_param_norm"]) and math.isnan(null["switch_param_norm_ci"])
