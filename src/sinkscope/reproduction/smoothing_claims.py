"""Section 2's claim `oversmoothing`: the heads' observed rise of the mean pairwise cosine, with the
measured-moment predictor beside it. Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the
claim's words in `reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MIN_HEADS
from sinkscope.reproduction.verdicts import Verdict, graded, judge, too_few

OVERSMOOTHING = {"counteract_tol": 0.2, "partly_frac": 0.5, "rise_min": 0.001}


def oversmoothing_verdict(model: str, observed_rise: Sequence[float], dense_more: Sequence[bool],
                          layers: Sequence[int], seed: int = 0) -> Verdict:  # fmt: skip
    """Claim `oversmoothing` from per-head observed rises of the mean pairwise cosine (λ: 0 → 1). A head
    oversmooths when its rise exceeds `rise_min`. Supported: ≥ 1 − `counteract_tol` of heads ("rarely" = at most
    one head in five counteracts); partly: ≥ `partly_frac`. The measured-moment predictor (2b + c > 0) is a
    consistency check beside it, never deciding. Interval over heads, resampled within layers."""
    units = {"rise": np.asarray(observed_rise, float), "dense": np.asarray(dense_more, float)}
    if units["rise"].size < MIN_HEADS:
        return too_few(
            "oversmoothing", model, "heads", int(units["rise"].size), MIN_HEADS, thresholds=OVERSMOOTHING
        )

    def effects(u, th):
        rises = u["rise"] > th["rise_min"]
        return {"frac_observed_rise": float(rises.mean()), "frac_dense_more_measured": float(u["dense"].mean()),
                "consistency_predictor_vs_observed": float((u["dense"].astype(bool) == (u["rise"] > 0)).mean())}  # fmt: skip

    def decide(e, th):
        return graded(e["frac_observed_rise"], 1 - th["counteract_tol"], th["partly_frac"])

    return judge("oversmoothing", model, units, effects, decide, OVERSMOOTHING, over="heads", min_units=MIN_HEADS,
                 strata=np.asarray(layers), seed=seed, fractions=("counteract_tol", "partly_frac"),
                 evidence={"n_heads": int(units["rise"].size)}, decides_on=("frac_observed_rise",))  # fmt: skip
