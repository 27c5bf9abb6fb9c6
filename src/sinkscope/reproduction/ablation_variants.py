"""The ablations' own thresholds in the sensitivity step: the head fraction (10 % of all heads) of `sink_ablation`
and `dormant_heads`, and the sink-query δ of `sink_ablation` (a head is zeroed on the queries with A[t,0] ≥ 1 − δ),
each at × ½ and × 2 (`VARIANT_SCALES`: fractions 5 % and 20 %, δ = 0.05 and 0.2).

Another fraction or δ is another zeroed set, so each variant is its own set of loss passes over the same windows:
the chosen set once and `draws` draws of each of its controls, built as the verdict's own controls are
(`reproduction.sink_query`: the same heads on as many non-sink queries, matched random head-and-query sets;
`reproduction.matched_heads` and `pipelines.head_selection.random_heads`: layer-matched and unmatched random head
sets of the variant's size). `draws` is smaller than the verdict's 20 (5 in `reproduce`: 6 variants ×
(1 + 2 × 5) = 66 loss passes instead of 246), so a variant's control mean is noisier than the verdict's; the
sensitivity step reads only its point ratio.

Arrays are stored flat, named `CLAIM__THRESHOLD__SCALE__NAME` (`variant_arrays` reads them back per claim).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
    from torch import Tensor

    from sinkscope.models.load import LoadedModel

VARIANT_SCALES = (0.5, 2.0)  # the sensitivity step's scales (`verdicts.SCALES`)
Variants = dict[tuple[str, float], dict[str, np.ndarray]]  # (threshold, scale) -> {array name: array}


def _name(claim: str, threshold: str, scale: float, array: str) -> str:
    return f"{claim}__{threshold}__{scale:g}__{array}"


def variant_arrays(arrays: Mapping[str, np.ndarray], claim: str) -> Variants:
    """`{(threshold, scale): {name: array}}` of one claim from the section's flat arrays (empty when none)."""
    out: Variants = {}
    for key, value in arrays.items():
        parts = key.split("__")
        if len(parts) == 4 and parts[0] == claim:
            out.setdefault((parts[1], float(parts[2])), {})[parts[3]] = np.asarray(value)
    return out


def ablation_variants(lm: LoadedModel, batches: Sequence[Tensor], scores: pd.DataFrame, fraction: float,
                      delta: float, draws: int, seed: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Per-window Δloss (nats/token) of every variant (module docstring), flat-named: `sink_ablation` at head
    fraction × scale (δ fixed) and at δ × scale (fraction fixed): `selected` (W,), `same_heads`, `random` (W,
    draws), `cells_selected` (W,) the zeroed (head, query) pairs; `dormant_heads` at head fraction × scale: `selected` (W,), `layer_matched`, `random` (W, draws); and
    each variant's `n_heads`."""
    from sinkscope.pipelines.ablate import ablate
    from sinkscope.pipelines.head_selection import count_for_fraction, heads_by_score, random_heads
    from sinkscope.pipelines.loss_passes import clean_pass
    from sinkscope.pipelines.query_ablation import sink_columns
    from sinkscope.reproduction.matched_heads import layer_matched_sets
    from sinkscope.reproduction.sink_query import sink_query_losses

    n_layers, n_heads = len(lm.layers), lm.layout.n_heads
    total = n_layers * n_heads
    out: dict[str, np.ndarray] = {}
    clean = clean_pass(lm, batches)  # the clean pass and the sink queries' attention, once for every variant
    columns = [sink_columns(lm, ids) for ids in batches]

    def sink(threshold: str, scale: float, heads: list, at_delta: float) -> None:
        arrays = sink_query_losses(lm, batches, heads, draws, seed, delta=at_delta, clean=clean, columns=columns)
        for name in ("selected", "same_heads", "random", "cells_selected"):
            out[_name("sink_ablation", threshold, scale, name)] = arrays[name]
        out[_name("sink_ablation", threshold, scale, "n_heads")] = np.array(len(heads))

    for scale in VARIANT_SCALES:
        count = count_for_fraction(total, fraction * scale)
        sink("head_fraction", scale, heads_by_score(scores, "highest-hard-sink", count), delta)
    heads = heads_by_score(scores, "highest-hard-sink", count_for_fraction(total, fraction))
    for scale in VARIANT_SCALES:
        sink("sink_query_delta", scale, heads, delta * scale)

    sets, dormant = {}, {}
    for scale in VARIANT_SCALES:
        count = count_for_fraction(total, fraction * scale)
        dormant[scale] = heads_by_score(scores, "lowest-ahon-ln", count)
        sets[f"{scale:g} selected"] = dormant[scale]
        for draw in range(draws):
            sets[f"{scale:g} random {draw}"] = random_heads(n_layers, n_heads, count, seed + draw)
        for draw, matched in enumerate(layer_matched_sets(dormant[scale], n_heads, draws, seed)):
            sets[f"{scale:g} layer_matched {draw}"] = matched
    frame = ablate(lm, batches, sets, mode="zero", clean=clean).set_index("set")["window_delta"]
    for scale in VARIANT_SCALES:
        out[_name("dormant_heads", "head_fraction", scale, "selected")] = np.asarray(frame[f"{scale:g} selected"])
        for name in ("random", "layer_matched"):
            per_draw = [np.asarray(frame[f"{scale:g} {name} {draw}"], float) for draw in range(draws)]
            out[_name("dormant_heads", "head_fraction", scale, name)] = np.stack(per_draw, 1)
        out[_name("dormant_heads", "head_fraction", scale, "n_heads")] = np.array(len(dormant[scale]))
    return out
