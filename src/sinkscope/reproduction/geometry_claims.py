"""Section 1's claims, the geometry of BOS: `geometry` (BOS's cosines to the other tokens are non-positive in the
middle layers) and `representability` (the certificates H1, H2 and γ₂ of BOS beyond random context tokens'). Plain
numbers in, a `Verdict` out by the steps of `reproduction.verdicts`; the claims' words in
`reproduction.claim_texts`, the minima in `reproduction.minima`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from sinkscope.reproduction.minima import MIN_CONTROLS, MIN_LAYERS, MIN_WINDOWS
from sinkscope.reproduction.strata import middle_layers
from sinkscope.reproduction.verdicts import (
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    Verdict,
    judge,
    too_few,
)

GEOMETRY = {"positive_token_tol": 0.05, "failing_layer_tol": 0.2, "partly_layer_frac": 0.2, "middle_margin": 0.25}


def geometry_verdict(model: str, counts: Mapping[str, np.ndarray], tokens: int, seed: int = 0) -> Verdict:
    """Claim `geometry` from per-window counts (W, L) of tokens with cos ≤ 0: `z`, `h` (BOS against the `tokens`
    others, on the attention input and the residual stream) and `z_control`, `h_control` (a random context token
    against `tokens - 1` others). A layer holds when BOS's pooled fraction is ≥ 1 − `positive_token_tol` and
    the control's is not. Effect: the share of middle layers (depth `middle_margin` … 1 − `middle_margin`)
    holding, the smaller of z and h. Supported: ≥ 1 − `failing_layer_tol`; partly: z or h ≥ `partly_layer_frac`.
    Interval over windows: of the smaller share, and with `partly` of the larger one (the share that rule reads)."""
    units = {name: np.asarray(value, float) for name, value in counts.items()}
    reps = [rep for rep in ("z", "h") if rep in units]
    if not reps or units[reps[0]].ndim != 2:
        return Verdict("geometry", model, NOT_MEASURABLE, {}, GEOMETRY, "no per-window BOS cosines")

    def effects(u, th):
        L = u[reps[0]].shape[1]
        middle = middle_layers(L, th["middle_margin"], 1 - th["middle_margin"])
        out = {}
        for rep in reps:
            frac = u[rep].sum(0) / (len(u[rep]) * tokens)
            ctrl = u[f"{rep}_control"].sum(0) / (len(u[rep]) * (tokens - 1))
            holds = (frac >= 1 - th["positive_token_tol"]) & ~(ctrl >= 1 - th["positive_token_tol"])
            out |= {f"middle_layers_holding_{rep}": float(holds[middle].mean()),
                    f"all_layers_holding_{rep}": float(holds.mean()),
                    f"control_layers_holding_{rep}": float((ctrl[middle] >= 1 - th["positive_token_tol"]).mean()),
                    f"middle_mean_nonpos_frac_{rep}": float(frac[middle].mean())}  # fmt: skip
        shares = [out[f"middle_layers_holding_{rep}"] for rep in reps]
        return {"middle_layers_holding": min(shares), "middle_layers_holding_best": max(shares), **out}

    def decide(e, th):
        if e["middle_layers_holding"] >= 1 - th["failing_layer_tol"]:
            return SUPPORTED
        return PARTLY if e["middle_layers_holding_best"] >= th["partly_layer_frac"] else NOT_SUPPORTED

    return judge("geometry", model, units, effects, decide, GEOMETRY, over="windows", min_units=MIN_WINDOWS,
                 seed=seed, fractions=tuple(GEOMETRY), evidence={"representations": reps},
                 decides_on=("middle_layers_holding", "middle_layers_holding_best"),
                 interval_for={PARTLY: "middle_layers_holding_best"})  # fmt: skip


REPRESENTABILITY = {"failing_layer_tol": 0.2, "partly_layer_frac": 0.2, "beaten_control_frac": 0.95,
                    "partly_beaten_frac": 0.5}


def representability_verdict(model: str, layers: Sequence[Mapping], width: int, seed: int = 0,
                             n_layers: int | None = None) -> Verdict:  # fmt: skip
    """Claim `representability` from per-middle-layer certificates on raw inputs `{layer, n_contexts, h1, h2,
    gamma2_rel, control_gamma2_rel (list), n_controls}` (γ₂ / ‖z‖ of BOS and of each random context token).
    A layer is beyond its control when H1 and H2 hold and BOS's γ₂/‖z‖ exceeds at least `beaten_control_frac`
    of the first `n_controls` controls', and ahead of them when H1 and H2 hold and it exceeds more than
    `partly_beaten_frac` of them (BOS above the controls' median). Supported: ≥ 1 − `failing_layer_tol` of the
    layers are beyond; partly: ≥ `partly_layer_frac` of them are ahead; else not supported (a BOS below its
    controls reads `not supported` however many layers hold H1 and H2, which random tokens pass too).
    Interval over layers: of the layers beyond, and with `partly` of the layers ahead. Needs more tokens than the
    `width`, ≥ `MIN_CONTROLS` controls and ≥ `MIN_LAYERS` layers. The sensitivity halves the controls (the first half) and, given the depth `n_layers`, narrows the
    middle band (`middle_margin`); doubling the controls or widening the band needs another certificate pass."""
    layers = list(layers)
    if not layers:
        return Verdict("representability", model, NOT_MEASURABLE, {}, REPRESENTABILITY, "no certificates")
    n = min(int(row["n_contexts"]) for row in layers)
    controls = min(len(row["control_gamma2_rel"]) for row in layers)
    evidence = {"n_contexts": n, "width": width, "n_controls": controls}
    if n <= width:
        return Verdict("representability", model, NOT_MEASURABLE, evidence, REPRESENTABILITY, f"the certificate "
                       f"sample ({n} tokens) is not larger than the model width ({width}): any token would pass")  # fmt: skip
    if controls < MIN_CONTROLS:
        return too_few(
            "representability", model, "control tokens", controls, MIN_CONTROLS, evidence, REPRESENTABILITY
        )
    thresholds = REPRESENTABILITY | {"n_controls": float(controls)}
    fixed = {"n_controls×2": f"only {controls} random control tokens were drawn in the certificate pass"}
    if n_layers is not None:
        thresholds["middle_margin"] = 0.25
        fixed["middle_margin×0.5"] = ("the certificates ran on the middle band (depth ¼ … ¾) only: a wider band "
                                      "needs another certificate pass")  # fmt: skip
    units = {"holds": np.array([bool(row["h1"]) and bool(row["h2"]) for row in layers], float),
             "gamma": np.array([float(row["gamma2_rel"]) for row in layers]),
             "controls": np.array([np.asarray(row["control_gamma2_rel"], float)[:controls] for row in layers]),
             "layer": np.array([int(row["layer"]) for row in layers])}  # fmt: skip
    ranks = [1 + int(np.sum(c >= g)) for g, c in zip(units["gamma"], units["controls"])]

    def effects(u, th):
        band = np.ones(len(u["layer"]), bool)
        if "middle_margin" in th:
            band = np.isin(u["layer"], middle_layers(n_layers, th["middle_margin"], 1 - th["middle_margin"]))
        if band.sum() < MIN_LAYERS:
            return {"layers_beyond_control": math.nan}
        holds = u["holds"][band].astype(bool)
        beaten = (u["gamma"][band, None] > u["controls"][band, : int(th["n_controls"])]).mean(1)
        return {"layers_beyond_control": float(np.mean(holds & (beaten >= th["beaten_control_frac"]))),
                "layers_ahead_of_control": float(np.mean(holds & (beaten > th["partly_beaten_frac"]))),
                "layers_representable": float(holds.mean()), "mean_controls_beaten": float(beaten.mean())}  # fmt: skip

    def decide(e, th):
        if not math.isfinite(e["layers_beyond_control"]):
            return NOT_MEASURABLE
        if e["layers_beyond_control"] >= 1 - th["failing_layer_tol"]:
            return SUPPORTED
        return PARTLY if e["layers_ahead_of_control"] >= th["partly_layer_frac"] else NOT_SUPPORTED

    evidence |= {"layers": units["layer"].tolist(), "bos_rank": ranks, "gamma2_rel_bos": units["gamma"].tolist(),
                 "gamma2_rel_control_median": np.median(units["controls"], 1).tolist(),
                 "gamma2_rel_control_max": units["controls"].max(1).tolist()}  # fmt: skip
    return judge("representability", model, units, effects, decide, thresholds, over="middle layers",
                 min_units=MIN_LAYERS, fractions=(*REPRESENTABILITY, "middle_margin"), fixed=fixed, seed=seed,
                 evidence=evidence, decides_on=("layers_beyond_control", "layers_ahead_of_control"),
                 interval_for={PARTLY: "layers_ahead_of_control"})  # fmt: skip
