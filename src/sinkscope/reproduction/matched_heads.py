"""The layer-matched control of a head ablation: random head sets with the chosen set's number of heads in every
layer, so that a comparison with them is made within layers (depth cannot stand in for the head's kind).

When the chosen heads crowd into a few layers (the dormant heads of lowest AHON-LN, say, into late layers where
zeroing any head costs little), random sets over all layers measure the layers, not the heads. A layer-matched
draw takes, in each layer l, c_l heads uniformly without replacement from all `n_heads` heads of layer l (the
chosen ones included), where c_l is the chosen set's count in l.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from torch import Tensor

    from sinkscope.models.load import LoadedModel
    from sinkscope.pipelines.loss_passes import CleanPass

LAYER_MATCHED = "layer-matched random"  # the selection label of the control's rows in ablation.parquet


def layer_matched_sets(heads: Sequence[tuple[int, int]], n_heads: int, n_draws: int, seed: int
                       ) -> list[list[tuple[int, int]]]:  # fmt: skip
    """`n_draws` random head sets, each with the per-layer counts of `heads` (module docstring), seeded."""
    counts = sorted(Counter(layer for layer, _ in heads).items())
    rng = np.random.default_rng(seed)
    return [sorted((layer, int(head)) for layer, count in counts
                   for head in rng.choice(n_heads, size=count, replace=False)) for _ in range(n_draws)]  # fmt: skip


def layer_matched_ablation(lm: LoadedModel, batches: Sequence[Tensor], curve: pd.DataFrame, selection: str,
                           n_draws: int, seed: int, clean: CleanPass | None = None) -> pd.DataFrame:  # fmt: skip
    """Rows of `pipelines.ablate.ablate` (mode `zero`) for `n_draws` layer-matched draws of the set `selection`
    in `curve` (an `ablation_curve` table), labelled selection `LAYER_MATCHED`, the chosen set's fraction, seed =
    draw; `clean`: the batches' clean pass when already run."""
    from sinkscope.pipelines.ablate import ablate
    from sinkscope.pipelines.head_selection import parse_heads

    chosen = curve[curve["selection"] == selection].iloc[0]
    draws = layer_matched_sets(parse_heads(chosen["heads"]), lm.layout.n_heads, n_draws, seed)
    sets = {f"{LAYER_MATCHED} {k}": heads for k, heads in enumerate(draws)}
    frame = ablate(lm, batches, sets, mode="zero", clean=clean)
    return frame.assign(selection=LAYER_MATCHED, fraction=chosen["fraction"], seed=range(len(frame)))
