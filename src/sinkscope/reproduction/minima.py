"""The stated minimum of units each verdict needs (`reproduction.verdicts`: a verdict on fewer units is not
measurable), and the thresholds a measurement fixed.

Thresholds are ours (the paper states its findings in words: "non-positive", "rarely met", "favoured"); each
is reported beside the verdict with the verdicts at half and double it (fractions on the odds scale,
`reproduction.verdicts`; docs/reproduction.md lists them per claim). Thresholds fixed by a measurement (the δ
that picks an ablation's sink queries, the 10 % head fraction, the number of controls, the costs' T) cannot be
re-decided from the same numbers; `MEASURED_AT` names them and the docs say so.
"""

from __future__ import annotations

MIN_WINDOWS = 8  # windows a per-window verdict needs
MIN_DRAWS = 20  # random draws an ablation's control needs
MIN_HEADS = 20  # heads a per-head fraction needs
MIN_LAYERS = 4  # middle layers the certificates need
MIN_CONTROLS = 20  # random context tokens the certificates need
MIN_STRATA = 2  # layers holding both head classes a within-layer comparison needs
MIN_COST_WINDOWS = 4  # windows of exact cost programs (each layer × T is a convex program)

MEASURED_AT = {
    "sink_ablation": "δ = 0.1 (sink queries) and the 10 % head fraction: fixed by the ablation pass",
    "dormant_heads": "the 10 % head fraction: fixed by the ablation pass",
    "representability": "the number of controls and the certificate sample: fixed by the certificate pass",
    "cost_real_layers": "T = 8, 16, 32 and the layer stride: every T measured is reported",
    "weights_low_rank": "ε = 0.3 of the head class sink: fixed by the analysis (weights_bos_alignment too)",
}
