"""Section 6's claim `gu_sink_rate` (Gu et al.): the rate of heads with sink score above ε on natural, random and
repeated tokens. Plain numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the claim's words in
`reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import numpy as np

from sinkscope.reproduction.minima import MIN_WINDOWS
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, judge

GU = {"epsilon": 0.3, "present_rate": 0.2}


def gu_sink_rate_verdict(model: str, scores: dict[str, np.ndarray], seed: int = 0) -> Verdict:
    """Claim `gu_sink_rate` from per-window sink scores α^w (W, L, H) on `natural`, `random` and `repeat`
    tokens: the rate mean [α^w > ε] per corpus. Present when the rate ≥ `present_rate`; supported: present on
    all three; partly: on natural text; else not supported. Interval over windows (each corpus its own): of the
    smallest rate, and with `partly` of the natural text's (the rate that rule reads)."""
    needed = ("natural", "random", "repeat")
    if any(name not in scores or np.asarray(scores[name]).size == 0 for name in needed):
        return Verdict("gu_sink_rate", model, NOT_MEASURABLE, {}, GU, "a corpus was not analysed")

    def effects(u, th):
        rates = {f"sink_rate_{name}": float((np.asarray(u[name]) > th["epsilon"]).mean()) for name in needed}
        return {"min_rate": min(rates.values()), **rates}

    def decide(e, th):
        present = {name: e[f"sink_rate_{name}"] >= th["present_rate"] for name in needed}
        return SUPPORTED if all(present.values()) else PARTLY if present["natural"] else NOT_SUPPORTED

    return judge("gu_sink_rate", model, {name: np.asarray(scores[name], float) for name in needed}, effects, decide,
                 GU, over="windows", min_units=MIN_WINDOWS, seed=seed, fractions=("present_rate",),
                 decides_on=tuple(f"sink_rate_{name}" for name in needed),
                 interval_for={PARTLY: "sink_rate_natural"})  # fmt: skip
