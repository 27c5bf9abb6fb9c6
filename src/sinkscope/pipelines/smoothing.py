"""Oversmoothing of a real model on a corpus (SPEC §5), on its own.

The streaming state and the predictions are the statistic `statistics.smoothing_curves.SmoothingCurves`; this
module runs plain forward passes for it alone (`smoothing_analysis`). Inside an analysis it is one more statistic
of the same passes (`analyze(..., smoothing=True)`).
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
