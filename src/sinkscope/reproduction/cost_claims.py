"""Section 4's cost claims: `cost_closed_forms` (nuclear cost ~ T^½ for the sink, ~ T for the diagonal, exact
programs matching the closed forms) and `cost_real_layers` (the sink cheaper on real layers). Plain numbers in, a
`Verdict` out by the steps of `reproduction.verdicts`; the claims' words in `reproduction.claim_texts`, the minima in
`reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from sinkscope.reproduction.minima import MIN_COST_WINDOWS
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, judge

COST_CLOSED = {"exponent_tol": 0.1, "exact_rel_tol": 1e-3}


def cost_closed_forms_verdict(model: str, sink_exponent: float, diagonal_exponent: float,
                              exact_rel_error: float) -> Verdict:  # fmt: skip
    """Claim `cost_closed_forms` (exact): fitted exponents of nuclear cost ~ T^a and the largest relative gap
    between the exact programs and the closed forms. Supported: exponents within `exponent_tol` of ½ and 1 and
    the programs within `exact_rel_tol`; partly: the exponents order as claimed; else not supported."""

    def effects(_u, _th):
        return {"sink_exponent": sink_exponent, "diagonal_exponent": diagonal_exponent,
                "exact_rel_error": exact_rel_error}  # fmt: skip

    def decide(e, th):
        if not (math.isfinite(sink_exponent) and math.isfinite(diagonal_exponent)):
            return NOT_MEASURABLE
        close = abs(sink_exponent - 0.5) <= th["exponent_tol"] and abs(diagonal_exponent - 1) <= th["exponent_tol"]
        exact = math.isfinite(exact_rel_error) and exact_rel_error <= th["exact_rel_tol"]
        return SUPPORTED if close and exact else PARTLY if sink_exponent < diagonal_exponent else NOT_SUPPORTED

    return judge("cost_closed_forms", model, {}, effects, decide, COST_CLOSED,
                 over="closed forms and exact programs: no sampling interval",
                 decides_on=("sink_exponent", "diagonal_exponent", "exact_rel_error"))  # fmt: skip


COST_REAL = {"losing_pair_tol": 0.2, "partly_frac": 0.5}


LAYER_STRIDE_REASON = ("layers {layers} of {depth} were solved (one in {stride}): an exact program at T = 32 "
                       "takes ~30 s on a loaded CPU, so every layer of every window at every T would take hours")  # fmt: skip


def cost_real_verdict(model: str, wins: np.ndarray, Ts: Sequence[int], extra: dict | None = None, seed: int = 0,
                      layers: Sequence[int] | None = None, depth: int | None = None) -> Verdict:  # fmt: skip
    """Claim `cost_real_layers` from per-window shares (W, len(Ts)) of the layers where the sink is cheaper
    (feasible and cheaper, or the diagonal infeasible) at each context length T. Effect: the mean share over
    windows and the T in `T_min` … `T_max` (all measured T). Supported: ≥ 1 − `losing_pair_tol`, and at every
    such T; partly: ≥ `partly_frac`. Interval over windows (at least `MIN_COST_WINDOWS` = 8). The sensitivity
    narrows the range of T (doubling `T_min`, halving `T_max`); widening it needs exact programs at T not solved
    (a T = 64 program takes minutes). `layers` (of `depth`): the layers solved; fewer than every layer is
    recorded as not varied, with the reason."""
    wins, Ts = np.asarray(wins, float), np.asarray(Ts, float)

    def effects(u, th):
        chosen = (Ts >= th["T_min"]) & (Ts <= th["T_max"])
        if not chosen.any():
            return {"sink_cheaper_frac": math.nan}
        per_t = u["wins"][:, chosen].mean(0)
        return {"sink_cheaper_frac": float(per_t.mean()), "worst_T_frac": float(per_t.min()),
                **{f"sink_cheaper_frac_T{T:g}": float(x) for T, x in zip(Ts[chosen], per_t)}}  # fmt: skip

    def decide(e, th):
        if not math.isfinite(e["sink_cheaper_frac"]):
            return NOT_MEASURABLE
        if e["sink_cheaper_frac"] >= 1 - th["losing_pair_tol"] and e["worst_T_frac"] >= 1 - th["losing_pair_tol"]:
            return SUPPORTED
        return PARTLY if e["sink_cheaper_frac"] >= th["partly_frac"] else NOT_SUPPORTED

    if wins.ndim != 2 or wins.size == 0:
        return Verdict("cost_real_layers", model, NOT_MEASURABLE, {}, COST_REAL, "no feasible pattern solved")
    thresholds = COST_REAL | {"T_min": float(Ts.min()), "T_max": float(Ts.max())}
    unsolved = "exact programs were solved at T = " + ", ".join(f"{T:g}" for T in Ts) + " only"
    fixed = {"T_min×0.5": unsolved, "T_max×2": unsolved}
    if layers is None or depth is None:
        fixed["layer_stride"] = "the layers solved are not known here: the stride is fixed by the cost pass"
    elif len(layers) < depth:
        stride = int(layers[1] - layers[0]) if len(layers) > 1 else depth
        fixed["layer_stride"] = LAYER_STRIDE_REASON.format(layers=", ".join(str(int(x)) for x in layers), depth=depth,
                                                           stride=stride)  # fmt: skip
    return judge("cost_real_layers", model, {"wins": wins}, effects, decide, thresholds, over="windows",
                 min_units=MIN_COST_WINDOWS, seed=seed, fractions=tuple(COST_REAL), fixed=fixed,
                 evidence={"Ts": Ts.tolist(), **(extra or {})},
                 decides_on=("sink_cheaper_frac", "worst_T_frac"))  # fmt: skip
