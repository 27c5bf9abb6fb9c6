"""The cost sweep's `report.html` (SPEC §6), rendered through `results_page.write_results_page`."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from sinkscope.report.results_page import write_results_page

FIGURE_CAPTIONS = {
    "cost_vs_T.png": "Minimum-norm cost of the sink and the diagonal pattern against T (first margin)",
    "ratio.png": "Diagonal cost / sink cost against T",
    "regime_map.png": "Which pattern is cheaper, per family and T",
}


def write_cost_page(path: Path, config: Mapping[str, Any], frame: pd.DataFrame, fits: pd.DataFrame,
                    figures: list[Path], seconds: float) -> Path:
    """The sweep's `report.html`: the settings (`config`, the sweep's configuration as run.json holds it), the
    `figures` that `cost_figures.write_figures` wrote, the fitted exponents (fits.csv) and every solved setting
    (cost.parquet)."""
    families = ", ".join(config["families"])
    settings = {
        "families": families, "T": ", ".join(map(str, config["Ts"])),
        "d": ", ".join(map(str, config["ds"])), "patterns": ", ".join(config["patterns"]),
        "norms": ", ".join(config["norms"]), "causal": config["causal"], "solver": config["solver"],
        "settings solved": len(frame), "seconds": f"{seconds:.1f}",
    }  # fmt: skip
    return write_results_page(
        path, f"sinkscope cost: {families}",
        "Minimum nuclear / Frobenius norm of a W_QK that puts a margin κ on the sink or on the diagonal pattern "
        "(docs/theory/cost.md); cost = inf where the pattern cannot be represented.",
        settings,
        [("Fitted exponents of cost ~ T^a (fits.csv)", fits), ("Every solved setting (cost.parquet)", frame)],
        [(FIGURE_CAPTIONS[figure.name], figure.read_bytes()) for figure in figures],
    )  # fmt: skip
