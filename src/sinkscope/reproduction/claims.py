"""The paper's claims as pure verdict functions: numbers in, a `Verdict` (verdict, evidence, thresholds) out.

Each function states its claim in `CLAIMS`, takes plain numbers (no model, no I/O) and applies documented
thresholds, which are ours: the paper states its findings in words ("non-positive", "rarely", "favoured"), so
each threshold turns a word into a number and is reported beside the verdict (docs/reproduction.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

SUPPORTED, PARTLY, NOT_SUPPORTED, NOT_MEASURABLE = "supported", "partly", "not supported", "not measurable here"
VERDICTS = (SUPPORTED, PARTLY, NOT_SUPPORTED, NOT_MEASURABLE)

# claim id → (section number, the claim in words)
CLAIMS = {
    "geometry": (1, "In middle layers the cosine between the BOS attention input and every other token's is "
                    "non-positive (which lets any head form a sink)."),
    "representability": (1, "The sink is representable in middle layers: the contexts lie in an open half-space "
                            "(H1) and BOS lies outside their hull (H2), i.e. γ1·γ2 > 0."),
    "oversmoothing": (2, "The conditions under which skip connections and W = W_V W_O counteract smoothing are "
                         "rarely met: for most heads denser attention smooths more (2b + c > 0), and observed "
                         "cosines rise with λ."),
    "switch": (3, "A head switches off on a token (output ≈ 0) if and only if it sinks on that token."),
    "value_drain": (3, "A sink's value is small: on sink heads ||v_0|| is well below the other tokens' values."),
    "mlp_like": (3, "Some attention layers act like MLPs: on most tokens every head is hard-sink or hard-diagonal."),
    "sink_ablation": (3, "Switching off (zeroing) the most sink-like heads costs less loss than zeroing random heads."),
    "sink_ablation_bos": (3, "Moving all attention of the most sink-like heads to BOS (their output becomes v_0) costs "
                             "less loss than doing so for random heads."),
    "cost_closed_forms": (4, "A sink costs κ√T in nuclear norm (rank 1), a diagonal pattern κT (full rank)."),
    "cost_real_layers": (4, "On the real model's attention inputs, a sink is cheaper than a diagonal pattern."),
    "bigram_backcopy_regimes": (4, "In the bigram-backcopy task, the sink is learned with BOS and the diagonal "
                                   "without it."),
    "weights_low_rank": (5, "Sink heads' W_QK is lower rank than other heads' (the cost theory's rank-1 sink)."),
    "weights_bos_alignment": (5, "Sink heads' W_QK reads keys along the BOS direction: the BOS attention input "
                                 "z_0 is closer to the top key singular direction than in other heads."),
    "gu_sink_rate": (6, "Gu et al. 2025: the sink appears on natural text, random tokens and repeated tokens "
                        "(sink rate, per window, ε = 0.3, T = 64)."),
    "dormant_heads": (6, "Sandoval-Segura et al. 2025: a noticeable fraction of heads are dormant (low AHON-LN) and "
                         "zeroing them costs much less loss than zeroing random heads."),
}


@dataclass(frozen=True)
class Verdict:
    """One claim checked on one model: the verdict, the numbers it rests on, and the thresholds applied."""

    claim: str
    model: str
    verdict: str
    evidence: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    reason: str = ""
    corpus: str | None = None

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")
        if self.claim not in CLAIMS:
            raise ValueError(f"claim {self.claim!r} is not one of {sorted(CLAIMS)}")

    def to_dict(self) -> dict:
        return {k: _plain(v) for k, v in asdict(self).items()}


def _plain(value):
    """JSON-ready: numpy scalars to floats/ints, NaN to None, tuples to lists, recursively."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(f"{float(value):.6g}")
    return value


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]


def middle_layers(n_layers: int, lower: float = 0.25, upper: float = 0.75) -> list[int]:
    """Layers l with lower ≤ l / (L-1) ≤ upper (at least one, for L ≥ 1)."""
    if n_layers <= 1:
        return list(range(n_layers))
    chosen = [layer for layer in range(n_layers) if lower <= layer / (n_layers - 1) <= upper]
    return chosen or [n_layers // 2]


GEOMETRY = {"middle_depth": (0.25, 0.75), "token_frac": 0.95, "supported_layer_frac": 0.8, "partly_layer_frac": 0.2}


def geometry_verdict(model: str, nonpos_frac: Sequence[float], cos_max: Sequence[float]) -> Verdict:
    """Claim `geometry`: per layer, the fraction of context tokens with cos(z_0, z_t) ≤ 0 and the max cosine.

    A middle layer holds when ≥ `token_frac` of its tokens have cos ≤ 0. Supported: ≥ `supported_layer_frac` of
    middle layers hold; partly: ≥ `partly_layer_frac` do; else not supported.
    """
    nonpos = np.asarray(nonpos_frac, dtype=np.float64)
    if nonpos.size == 0 or not np.isfinite(nonpos).all():
        return Verdict("geometry", model, NOT_MEASURABLE, {}, GEOMETRY, "no per-layer BOS cosines")
    middle = middle_layers(len(nonpos), *GEOMETRY["middle_depth"])
    holds = nonpos[middle] >= GEOMETRY["token_frac"]
    evidence = {
        "middle_layers": middle,
        "middle_layers_holding": float(holds.mean()),
        "middle_mean_nonpos_frac": float(nonpos[middle].mean()),
        "middle_max_cos": float(np.max(np.asarray(cos_max, dtype=np.float64)[middle])),
        "nonpos_frac_per_layer": nonpos.tolist(),
    }
    verdict = (
        SUPPORTED if holds.mean() >= GEOMETRY["supported_layer_frac"]
        else PARTLY if holds.mean() >= GEOMETRY["partly_layer_frac"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("geometry", model, verdict, evidence, GEOMETRY)


REPRESENTABILITY = {"middle_depth": (0.25, 0.75), "supported_layer_frac": 0.8, "partly_layer_frac": 0.2}


def representability_verdict(model: str, margin: Sequence[float]) -> Verdict:
    """Claim `representability`: per layer the best normalised sink margin γ1·γ2 (0 when H1 or H2 fails).

    Supported: ≥ `supported_layer_frac` of middle layers have γ1·γ2 > 0; partly: ≥ `partly_layer_frac`.
    """
    margin = np.asarray(margin, dtype=np.float64)
    if margin.size == 0 or not np.isfinite(margin).all():
        return Verdict("representability", model, NOT_MEASURABLE, {}, REPRESENTABILITY,
                       "no half-space certificates (geometry cap 0?)")  # fmt: skip
    middle = middle_layers(len(margin), *REPRESENTABILITY["middle_depth"])
    frac = float((margin[middle] > 0).mean())
    evidence = {"middle_layers_representable": frac, "all_layers_representable": float((margin > 0).mean()),
                "margin_per_layer": margin.tolist()}  # fmt: skip
    verdict = (
        SUPPORTED if frac >= REPRESENTABILITY["supported_layer_frac"]
        else PARTLY if frac >= REPRESENTABILITY["partly_layer_frac"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("representability", model, verdict, evidence, REPRESENTABILITY)


OVERSMOOTHING = {"supported_head_frac": 0.8, "partly_head_frac": 0.5}


def oversmoothing_verdict(
    model: str, frac_dense_more: float, frac_observed_rise: float, sign_agreement: float, n_heads: int
) -> Verdict:
    """Claim `oversmoothing`: fractions of heads with 2b + c > 0 (predicted) and with a rising observed curve.

    Supported: both ≥ `supported_head_frac` ("rarely" = at most one head in five counteracts); partly: either
    ≥ `partly_head_frac`; else not supported.
    """
    evidence = {"frac_dense_more": frac_dense_more, "frac_observed_rise": frac_observed_rise,
                "sign_agreement": sign_agreement, "n_heads": n_heads}  # fmt: skip
    if n_heads == 0 or not (math.isfinite(frac_dense_more) and math.isfinite(frac_observed_rise)):
        return Verdict("oversmoothing", model, NOT_MEASURABLE, evidence, OVERSMOOTHING, "no smoothing columns")
    low = min(frac_dense_more, frac_observed_rise)
    high = max(frac_dense_more, frac_observed_rise)
    verdict = (
        SUPPORTED if low >= OVERSMOOTHING["supported_head_frac"]
        else PARTLY if high >= OVERSMOOTHING["partly_head_frac"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("oversmoothing", model, verdict, evidence, OVERSMOOTHING)


SWITCH = {"supported": 0.9, "partly": 0.5}


def switch_verdict(model: str, n_off_sink: int, n_off_nosink: int, n_on_sink: int, n_on_nosink: int) -> Verdict:
    """Claim `switch` from the pooled 2×2 table (queries × heads): switched-off (‖o_t‖ ≤ τ mean‖v‖) × hard-sink.

    P(sink | off) and P(off | sink): supported when both ≥ `supported`; partly when either ≥ `partly`.
    Not measurable when no query is switched off or none sinks.
    """
    n_off, n_sink = n_off_sink + n_off_nosink, n_off_sink + n_on_sink
    evidence = {"n_off_sink": n_off_sink, "n_off_nosink": n_off_nosink, "n_on_sink": n_on_sink,
                "n_on_nosink": n_on_nosink}  # fmt: skip
    if n_off == 0 or n_sink == 0:
        return Verdict("switch", model, NOT_MEASURABLE, evidence, SWITCH,
                       "no switched-off or no hard-sink query in the sample")  # fmt: skip
    sink_given_off, off_given_sink = n_off_sink / n_off, n_off_sink / n_sink
    evidence |= {"p_sink_given_off": sink_given_off, "p_off_given_sink": off_given_sink}
    verdict = (
        SUPPORTED if min(sink_given_off, off_given_sink) >= SWITCH["supported"]
        else PARTLY if max(sink_given_off, off_given_sink) >= SWITCH["partly"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("switch", model, verdict, evidence, SWITCH)


VALUE_DRAIN = {"sink_head_hard_sink_frac": 0.5, "supported_median": 0.5, "partly_median": 1.0, "min_heads": 1}


def value_drain_verdict(model: str, sink_head_drains: Sequence[float], other_drains: Sequence[float]) -> Verdict:
    """Claim `value_drain`: ‖v_0‖ / mean ‖v_j‖ on sink heads (hard-sink fraction ≥ 0.5; chosen by the caller).

    Supported: median ≤ `supported_median`; partly: ≤ `partly_median`; else not supported.
    """
    sinks, others = _finite(sink_head_drains), _finite(other_drains)
    evidence = {"n_sink_heads": int(sinks.size), "median_sink_heads": float(np.median(sinks)) if sinks.size else None,
                "median_other_heads": float(np.median(others)) if others.size else None}  # fmt: skip
    if sinks.size < VALUE_DRAIN["min_heads"]:
        return Verdict("value_drain", model, NOT_MEASURABLE, evidence, VALUE_DRAIN, "no sink head")
    median = float(np.median(sinks))
    verdict = (
        SUPPORTED if median <= VALUE_DRAIN["supported_median"]
        else PARTLY if median <= VALUE_DRAIN["partly_median"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("value_drain", model, verdict, evidence, VALUE_DRAIN)


MLP_LIKE = {"supported_max": 0.5, "partly_max": 0.1}


def mlp_like_verdict(model: str, mlp_like_frac: Sequence[float]) -> Verdict:
    """Claim `mlp_like`: per layer, the fraction of queries on which every head is hard-sink or hard-diagonal.

    Supported: some layer ≥ `supported_max`; partly: some layer ≥ `partly_max`; else not supported.
    """
    frac = _finite(mlp_like_frac)
    if frac.size == 0:
        return Verdict("mlp_like", model, NOT_MEASURABLE, {}, MLP_LIKE, "no per-layer MLP-like fractions")
    evidence = {"max": float(frac.max()), "argmax_layer": int(np.argmax(frac)), "mean": float(frac.mean()),
                "layers_over_partly": int((frac >= MLP_LIKE["partly_max"]).sum())}  # fmt: skip
    verdict = (
        SUPPORTED if frac.max() >= MLP_LIKE["supported_max"]
        else PARTLY if frac.max() >= MLP_LIKE["partly_max"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("mlp_like", model, verdict, evidence, MLP_LIKE)


ABLATION = {"supported_ratio": 0.5, "partly_ratio": 1.0}


def ablation_verdict(
    claim: str, model: str, delta_selected: float, delta_random: Sequence[float], extra: dict | None = None
) -> Verdict:
    """Claims `sink_ablation`, `sink_ablation_bos` and `dormant_heads`: loss change (nats/token) of a selected head set vs the mean of
    random sets of the same size. ratio = Δ_selected / mean Δ_random: supported ≤ `supported_ratio`, partly
    < `partly_ratio`, else not supported; not measurable when the random sets do not raise the loss.
    `extra` joins the evidence (e.g. the dormant fraction) and may carry `min_dormant_frac`, checked for
    `dormant_heads`: below it the verdict is at most partly.
    """
    extra = dict(extra or {})
    randoms = _finite(delta_random)
    mean_random = float(randoms.mean()) if randoms.size else math.nan
    evidence = {"delta_selected": delta_selected, "delta_random_mean": mean_random,
                "delta_random": randoms.tolist(), **extra}  # fmt: skip
    thresholds = dict(ABLATION)
    if not (math.isfinite(delta_selected) and math.isfinite(mean_random)) or mean_random <= 0:
        return Verdict(claim, model, NOT_MEASURABLE, evidence, thresholds, "random heads do not raise the loss")
    ratio = delta_selected / mean_random
    evidence["ratio"] = ratio
    verdict = SUPPORTED if ratio <= ABLATION["supported_ratio"] else PARTLY if ratio < ABLATION["partly_ratio"] else (
        NOT_SUPPORTED
    )
    if claim == "dormant_heads":
        thresholds["min_dormant_frac"] = DORMANT_MIN_FRAC
        if extra.get("dormant_frac", 0.0) < DORMANT_MIN_FRAC and verdict == SUPPORTED:
            verdict = PARTLY
    return Verdict(claim, model, verdict, evidence, thresholds)


DORMANT_AHON_LN = 0.5  # a head is dormant when its AHON-LN ≤ this (our threshold; the paper sweeps several)
DORMANT_MIN_FRAC = 0.04  # Sandoval-Segura et al. report 4-14% of heads


COST_CLOSED = {"sink_exponent": 0.5, "diagonal_exponent": 1.0, "exponent_tol": 0.1, "exact_rel_tol": 1e-3}


def cost_closed_forms_verdict(
    model: str, sink_exponent: float, diagonal_exponent: float, exact_rel_error: float
) -> Verdict:
    """Claim `cost_closed_forms`: fitted exponents of nuclear cost ~ T^a (closed forms over T) and the largest
    relative gap between the exact convex programs and the closed forms.

    Supported: both exponents within `exponent_tol` of 1/2 and 1 and the programs match within `exact_rel_tol`;
    partly: the exponents order as claimed (sink < diagonal); else not supported.
    """
    evidence = {"sink_exponent": sink_exponent, "diagonal_exponent": diagonal_exponent,
                "exact_rel_error": exact_rel_error}  # fmt: skip
    if not (math.isfinite(sink_exponent) and math.isfinite(diagonal_exponent)):
        return Verdict("cost_closed_forms", model, NOT_MEASURABLE, evidence, COST_CLOSED, "no exponents")
    tol = COST_CLOSED["exponent_tol"]
    close = abs(sink_exponent - 0.5) <= tol and abs(diagonal_exponent - 1.0) <= tol
    exact = math.isfinite(exact_rel_error) and exact_rel_error <= COST_CLOSED["exact_rel_tol"]
    verdict = SUPPORTED if close and exact else PARTLY if sink_exponent < diagonal_exponent else NOT_SUPPORTED
    return Verdict("cost_closed_forms", model, verdict, evidence, COST_CLOSED)


COST_REAL = {"supported_frac": 0.8, "partly_frac": 0.5}


def cost_real_verdict(model: str, sink_costs: Sequence[float], diagonal_costs: Sequence[float]) -> Verdict:
    """Claim `cost_real_layers`: paired nuclear costs (one per layer and window; inf = infeasible).

    Over pairs where at least one pattern is feasible, the sink wins when it is feasible and cheaper (or the
    diagonal is infeasible). Supported: it wins ≥ `supported_frac` of pairs; partly: ≥ `partly_frac`.
    """
    sink, diag = np.asarray(sink_costs, dtype=np.float64), np.asarray(diagonal_costs, dtype=np.float64)
    valid = ~(np.isnan(sink) | np.isnan(diag)) & (np.isfinite(sink) | np.isfinite(diag))
    sink, diag = sink[valid], diag[valid]
    if sink.size == 0:
        return Verdict("cost_real_layers", model, NOT_MEASURABLE, {}, COST_REAL, "no feasible pattern solved")
    wins = np.isfinite(sink) & (~np.isfinite(diag) | (sink < diag))
    both = np.isfinite(sink) & np.isfinite(diag)
    evidence = {
        "pairs": int(sink.size),
        "sink_cheaper_frac": float(wins.mean()),
        "sink_infeasible": int((~np.isfinite(sink)).sum()),
        "diagonal_infeasible": int((~np.isfinite(diag)).sum()),
        "median_diag_over_sink": float(np.median(diag[both] / sink[both])) if both.any() else None,
    }
    verdict = (
        SUPPORTED if wins.mean() >= COST_REAL["supported_frac"]
        else PARTLY if wins.mean() >= COST_REAL["partly_frac"]
        else NOT_SUPPORTED
    )  # fmt: skip
    return Verdict("cost_real_layers", model, verdict, evidence, COST_REAL)


REGIMES = {"bos_mass": 0.5, "diag_mass": 0.5}


def regimes_verdict(model: str, inits: dict[str, tuple[dict, dict]] | None, reason: str = "") -> Verdict:
    """Claim `bigram_backcopy_regimes`: per initialisation, the switch head's mean masses on non-trigger queries
    (over seeds) of the runs with BOS and without, as `{init: ({"bos_mass", "diag_mass", "pattern"}, {...})}`.

    An init agrees with the claim when with BOS the head sinks (bos_mass ≥ `bos_mass`) and without BOS it is
    diagonal (diag_mass ≥ `diag_mass`). Supported: every init agrees; partly: some init agrees, or one half holds
    for every init; else not supported; not measurable when the runs are missing (`reason` says why).
    """
    if not inits:
        return Verdict("bigram_backcopy_regimes", model, NOT_MEASURABLE, {}, REGIMES, reason or "no runs")
    halves = {
        init: (with_bos["bos_mass"] >= REGIMES["bos_mass"], without_bos["diag_mass"] >= REGIMES["diag_mass"])
        for init, (with_bos, without_bos) in inits.items()
    }
    evidence = {f"{init}_{'bos' if flag else 'nobos'}": cell for init, pair in inits.items()
                for flag, cell in zip((True, False), pair)}  # fmt: skip
    agree = [sink and diag for sink, diag in halves.values()]
    one_half = all(sink for sink, _ in halves.values()) or all(diag for _, diag in halves.values())
    verdict = SUPPORTED if all(agree) else PARTLY if any(agree) or one_half else NOT_SUPPORTED
    return Verdict("bigram_backcopy_regimes", model, verdict, evidence, REGIMES)


WEIGHTS = {"min_heads_per_group": 3, "p_value": 0.05}


def weights_verdict(
    claim: str, model: str, sink_values: Sequence[float], other_values: Sequence[float], sink_lower: bool
) -> Verdict:
    """Claims `weights_low_rank` (sink heads' effective rank lower: `sink_lower`) and `weights_bos_alignment`
    (sink heads' BOS alignment higher): two distributions over heads, compared by medians and a one-sided
    Mann-Whitney U test. Supported: medians order as claimed and p < `p_value`; partly: medians order as
    claimed; else not supported; not measurable with fewer than `min_heads_per_group` heads in a group.
    """
    from scipy.stats import mannwhitneyu

    sinks, others = _finite(sink_values), _finite(other_values)
    evidence = {"n_sink_heads": int(sinks.size), "n_other_heads": int(others.size)}
    if min(sinks.size, others.size) < WEIGHTS["min_heads_per_group"]:
        return Verdict(claim, model, NOT_MEASURABLE, evidence, WEIGHTS,
                       f"fewer than {WEIGHTS['min_heads_per_group']} heads in a group")  # fmt: skip
    alternative = "less" if sink_lower else "greater"
    p = float(mannwhitneyu(sinks, others, alternative=alternative).pvalue)
    med_s, med_o = float(np.median(sinks)), float(np.median(others))
    evidence |= {"median_sink_heads": med_s, "median_other_heads": med_o, "p_value": p,
                 "alternative": f"sink heads {alternative}"}  # fmt: skip
    ordered = med_s < med_o if sink_lower else med_s > med_o
    verdict = SUPPORTED if ordered and p < WEIGHTS["p_value"] else PARTLY if ordered else NOT_SUPPORTED
    return Verdict(claim, model, verdict, evidence, WEIGHTS)


GU = {"epsilon": 0.3, "seq_len": 64, "present_rate": 0.2}


def gu_sink_rate_verdict(model: str, rates: dict[str, float]) -> Verdict:
    """Claim `gu_sink_rate`: per-window sink rates on `natural` (prose), `random` and `repeat` tokens.

    A sink is present on a corpus when its rate ≥ `present_rate`. Supported: present on all three; partly:
    present on natural text only or on some; not supported: absent on natural text.
    """
    needed = ("natural", "random", "repeat")
    if any(name not in rates or not math.isfinite(rates[name]) for name in needed):
        return Verdict("gu_sink_rate", model, NOT_MEASURABLE, dict(rates), GU, "a corpus was not analysed")
    present = {name: rates[name] >= GU["present_rate"] for name in needed}
    evidence = {**{f"sink_rate_{k}": v for k, v in rates.items()}, "present": present}
    verdict = SUPPORTED if all(present.values()) else PARTLY if present["natural"] else NOT_SUPPORTED
    return Verdict("gu_sink_rate", model, verdict, evidence, GU)
