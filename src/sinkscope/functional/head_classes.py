"""The head class of SPEC §2: one classifier with named thresholds, for analyze's heads and the gBB lab's.

A head is classified from its mean attention masses — on key 0 (the sink score), on the query itself (diagonal),
on the previous token — its normalised row entropy and, where the attention can attend to nothing, its mean row
mass and output gate, or, in a model with a learned sink (gpt-oss's `s_aux` column), its mean mass on that column.
First match wins:

    null (row mass < switched_off), gated (gate < switched_off),
    learned sink (learned sink > t_learned_sink and ≥ sink), sink (sink > t_sink · row mass),
    diagonal (diag > t_diagonal · row mass), previous-token (prev > t_previous · row mass),
    dense (entropy > t_dense), else mixed.

With `inclusive` the four `>` are `≥`. Analyze passes the SPEC §2 scores over all queries of a softmax head (row
mass 1, no gate: the first two classes never occur) with `HeadThresholds(sink=ε)`; the lab passes the masses on
non-trigger queries (`sinkscope.synthetic.summary.LAB_THRESHOLDS`). A learned-sink head is one whose queries send
more than `t_learned_sink` of their mass to the learned sink column, and more there than to BOS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class HeadThresholds:
    """Thresholds of `classify_head`; the defaults are analyze's (docs/statistics.md)."""

    sink: float = 0.3  # ε: the sink score above which a head is a sink head (Gu et al. 2025)
    diagonal: float = 0.5  # mass on the query itself
    previous: float = 0.5  # mass on the previous token (the lab: on t-k, the copy offset)
    dense: float = 0.7  # normalised row entropy (1 = uniform over the visible keys)
    switched_off: float = 0.5  # a row mass or output gate below this switches the head off (null, gated)
    learned_sink: float = 0.3  # mean mass on a learned sink column (gpt-oss) above which the head is a learned sink
    inclusive: bool = False  # a mass or entropy equal to its threshold reaches it (≥) rather than not (>)


def classify_head(
    sink: float,
    diag: float,
    prev: float,
    entropy: float,
    row_mass: float = 1.0,
    gate: float = math.nan,
    thresholds: HeadThresholds = HeadThresholds(),
    learned_sink: float = 0.0,
) -> str:
    """The head's class (module doc): null, gated, learned sink, sink, diagonal, previous-token, dense or mixed.

    `sink`, `diag`, `prev`: the head's mean attention on key 0, on the query, on the previous token; `entropy`
    its mean normalised row entropy (NaN: never dense); `row_mass` its mean row sum (1 for softmax); `gate` its
    mean output gate (NaN without gating); `learned_sink` its mean mass on a learned sink column (0 without
    one). Masses are compared with their threshold times `row_mass`.
    """
    th = thresholds
    if row_mass < th.switched_off:
        return "null"
    if math.isfinite(gate) and gate < th.switched_off:
        return "gated"

    def reaches(value: float, threshold: float) -> bool:
        return value >= threshold if th.inclusive else value > threshold

    if reaches(learned_sink, th.learned_sink) and learned_sink >= sink:
        return "learned sink"
    for name, mass, threshold in (("sink", sink, th.sink), ("diagonal", diag, th.diagonal),
                                  ("previous-token", prev, th.previous)):  # fmt: skip
        if reaches(mass, threshold * row_mass):
            return name
    return "dense" if reaches(entropy, th.dense) else "mixed"
