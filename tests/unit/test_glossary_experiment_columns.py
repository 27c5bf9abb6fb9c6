"""Every column the pages of issue 36's commands show (evict, prevalence, dense, switch-assumptions, cost-regimes) has
a definition in `report.glossary.RESULTS_TERMS`, so the page links it (the tables are built by the pipelines'
own functions from small constructed inputs)."""

import numpy as np
import pandas as pd

from sinkscope.pipelines.cost_regimes import RegimeConfig, regime_summary, vocabulary_table
from sinkscope.pipelines.dense_attention import head_table, regime_counts
from sinkscope.pipelines.eviction import summarize
from sinkscope.pipelines.prevalence import shares
from sinkscope.pipelines.switch_assumptions import CATEGORIES, SwitchConfig, conditioned
from sinkscope.report.glossary import RESULTS_TERMS
from sinkscope.report.results_page import header_cells


def shown_columns() -> dict[str, list[str]]:
    losses = pd.DataFrame([{"window": w, "policy": p, "k": k, "kept": kept, "loss": 3.0 + w}
                           for w in range(3) for p, k, kept in (("full", 0, ""), ("recent", 0, ""), ("first", 1, "0"))])  # fmt: skip
    windows = pd.DataFrame([{"window": w, "layer": 0, "head": h, "class": c}
                            for w in range(3) for h, c in enumerate(("sink", "diagonal"))])  # fmt: skip
    cosines = pd.DataFrame([{"window": w, "layer": 0, "head": 0, "lam": lam, "cos": 0.5 + lam / 10}
                            for w in range(3) for lam in (0.0, 1.0)])  # fmt: skip
    predicted = pd.DataFrame({"layer": [0], "head": [0], "smooth_b": [0.1], "smooth_c": [0.2],
                              "smooth_dense_more": [True], "smooth_lambda_peak": [np.nan]})  # fmt: skip
    heads = head_table(cosines, predicted)
    cells = pd.DataFrame({"window": [0, 1], "layer": [1, 1], "holds": [True, False], "switched": [3, 0],
                          "switched_sink": [2, 0]})  # fmt: skip
    geometry = pd.DataFrame({"T": [4], "d": [16], "rank": [2], "seed": [0], "cheaper_exact": ["diagonal"],
                             "sink_status": ["infeasible"], "p_h1": [0.3], "cheaper_predicted": ["diagonal"],
                             "agree": [True]})  # fmt: skip
    layers = ["layer", "holds_frac", "rank_median", "n_contexts", "span_distance_median", "span_distance_min",
              "switched", "switched_sink", "agreement"]  # run_switch_assumptions' per-layer table (needs a model)
    return {
        "evict": list(summarize(losses).columns),
        "prevalence": list(shares(windows).columns),
        "dense": [*heads.columns, *regime_counts(heads).columns, "lam", "base_loss", "dloss", "dloss_lo",
                  "dloss_hi", "n_windows"],  # fmt: skip
        "switch-assumptions": [*conditioned(cells, SwitchConfig(bootstrap=10)).columns, "category", "queries",
                               "share", *layers],  # fmt: skip
        "cost-regimes": [*regime_summary(geometry).columns,
                         *vocabulary_table(RegimeConfig(Vs=(3,), Ks=(1,), Ts=(4,), ranks=(2,), seeds=1)).columns],
    }  # fmt: skip


def test_every_column_of_the_experiment_pages_is_defined():
    assert len(CATEGORIES) == 4
    for page, columns in shown_columns().items():
        missing = [c for c in columns if c not in RESULTS_TERMS]
        assert not missing, (page, missing)
        assert all(isinstance(cell, dict) and cell["definition"] for cell in header_cells(columns))
