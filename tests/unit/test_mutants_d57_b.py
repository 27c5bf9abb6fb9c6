"""Draw 57's survivors in `pipelines/eviction` and `statistics/massive_activations` (issue 50, item 1)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
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


def test_paired_difference_of_two_windows_has_its_interval_by_hand() -> None:
    """Δ per window 1 and 3: mean 2, sd √2, half-width 1.96 · √2 / √2 = Z95."""
    losses = pd.DataFrame({"policy": ["sink", "sink", "full", "full"], "k": [4, 4, 0, 0], "window": [0, 1, 0, 1],
                           "loss": [3.0, 5.0, 2.0, 2.0]})  # fmt: skip
    out = eviction.paired(losses, "sink", 4, ("full", 0))
    assert out == pytest.approx({"mean": 2.0, "lo": 2.0 - 1.959963984540054, "hi": 2.0 + 1.959963984540054})


def test_a_loaded_maximum_stays_on_its_device() -> None:
    """`load` (a stored state read back on the CPU) moves both tensors to the state's device (meta here)."""
    state = ArgMax((2,), device="meta")
    state.load({"value": torch.tensor([1.0, 2.0]), "position": torch.tensor([3, 4])})
    assert state.value.device.type == "meta" and state.value.dtype == torch.float64
    assert state.position.device.type == "meta" and state.position.dtype == torch.long
