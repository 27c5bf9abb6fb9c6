"""The figure of `sinkscope dense`: what uniform causal attention does inside the model, per head and per layer."""

from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

REGIME_COLORS = {"monotone": "#c0392b", "peak, dense more": "#e67e22", "peak, dense less": "#2471a3",
                 "resists": "#28b463"}  # fmt: skip


def dense_figure(heads: pd.DataFrame, layers: pd.DataFrame) -> Figure:
    """Left: per head, Δ mean pairwise cosine of the residual leaving its layer when the head's attention becomes
    uniform (λ = 1), against b/c (regime boundaries at −1, −½, 0), coloured by predicted regime. Right: per layer,
    Δ loss (95 % interval over windows) when every head of the layer attends uniformly, and the layer's Δcos."""
    fig = Figure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    single = heads[heads["head"] >= 0]
    ratio = np.clip(single["smooth_b"] / single["smooth_c"], -3, 3)
    for regime, color in REGIME_COLORS.items():
        pick = single["regime"] == regime
        left.scatter(ratio[pick], single.loc[pick, "dcos"], s=10, color=color, label=f"{regime} ({int(pick.sum())})")
    for x in (-1, -0.5, 0):
        left.axvline(x, color="grey", lw=0.5, ls=":")
    left.axhline(0, color="black", lw=0.6)
    left.set_xlabel("b / c (clipped to ±3)")
    left.set_ylabel("Δ cos, own → uniform (one head)")
    left.legend(fontsize=7)
    full = layers[layers["lam"] == layers["lam"].max()]
    err = [full["dloss"] - full["dloss_lo"], full["dloss_hi"] - full["dloss"]]
    right.errorbar(full["layer"], full["dloss"], yerr=err, fmt="o-", ms=3, capsize=2, color="#6c3483",
                   label="Δ loss (nats/token)")  # fmt: skip
    right.axhline(0, color="black", lw=0.6)
    right.set_xlabel("layer (all its heads uniform)")
    right.set_ylabel("Δ next-token loss")
    twin = right.twinx()
    whole = heads[heads["head"] < 0].sort_values("layer")
    twin.plot(whole["layer"], whole["dcos"], "s--", ms=3, color="#b7950b", label="Δ cos of the layer's output")
    twin.set_ylabel("Δ cos")
    right.legend(fontsize=7, loc="upper left")
    twin.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return fig
