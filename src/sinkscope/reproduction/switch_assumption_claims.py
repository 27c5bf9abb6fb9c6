"""The claim `switch_assumptions`: the switch theorem's assumption, tested where it can fail.

The theorem's switch ⇒ sink needs each head's context values v_1..v_{T−1} linearly independent: then
`Σ_{j≥1} A[t,j] v_j = 0` forces every context weight to 0 (docs/theory/geometry.md, The hard switch). Per
(window, layer, KV head) the section stores the singular values of those T − 1 vectors in the head's value space
(dimension dh, `functional.switch.context_value_spectrum`); they are independent when all T − 1 lie above
`rank_rtol` × the largest. The test can fail wherever T − 1 ≤ dh (a value map may collapse contexts: repeated
tokens, a low-rank W_V); where T − 1 > dh the contexts are dependent by the dimension count alone, whatever the
model does, so the data cannot decide and the claim is not measurable there. The input-space quantities (rank of
z_1..z_{T−1} and BOS's distance from their span) and the per-head switch ⇒ sink where the values are and are not
independent are reported beside it, never deciding.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sinkscope.reproduction.minima import MIN_WINDOWS
from sinkscope.reproduction.switch_claims import SWITCH
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, Verdict, graded, judge

ASSUMPTIONS = {"rank_rtol": 1e-4, "miss_tol": 0.1, "partly_min": 0.5}
MIN_DISTANCE = 0.05  # reported: BOS's input counts as off the contexts' span at |z_0 − P z_0| / |z_0| ≥ this


def independent(spectrum: np.ndarray, n_contexts: int, rtol: float) -> np.ndarray:
    """Whether each cell's T − 1 = `n_contexts` context values are independent: (..., k) singular values (largest
    first) → (...) booleans, all `n_contexts` of them above `rtol` × the largest (never where k < n_contexts)."""
    spectrum = np.asarray(spectrum, float)
    if spectrum.shape[-1] < n_contexts:
        return np.zeros(spectrum.shape[:-1], bool)
    above = (spectrum > rtol * spectrum[..., :1]) & (spectrum[..., :1] > 0)
    return above.sum(-1) >= n_contexts


def _switch_implies_sink(heads: np.ndarray, mask: np.ndarray, min_queries: float) -> float:
    """Mean over heads with ≥ `min_queries` switched-off queries in the windows of `mask` (W, L, H) of P(sink | off)
    there; `heads` (W, L, H, 3) counts of off ∧ sink, off, sink."""
    both, off = ((heads[..., i] * mask).sum(0) for i in (0, 1))
    use = off >= min_queries
    return float(np.mean(both[use] / off[use])) if use.any() else math.nan


def assumptions_verdict(model: str, arrays: dict[str, np.ndarray], seed: int = 0) -> Verdict:
    """`switch_assumptions` over windows. Effect: the share of (window, layer, KV head) cells whose context values
    are independent (`independent` at `rank_rtol`, varied × ½, × 2). Supported: ≥ 1 − `miss_tol`; partly: ≥
    `partly_min`; not supported below; not measurable where T − 1 > dh (dependent by dimension count)."""
    claim, thresholds = "switch_assumptions", dict(ASSUMPTIONS)
    if "value_sv" not in arrays:
        return Verdict(claim, model, NOT_MEASURABLE, {}, thresholds, "no value-space spectra: the switch-assumptions "
                       "section is from before the value-space test; recompute it")  # fmt: skip
    n, dh = int(arrays["n_contexts"]), int(arrays["head_dim"])
    extra = {"n_contexts": n, "head_dim": dh, "width": int(arrays["width"]), "min_distance": MIN_DISTANCE,
             "n_layers": int(np.shape(arrays["rank"])[1]), "kv_heads": int(np.shape(arrays["value_sv"])[2])}  # fmt: skip
    if n > dh:
        return Verdict(claim, model, NOT_MEASURABLE, extra, thresholds, f"T − 1 = {n} context values in a value space "
                       f"of {dh} dimensions are dependent by the dimension count alone: the data cannot decide (use "
                       f"--seq-len ≤ {dh + 1})")  # fmt: skip
    units = {"value_sv": np.asarray(arrays["value_sv"], float), "heads": np.asarray(arrays["heads"], float),
             "z_holds": (np.asarray(arrays["rank"]) == min(n, int(arrays["width"])))
             & (np.asarray(arrays["distance"], float) >= MIN_DISTANCE)}  # fmt: skip

    def effects(u, th):
        held = independent(u["value_sv"], n, th["rank_rtol"])  # (W, L, KV)
        group = u["heads"].shape[2] // held.shape[2]
        per_head = np.repeat(held, group, axis=2)  # (W, L, H): a query head reads its KV head's values
        return {"independent_share": float(held.mean()), "input_space_share": float(u["z_holds"].mean()),
                "switch_implies_sink_where_independent": _switch_implies_sink(u["heads"], per_head,
                                                                              SWITCH["min_head_queries"]),
                "switch_implies_sink_where_dependent": _switch_implies_sink(u["heads"], ~per_head,
                                                                            SWITCH["min_head_queries"])}  # fmt: skip

    def decide(e, th):
        return graded(e["independent_share"], 1 - th["miss_tol"], th["partly_min"])

    return judge(claim, model, units, effects, decide, thresholds, over="windows", min_units=MIN_WINDOWS,
                 fractions=("miss_tol", "partly_min"), evidence=extra, seed=seed)  # fmt: skip


def assumptions_table(arrays: dict[str, np.ndarray]) -> pd.DataFrame:
    """Per layer: the share of windows where the input-space quantities hold (rank of z_1..z_{T−1} full and BOS ≥
    `MIN_DISTANCE` off their span), their median rank and span distance, the share of (window, KV head) cells with
    independent context values and their median value rank (at `rank_rtol`), and switched-off queries and hard
    sinks among them at the section's τ, δ."""
    n = int(arrays["n_contexts"])
    holds = (np.asarray(arrays["rank"]) == min(n, int(arrays["width"]))) & (np.asarray(arrays["distance"])
                                                                            >= MIN_DISTANCE)  # fmt: skip
    frame = pd.DataFrame({"layer": np.arange(holds.shape[1]), "holds_frac": holds.mean(0),
                          "rank_median": np.median(arrays["rank"], 0),
                          "span_distance_median": np.median(arrays["distance"], 0),
                          "span_distance_min": np.min(arrays["distance"], 0)})  # fmt: skip
    if "value_sv" in arrays:
        spectrum, rtol = np.asarray(arrays["value_sv"], float), ASSUMPTIONS["rank_rtol"]
        ranks = ((spectrum > rtol * spectrum[..., :1]) & (spectrum[..., :1] > 0)).sum(-1)  # (W, L, KV)
        heads = np.asarray(arrays["heads"], float)
        frame = frame.assign(value_independent_frac=independent(spectrum, n, rtol).mean((0, 2)),
                             value_rank_median=np.median(ranks, (0, 2)),
                             switched_off=heads[..., 1].sum((0, 2)), switched_off_sink=heads[..., 0].sum((0, 2)))
    return frame
