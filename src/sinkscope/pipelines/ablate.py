"""Head ablations: switch chosen heads off and measure the change of next-token loss (issue 3, part 3).

The interventions (`zero`, `bos`) are the hooks of `capture/head_ablation.py`; which heads (lists, classes,
scores, the random baseline) is `pipelines/head_selection.py`. Loss is the mean cross-entropy of the full causal
LM over every position's next token (targets at positions 1..T-1), the same windows for every head set, so
differences are paired per window.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.capture.head_ablation import MODES, Head, head_ablation
from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.head_selection import (
    SCORE_SELECTIONS,
    count_for_fraction,
    format_heads,
    head_scores,
    head_sets_for,
    parse_heads,
    scores_from_run,
)
from sinkscope.pipelines.loss_passes import CleanPass, clean_pass, first_edited_layer, replayed_losses
from sinkscope.pipelines.loss_passes import (
    window_losses as window_losses,  # the other ablations import it here
)
from sinkscope.report.plots import no_mathtext
from sinkscope.staging import check_replaceable


def ablate(
    lm: LoadedModel,
    windows: Iterable[Tensor],
    head_sets: Mapping[str, Sequence[Head]],
    mode: str = "zero",
    progress: bool = False,
    clean: CleanPass | None = None,
) -> pd.DataFrame:
    """Loss change when each head set is ablated (`zero` or `bos`, see `head_ablation`), one row per set.

    windows: batches LongTensor[B, T] (held in memory for the repeated passes: B·T ints each). Each set's passes
    start at its first layer (`pipelines.loss_passes`: the layers below are replayed from the clean pass, `clean`
    when given — of the same windows — else run here).
    Columns: set, mode, n_heads, heads ("3.1,4.2"), base_loss, loss, delta_loss (mean over windows of the
    per-window change, nats/token), delta_sem (its standard error over windows), n_windows, window_delta (the
    per-window changes themselves, in window order: the same windows for every set, so sets pair by window).
    """
    batches = list(windows)
    if not batches:
        raise SinkscopeError("ablate got no windows: use a larger corpus or a smaller --seq-len")
    clean = clean_pass(lm, batches) if clean is None else clean
    base = clean.losses
    rows = []
    from tqdm.auto import tqdm

    for name, heads in tqdm(head_sets.items(), desc="ablate", unit="set", disable=not progress):
        heads = sorted(set(heads))
        first = first_edited_layer(layer for layer, _ in heads)
        with head_ablation(lm, heads, mode):
            losses = replayed_losses(lm, batches, clean, [first] * len(batches))
        delta = losses - base
        sem = float(delta.std(ddof=1) / np.sqrt(len(delta))) if len(delta) > 1 else float("nan")
        rows.append(
            {
                "set": name,
                "mode": mode,
                "n_heads": len(heads),
                "heads": format_heads(heads),
                "base_loss": float(base.mean()),
                "loss": float(losses.mean()),
                "delta_loss": float(delta.mean()),
                "delta_sem": sem,
                "n_windows": len(delta),
                "window_delta": delta.tolist(),
            }
        )
    return pd.DataFrame(rows)


def ablation_curve(
    lm: LoadedModel,
    windows: Iterable[Tensor],
    scores: pd.DataFrame | None,
    fractions: Sequence[float],
    selections: Sequence[str] = tuple(SCORE_SELECTIONS),
    mode: str = "zero",
    n_random: int = 3,
    seed: int = 0,
    progress: bool = False,
    clean: CleanPass | None = None,
) -> pd.DataFrame:
    """Loss change against the fraction of heads removed, per selection, with the random baseline beside it.

    Columns of `ablate`, plus selection, fraction (heads removed / all heads), seed (random draws; else -1).
    The baseline draws `n_random` seeded random sets of every head count that a selection uses. `clean`: as in
    `ablate`.
    """
    sets, labels = head_sets_for(selections, fractions, scores, len(lm.layers), lm.layout.n_heads, n_random, seed)
    frame = ablate(lm, windows, sets, mode, progress=progress, clean=clean)
    frame[["selection", "fraction", "seed"]] = pd.DataFrame([labels[name] for name in frame["set"]])
    return frame


def curve_summary(curve: pd.DataFrame) -> pd.DataFrame:
    """Per (selection, fraction): mean loss change, its spread over random draws, and head count."""
    return (
        curve.groupby(["selection", "fraction"], sort=True)
        .agg(n_heads=("n_heads", "first"), delta_loss=("delta_loss", "mean"), delta_std=("delta_loss", "std"),
             delta_sem=("delta_sem", "mean"), draws=("delta_loss", "size"))
        .reset_index()
    )  # fmt: skip


@dataclass(frozen=True)
class AblateConfig:
    """One ablation experiment: which heads (`selections`, see `head_sets_for`), how many (`fractions` of all
    heads, for score selections and the random baseline), how (`mode`), and where scores come from: a previous
    analyze run (`from_run`) or a scoring pass over the first `score_windows` windows (scores use no labels,
    so sharing windows with the loss evaluation leaks nothing)."""

    selections: tuple[str, ...] = tuple(SCORE_SELECTIONS)
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2)
    mode: str = "zero"
    n_random: int = 3
    seed: int = 0
    score_windows: int = 16
    from_run: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SinkscopeError(f"--mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not self.selections:
            raise SinkscopeError("--select needs at least one selection")
        for selection in self.selections:
            kind, _, value = selection.partition(":")
            if kind == "heads":
                parse_heads(value)
            elif kind == "class" and self.from_run is None:
                raise SinkscopeError(f"--select {selection} needs head classes from an analyze run: pass --from-run")
            elif selection not in (*SCORE_SELECTIONS, "random") and kind != "class":
                raise SinkscopeError(
                    f"--select {selection!r} is not one of {', '.join(SCORE_SELECTIONS)}, random, class:NAME, "
                    "heads:L.H,..."
                )
        for fraction in self.fractions:
            count_for_fraction(1, fraction)  # validates the range
        if self.n_random < 1:
            raise SinkscopeError(f"--random-draws {self.n_random} must be at least 1 (the baseline is required)")
        if self.score_windows < 1:
            raise SinkscopeError(f"--score-windows {self.score_windows} must be at least 1")


def run_ablation(
    lm: LoadedModel, windows, config: AblateConfig, progress: bool = False, clean: CleanPass | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Score heads (or read a run's scores), ablate every selected set and its random baseline.

    windows: a `sinkscope.corpus.windows.Windows` (or any iterable of LongTensor[B, T] batches with
    `identity()`); `clean`: its clean pass when already run (`ablate`). Returns `(curve, scores, meta)`: the `ablation_curve` table, the per-head scores used, and
    the metadata saved beside them (config, model and corpus identity, timings).
    """
    started = time.perf_counter()
    batches = list(windows)
    if config.from_run is not None:
        scores = scores_from_run(config.from_run)
    else:
        first = torch.cat(batches)[: config.score_windows]
        scores = head_scores(lm, first.split(max(1, batches[0].shape[0])), progress=progress)
    curve = ablation_curve(
        lm, batches, scores, config.fractions, config.selections, config.mode, config.n_random, config.seed,
        progress=progress, clean=clean,
    )
    meta = {
        "config": asdict(config),
        "model": lm.identity,
        "corpus": windows.identity() if hasattr(windows, "identity") else {},
        "timings": {"seconds": time.perf_counter() - started},
        "base_loss": float(curve["base_loss"].iloc[0]),
    }
    return curve, scores, meta


def check_out_dir(directory: str | Path, overwrite: bool) -> None:
    """Refuse an existing non-empty output directory unless `overwrite`, and never one that is not a sinkscope
    result (check before any model work)."""
    check_replaceable(directory, overwrite)


@no_mathtext()
def save_ablation(
    directory: str | Path, curve: pd.DataFrame, scores: pd.DataFrame, meta: dict, overwrite: bool = False
) -> Path:
    """Write `ablation.parquet`, `head_scores.parquet`, `ablation.json`, `figures/ablation_curve.png` and
    `report.html` (the curve, its per-selection summary and every ablated set) into `directory`, staged in a
    temporary sibling and renamed into place."""
    from sinkscope.report.plots import figure_png
    from sinkscope.report.result_files import save_result_files
    from sinkscope.report.switch_section import ablation_figure

    check_out_dir(directory, overwrite)
    png = figure_png(ablation_figure(curve))
    config = meta.get("config", {})
    settings = {
        "model": (meta.get("model") or {}).get("name", "unnamed model"),
        "corpus": (meta.get("corpus") or {}).get("source"),
        "windows": int(curve["n_windows"].iloc[0]),
        "mode": config.get("mode"),
        "head scores from": config.get("from_run") or f"a scoring pass over {config.get('score_windows')} windows",
        "base loss (nats/token)": f"{meta['base_loss']:.4f}",
        "seconds": f"{meta.get('timings', {}).get('seconds', float('nan')):.1f}",
    }
    sets = curve[["selection", "fraction", "seed", "n_heads", "heads", "delta_loss", "delta_sem"]]
    return save_result_files(
        directory, overwrite=overwrite,
        tables={"ablation.parquet": curve, "head_scores.parquet": scores}, meta_name="ablation.json", meta=meta,
        figures={"ablation_curve.png": ("Loss change against the fraction of heads switched off", png)},
        title=f"sinkscope ablate: {settings['model']}",
        intro="Loss change (nats/token) when the selected heads are switched off, against random head sets of the "
        "same size; definitions in docs/statistics.md.",
        settings=settings,
        shown=[("Per selection and fraction (random: mean and std over draws; ablation.parquet)", curve_summary(curve)),
               ("Every ablated set (ablation.parquet)", sets)],
    )  # fmt: skip
