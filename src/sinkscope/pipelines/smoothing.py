"""Oversmoothing of a real model on a corpus (SPEC §5), on its own or merged into an analysis run.

The streaming state and the predictions are the statistic `statistics.smoothing_curves.SmoothingCurves`; this
module runs the forward passes for it alone (`smoothing_analysis`) and merges its tables into a `Run`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from sinkscope.capture.feed import Feed
from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel
from sinkscope.statistics.smoothing_curves import LAMBDAS, SmoothingCurves, SmoothingTables


@torch.no_grad()
def smoothing_analysis(
    lm: LoadedModel,
    windows: Iterable[Tensor],
    *,
    layers: Sequence[int] | None = None,
    lambdas: Sequence[float] = LAMBDAS,
) -> SmoothingTables:
    """Per-head and per-layer SPEC §5 oversmoothing tables of `lm` on `windows` (LongTensor[B, T] batches).

    One forward pass of the base model per batch; memory is constant in the number of windows.
    """
    curves: SmoothingCurves | None = None
    feed: Feed | None = None
    hooks = contextlib.ExitStack()
    with hooks:
        for batch in windows:
            if feed is None:  # T is known from the first batch
                curves = SmoothingCurves(lm, batch.shape[1], layers, lambdas)
                feed = Feed([curves], batch.shape[1])
                hooks.enter_context(feed.hooks(lm, curves.layers))
            feed.begin_batch(batch)
            lm.base(input_ids=batch.to(lm.device), use_cache=False)
            feed.end_batch(len(batch))
    if curves is None:
        raise SinkscopeError("no window to measure smoothing on: the corpus gave no batch")
    return curves.tables()


def add_smoothing(run, lm: LoadedModel, windows: Iterable[Tensor]) -> None:
    """Run `smoothing_analysis` and merge it into an analysis `Run` (SPEC §8): per-head columns into
    `run.heads` on (layer, head), per-layer columns into `run.layers`, the λ-curves as the extra table
    `smoothing_curves`, and the model-level numbers into `run.meta["smoothing"]`."""
    merge_smoothing(run, smoothing_analysis(lm, windows))


def merge_smoothing(run, tables: SmoothingTables) -> None:
    """Merge smoothing tables into an analysis `Run` (see `add_smoothing`)."""
    from sinkscope.report.smoothing_section import smoothing_summary

    run.heads = run.heads.merge(tables.heads, on=["layer", "head"], how="left")
    run.layers = run.layers.merge(tables.layers, on="layer", how="left")
    run.extra["smoothing_curves"] = tables.curves
    run.meta["smoothing"] = {"lambdas": list(LAMBDAS), **smoothing_summary(tables.heads)}
