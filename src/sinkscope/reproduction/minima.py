"""The stated minimum of units each verdict needs (`reproduction.verdicts`: a verdict on fewer units is not
measurable), and the thresholds a measurement fixed.

Thresholds are ours (the paper states its findings in words: "non-positive", "rarely met", "favoured"); each
is reported beside the verdict with the verdicts at half and double it (fractions on the odds scale,
`reproduction.verdicts`; docs/reproduction.md lists them per claim). Thresholds fixed by a measurement (the δ
that picks an ablation's sink queries, the 10 % head fraction, more controls or T than were measured) cannot be
re-decided from the same numbers; each claim names them in its sensitivity as not varied, with the reason.
"""

from __future__ import annotations

MIN_WINDOWS = 8  # windows a per-window verdict needs
MIN_DRAWS = 20  # random draws an ablation's control needs
MIN_RUNS = 6  # trained lab runs (settings × seeds) a lab verdict needs
MIN_HEADS = 20  # heads a per-head fraction needs
MIN_LAYERS = 4  # middle layers the certificates need
MIN_CONTROLS = 20  # random context tokens the certificates need
MIN_STRATA = 2  # layers holding both head classes a within-layer comparison needs
MIN_COST_WINDOWS = 8  # windows of exact cost programs (each layer × T is a convex program), as any per-window verdict

