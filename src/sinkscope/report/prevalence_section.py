"""The figure of `sinkscope prevalence`: head classes by layer (stacked mean shares over windows) and for the
whole model (with 95 % intervals)."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sinkscope.report.plots import HEAD_CLASS_COLORS

CLASSES = ("sink", "diagonal", "previous-token", "dense", "mixed")


def prevalence_figure(layers: pd.DataFrame) -> Figure:
    """Left: per layer, the mean share of its heads in each class (stacked). Right: the whole model's shares
    (layer −1) with 95 % intervals over windows. layers: `pipelines.prevalence.shares`' table."""
    fig = Figure(figsize=(10, 3.6))
    left, right = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    per_layer = layers[layers["layer"] >= 0].pivot(index="layer", columns="class", values="share")
    bottom = np.zeros(len(per_layer))
    for name in CLASSES:
        values = per_layer[name].to_numpy() if name in per_layer else np.zeros(len(per_layer))
        left.bar(per_layer.index, values, bottom=bottom, color=HEAD_CLASS_COLORS[name], label=name, width=0.85)
        bottom += values
    left.set_xlabel("layer")
    left.set_ylabel("share of heads (mean over windows)")
    left.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, 1.15))
    overall = layers[layers["layer"] == -1].set_index("class").reindex(list(CLASSES))
    err = [overall["share"] - overall["share_lo"], overall["share_hi"] - overall["share"]]
    right.bar(range(len(CLASSES)), overall["share"], yerr=err, capsize=3,
              color=[HEAD_CLASS_COLORS[c] for c in CLASSES])  # fmt: skip
    right.set_xticks(range(len(CLASSES)), [c.replace("previous-token", "prev.") for c in CLASSES], rotation=45,
                     fontsize=7)  # fmt: skip
    right.set_title("whole model", fontsize=9)
    fig.tight_layout()
    return fig
