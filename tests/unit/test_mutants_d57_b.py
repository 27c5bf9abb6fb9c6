"""Draw 57's survivors in `pipelines/eviction` and `statistics/massive_activations` (issue 50, item 1)."""

from __future__ import annotations

import pytest
import tqdm.auto

from sinkscope.pipelines import eviction
from sinkscope.statistics.massive_activations import ArgMax


class _Stop(Exception):
    pass


def test_eviction_progress_counts_batches(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bar reads "evict … batch/s": its description and unit, shown only when asked for."""
    seen = []

    def bar(iterable, **kw):
        seen.append(kw)
        raise _Stop

    monkeypatch.setattr(tqdm.auto, "tqdm", bar)
    for progress in (True, False):
        with pytest.raises(_Stop):
            eviction.evaluate(None, [], None, progress=progress)
    assert seen == [{"desc": "evict", "unit": "batch", "disable": False}, {"desc": "evict", "unit": "batch",
                                                                         "disable": True}]  # fmt: skip


def test_a_fresh_maximum_lives_on_the_same_device() -> None:
    """`fresh()` (an empty state for the next batch or worker) keeps the device: the meta device stands in for an
    accelerator."""
    state = ArgMax((2, 3), device="meta").fresh()
    assert state.value.device.type == "meta" and state.position.device.type == "meta"
    assert tuple(state.value.shape) == (2, 3)
