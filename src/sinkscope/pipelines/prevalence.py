"""How common each head pattern is: the share of sink, diagonal, previous-token, dense and mixed heads per layer,
with intervals over windows (the paper's "prevalence of sinks over diagonal patterns").

Each head is classified in each window separately (`stats.head_classes.classify_head` with the analyze thresholds,
ε = `epsilon`) from its scores in that window (SPEC §2: sink `mean_t A[t,0]`, diagonal `mean_{t≥1} A[t,t]`,
previous-token `mean_{t≥1} A[t,t−1]`, normalised entropy), computed from eager `output_attentions` maps. A layer's
share of class c in window w is the fraction of its heads of class c; the table gives its mean over windows and a
95 % normal interval (`share ± 1.96 · sd / √n_windows`). Layer −1 pools every head of the model. The per-window
class is not the class of the window-mean scores that `sinkscope analyze` reports; both are in the output
(`class_of_mean` in `prevalence_heads.parquet`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.functional.patterns import diag_score, entropy_score, prev_score, sink_score
from sinkscope.models.load import LoadedModel

CLASSES = ("sink", "diagonal", "previous-token", "dense", "mixed")
SCORES = ("sink_score", "diag_score", "prev_score", "entropy")
Z95 = 1.959963984540054


@torch.no_grad()
def window_scores(lm: LoadedModel, batches: Iterable[Tensor]) -> pd.DataFrame:
    """One row per (window, layer, head) with the four SPEC §2 scores of that window (eager attention maps)."""
    previous = lm.model.config._attn_implementation
    rows, start = [], 0
    try:
        lm.model.set_attn_implementation("eager")
        for ids in batches:
            attentions = lm.base(input_ids=ids.to(lm.device), output_attentions=True, use_cache=False).attentions
            attn = torch.stack(attentions, 1).double()  # (B, L, H, T, T)
            scores = torch.stack([sink_score(attn), diag_score(attn), prev_score(attn), entropy_score(attn)], -1)
            B, L, H = scores.shape[:3]
            for b in range(B):
                for layer in range(L):
                    for head in range(H):
                        rows.append({"window": start + b, "layer": layer, "head": head,
                                     **dict(zip(SCORES, scores[b, layer, head].tolist()))})  # fmt: skip
            start += B
    finally:
        lm.model.set_attn_implementation(previous)
    if not rows:
        raise SinkscopeError("prevalence got no windows: use a larger corpus or a smaller --seq-len")
    return pd.DataFrame(rows)


def classify(scores: pd.DataFrame, epsilon: float = 0.3) -> pd.Series:
    """The head class of every row of `scores` (columns `SCORES`)."""
    thresholds = HeadThresholds(sink=epsilon)
    return pd.Series([classify_head(s, d, p, e, thresholds=thresholds) for s, d, p, e in
                      scores[list(SCORES)].itertuples(index=False)], index=scores.index)  # fmt: skip


def shares(windows: pd.DataFrame) -> pd.DataFrame:
    """Per (layer, class): mean share of the layer's heads over windows, its 95 % interval, n_windows; layer −1 is
    every head of the model. windows: rows (window, layer, head, class)."""
    pooled = windows.assign(layer=-1)
    rows = []
    for layer, group in pd.concat([windows, pooled]).groupby("layer"):
        per_window = pd.crosstab(group["window"], group["class"], normalize="index")
        for name in CLASSES:
            values = per_window[name].to_numpy() if name in per_window else np.zeros(len(per_window))
            half = Z95 * values.std(ddof=1) / np.sqrt(len(values)) if len(values) > 1 else float("nan")
            rows.append({"layer": int(layer), "class": name, "share": float(values.mean()),
                         "share_lo": float(values.mean() - half), "share_hi": float(values.mean() + half),
                         "n_windows": len(values)})  # fmt: skip
    return pd.DataFrame(rows)


def run_prevalence(lm: LoadedModel, windows, epsilon: float = 0.3) -> dict:
    """Per-window scores and classes, per-head summary (window-mean scores, their class, the share of windows in
    each class), per-layer shares with intervals, and meta."""
    started = time.perf_counter()
    per_window = window_scores(lm, windows)
    per_window["class"] = classify(per_window, epsilon)
    heads = per_window.groupby(["layer", "head"])[list(SCORES)].mean().reset_index()
    heads["class_of_mean"] = classify(heads, epsilon)
    counts = pd.crosstab([per_window["layer"], per_window["head"]], per_window["class"], normalize="index")
    heads = heads.merge(counts.add_prefix("frac_").reset_index(), on=["layer", "head"], how="left").fillna(0.0)
    meta = {"epsilon": epsilon, "model": lm.identity,
            "corpus": windows.identity() if hasattr(windows, "identity") else {},
            "n_windows": int(per_window["window"].nunique()),
            "timings": {"seconds": time.perf_counter() - started}}  # fmt: skip
    return {"windows": per_window, "heads": heads, "layers": shares(per_window), "meta": meta}


def save_prevalence(directory, result: dict, overwrite: bool = False):
    """Write `prevalence.parquet` (per layer and class), `prevalence_heads.parquet`, `prevalence_windows.parquet`,
    `prevalence.json`, `figures/prevalence.png` and `report.html`, staged and renamed into place."""
    from sinkscope.report.plots import figure_png
    from sinkscope.report.prevalence_section import prevalence_figure
    from sinkscope.report.result_files import save_result_files

    meta, layers = result["meta"], result["layers"]
    png = figure_png(prevalence_figure(layers))
    settings = {"model": (meta.get("model") or {}).get("name", "unnamed model"),
                "corpus": (meta.get("corpus") or {}).get("source"), "windows": meta["n_windows"],
                "ε": meta["epsilon"], "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    overall = layers[layers["layer"] == -1].drop(columns="layer")
    return save_result_files(
        directory, overwrite=overwrite,
        tables={"prevalence.parquet": layers, "prevalence_heads.parquet": result["heads"],
                "prevalence_windows.parquet": result["windows"]},
        meta_name="prevalence.json", meta=meta, figures={"prevalence.png": ("Head classes by layer", png)},
        title=f"sinkscope prevalence: {settings['model']}",
        intro="Share of heads in each class, each head classified in each window; mean over windows with a 95 % "
        "interval. Definitions in docs/experiments.md.",
        settings=settings,
        shown=[("Whole model (prevalence.parquet, layer −1)", overall),
               ("Per layer (prevalence.parquet)", layers[layers["layer"] >= 0])],
    )  # fmt: skip
