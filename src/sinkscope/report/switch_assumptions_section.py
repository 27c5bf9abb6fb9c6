"""The figure of `sinkscope switch-assumptions`: BOS's distance from the contexts' span per layer (over windows),
where the assumptions hold, and the agreement P(hard sink | switched off) per layer."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure


def assumptions_figure(cells: pd.DataFrame, layers: pd.DataFrame) -> Figure:
    """Left: span_distance of every (layer, window), the layers' share of windows where the assumptions hold on
    the twin axis. Right: agreement per layer, marker size by the number of switched-off queries."""
    fig = Figure(figsize=(10, 3.6))
    left, right = fig.subplots(1, 2)
    left.scatter(cells["layer"], cells["span_distance"], s=6, alpha=0.5, color="#2471a3", label="one window")
    left.set_xlabel("layer")
    left.set_ylabel("|z₀ − P z₀| / |z₀| (BOS off the contexts' span)")
    twin = left.twinx()
    twin.plot(layers["layer"], layers["holds_frac"], "o-", ms=3, color="#c0392b", label="share of windows: holds")
    twin.set_ylim(-0.05, 1.05)
    twin.set_ylabel("share where the assumptions hold")
    left.legend(fontsize=7, loc="upper left")
    twin.legend(fontsize=7, loc="lower right")
    sizes = 10 + 60 * layers["switched"] / max(float(layers["switched"].max()), 1.0)
    right.scatter(layers["layer"], layers["agreement"], s=sizes, color="#6c3483")
    right.set_ylim(-0.05, 1.05)
    right.set_xlabel("layer")
    right.set_ylabel("P(hard sink | switched off)")
    fig.tight_layout()
    return fig
