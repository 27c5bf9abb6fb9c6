"""How long an analysis will take, said once, early (issue 32, item 10): a very long `--seq-len` makes each batch
minutes long, so the estimate comes from the first decoder layer of the first batch, not from a finished batch.

estimate per batch = (time of layer 0 on the first batch) × (number of layers); for the whole run, × the number of
batches when it is known (`--max-windows`, or a corpus counted up to it). Said only when it comes to a minute or
more, so a quick run prints nothing more.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from torch import nn
from tqdm.auto import tqdm

WORTH_SAYING_S = 60.0  # an estimate below this is not printed


def duration(seconds: float) -> str:
    """'45 s', '12 min', '3.2 h'."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


@contextmanager
def time_estimate(layers: Sequence[nn.Module], batches: int | None, enabled: bool = True) -> Iterator[None]:
    """While entered, the first forward pass through `layers[0]` is timed and, when the estimate (module doc) is a
    minute or more, one line says it on stderr: per batch, and for all `batches` when known."""
    if not enabled or not layers:
        yield
        return
    started: list[float] = []

    def before(module, args) -> None:
        started.append(time.perf_counter())

    def after(module, args, output) -> None:
        layer = time.perf_counter() - started[0]
        for handle in handles:
            handle.remove()
        per_batch = layer * len(layers)
        total = per_batch * batches if batches else per_batch
        if total < WORTH_SAYING_S:
            return
        whole = f"; all {batches} batches: about {duration(total)}" if batches and batches > 1 else \
            "" if batches else " (the number of batches is known only at the corpus's end)"  # fmt: skip
        tqdm.write(f"sinkscope analyze: layer 1 of {len(layers)} took {layer:.1f} s on the first batch: about "
                   f"{duration(per_batch)} per batch{whole}", file=sys.stderr)  # fmt: skip (tqdm: under the bar)

    handles = [layers[0].register_forward_pre_hook(before), layers[0].register_forward_hook(after)]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
