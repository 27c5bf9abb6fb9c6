"""The keep-the-sink figure (`sinkscope evict`): loss change against the full cache when a query keeps only a recent
window of keys plus k kept tokens — the first k, or the k of largest column mass — with 95 % intervals over windows."""

from __future__ import annotations

import pandas as pd
from matplotlib.figure import Figure

COLORS = {"first": "#c0392b", "top-mass": "#2471a3", "recent": "#555555"}


def eviction_figure(summary: pd.DataFrame, window: int) -> Figure:
    """Δ loss (policy − full cache, nats/token over the evicted queries) against k, per policy; the recent window
    alone is the k = 0 point of both curves. summary: `pipelines.eviction.summarize`'s table."""
    fig = Figure(figsize=(5.6, 3.6))
    ax = fig.subplots()
    recent = summary[summary["policy"] == "recent"]
    for policy in ("first", "top-mass"):
        rows = pd.concat([recent, summary[summary["policy"] == policy]]).sort_values("k")
        if rows.empty:
            continue
        err = [rows["delta_full"] - rows["delta_full_lo"], rows["delta_full_hi"] - rows["delta_full"]]
        ax.errorbar(rows["k"], rows["delta_full"], yerr=err, fmt="o-", capsize=3, color=COLORS[policy],
                    label=f"window + {'first' if policy == 'first' else 'largest-mass'} k tokens")  # fmt: skip
    ax.axhline(0, color="black", lw=0.6, label="full cache")
    ax.set_xlabel("k (tokens kept besides the recent window)")
    ax.set_ylabel("Δ loss vs full cache (nats/token)")
    ax.set_title(f"keep-the-sink: recent window of {window} keys", fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
