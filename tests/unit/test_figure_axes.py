"""The report's figure fixes of issue 35, read back from the matplotlib objects: a bar chart's layer axis spans
exactly its layers (Gemma's 18 layers end at 17), the per-position axis is labelled with plain integers, the
switch ⇔ sink agreement panel is left out (with a note) when most layers have no switched-off query, and the
value-drain heatmap says why it is constant within a layer when the heads share one key/value head."""

from __future__ import annotations

import numpy as np
import pandas as pd

from sinkscope.report.plots import head_classes, position_sinks
from sinkscope.report.switch_section import shared_values_note, switch_figure, switch_section


def heads_table(L: int, H: int, kv_heads: int | None = None, off_layers: int | None = None) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    kv = H if kv_heads is None else kv_heads
    drains = rng.uniform(0.01, 3, size=(L, kv))
    for layer in range(L):
        for head in range(H):
            off = 0 if off_layers is not None and layer >= off_layers else int(rng.integers(1, 20))
            rows.append({"layer": layer, "head": head, "head_class": ["sink", "dense", "mixed"][(layer + head) % 3],
                         "switch_n_off_sink": off, "switch_n_off_nosink": 0 if off == 0 else 3,
                         "switch_n_on_sink": 5, "switch_n_on_nosink": 30,
                         "value_drain": drains[layer, head // (H // kv)]})  # fmt: skip
    return pd.DataFrame(rows)



def visible_ticks(ax) -> list[float]:
    low, high = ax.get_xlim()
    return [t for t in ax.get_xticks() if low <= t <= high]


def test_head_class_chart_of_18_layers_ends_at_17():
    ax = head_classes(heads_table(18, 4)).axes[0]
    low, high = ax.get_xlim()
    assert (low, high) == (-0.5, 17.5)
    ticks = visible_ticks(ax)
    assert max(ticks) <= 17 and min(ticks) >= 0 and all(float(t).is_integer() for t in ticks)


def test_per_position_axis_has_plain_integer_labels():
    T = 64
    positions = pd.DataFrame({"layer": np.repeat(np.arange(2), T), "position": np.tile(np.arange(T), 2),
                              "sink_rate": 0.1, "mean_key_score": 0.05})  # fmt: skip
    fig = position_sinks(positions)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig).draw()
    labels = [t.get_text() for t in fig.axes[0].get_xticklabels()]
    assert labels == ["0", "1", "2", "4", "8", "16", "32"], labels
    assert not fig.axes[0].xaxis.get_minorticklocs().size


def test_agreement_panel_only_when_most_layers_have_switched_off_queries():
    assert len(switch_figure(heads_table(6, 2)).axes) == 2
    sparse = heads_table(6, 2, off_layers=2)  # 2 of 6 layers with a switched-off query
    assert len(switch_figure(sparse).axes) == 1
    section = switch_section(sparse, pd.DataFrame({"layer": range(6)}))
    assert "only 2 of 6 layers have a query switched off" in section["switch"]["note"]
    assert switch_section(heads_table(6, 2), pd.DataFrame({"layer": range(6)}))["switch"]["note"] is None
    bars = switch_figure(heads_table(18, 2)).axes[0]
    assert bars.get_xlim() == (-0.5, 17.5)


def test_value_drain_note_when_heads_share_key_value_heads():
    assert "constant within each layer" in shared_values_note(heads_table(4, 4, kv_heads=1))
    assert "blocks of heads" in shared_values_note(heads_table(4, 4, kv_heads=2))
    assert shared_values_note(heads_table(4, 4)) is None
