"""Layers without a softmax attention map (Qwen3-Next's linear-attention, Gated DeltaNet, layers) in an analysis.

The feed watches only the layers that have the family's attention module (`models.families.softmax_layers`), so
the attention statistics see nothing of the others and would report zeros there. `mark_linear_layers` turns
those rows into missing values (NaN), names each layer's kind in the layers table (`attention`: "softmax" or
"linear"), and rescales the window sink rate of the summary, a mean over every (layer, head) in which the
linear layers counted as 0, to the mean over the softmax layers' heads. Statistics of the residual stream
(BOS geometry, massive activations, half-space certificates) read every layer and are left as they are.
"""

from __future__ import annotations

import numpy as np

from sinkscope.capture.feed import ATTENTION_EVENTS
from sinkscope.statistics.statistic import Statistic, Tables

KEYS = {"layer", "head", "position"}


def reads_attention(statistic: Statistic) -> bool:
    """Whether the statistic overrides an attention event (so it sees nothing of a linear-attention layer)."""
    return any(getattr(type(statistic), e) is not getattr(Statistic, e) for e in ATTENTION_EVENTS)


def mark_linear_layers(parts: dict[str, Tables], statistics: list[Statistic], softmax: list[int], n_layers: int
                       ) -> None:  # fmt: skip
    """In place: NaN in the attention statistics' rows of layers not in `softmax`, the layers table's `attention`
    column (in the first part with a layers table), and the summary's sink rates rescaled by L / |softmax|."""
    linear = sorted(set(range(n_layers)) - set(softmax))
    if not linear:
        return
    for statistic in statistics:
        part = parts[statistic.name]
        if not reads_attention(statistic):
            continue
        for name in ("heads", "layers", "positions"):
            table = getattr(part, name)
            if table is None:
                continue
            rows = table["layer"].isin(linear)
            for column in (c for c in table.columns if c not in KEYS):
                table[column] = table[column].astype(float if table[column].dtype.kind in "biuf" else object)
                table.loc[rows, column] = np.nan if table[column].dtype.kind == "f" else None
        if "sink_rate" in part.summary:
            scale = n_layers / len(softmax)
            part.summary["sink_rate"] *= scale
            part.summary["sink_rates"] = {e: r * scale for e, r in part.summary["sink_rates"].items()}
    first = next(p for p in parts.values() if p.layers is not None)
    first.layers["attention"] = np.where(first.layers["layer"].isin(linear), "linear", "softmax")
