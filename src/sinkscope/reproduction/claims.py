"""The paper's claims, each as the paper states it, the strongest fair test of it, its control, and a verdict
function: plain numbers in (no model, no I/O), a `Verdict` out by the steps of `reproduction.verdicts`
(decision, bootstrap interval, threshold sensitivity).

Thresholds are ours (the paper states its findings in words: "non-positive", "rarely met", "favoured"); each
is reported beside the verdict with the verdicts at half and double it (fractions on the odds scale,
`reproduction.verdicts`; docs/reproduction.md).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from sinkscope.reproduction.verdicts import (
    DESCRIPTIVE,
    NOT_MEASURABLE,
    NOT_SUPPORTED,
    PARTLY,
    SUPPORTED,
    VERDICTS,
    Verdict,
    graded,
    judge,
)

__all__ = ["CLAIMS", "DESCRIPTIVE", "NOT_MEASURABLE", "NOT_SUPPORTED", "PARTLY", "SUPPORTED", "VERDICTS", "Verdict"]


@dataclass(frozen=True)
class Claim:
    """One claim: its report section, the paper's words, the operational test and why it is the strongest fair
    one, the control, and the evidence table (tables/NAME.csv) it is computed from."""

    section: int
    paper_claim: str
    test: str
    why: str
    control: str
    table: str


CLAIMS: dict[str, Claim] = {
    "geometry": Claim(
        1, "In middle layers, the cosine similarity between BOS and all other tokens is non-positive, satisfying "
        "the condition that allows any attention head to produce a sink pattern.",
        "per middle layer (depth ¼ … ¾), the fraction of context tokens with cos(z_0, z_t) ≤ 0 on the attention "
        "input z, pooled over windows; a layer holds when at most `positive_token_tol` of them are positive",
        "the claim is about every token's cosine with BOS in the representation the heads read, so it is "
        "tested on that representation, token by token",
        "the same fraction with a random context token z_r in place of BOS", "geometry"),
    "representability": Claim(
        1, "A group of tokens can attend exclusively to a sink token when the context embeddings and the "
        "vectors z_0 − z_i lie in half-spaces.",
        "the exact half-space certificates (H1: 0 ∉ conv{z_t}, H2: z_0 ∉ conv{z_t}) on a sample of unit "
        "context inputs larger than the model width, per middle layer",
        "below the width any point is outside the hull of the others and the test has no power; above it, "
        "H2 for BOS is a real constraint",
        "H2 for random context tokens against the other contexts (γ₂ of BOS must exceed theirs)", "certificates"),
    "oversmoothing": Claim(
        2, "In practice, these counteracting conditions are rarely met. In most heads of trained LLMs, "
        "increasing attention density leads to an increase in token cosine similarity (oversmoothing).",
        "per head, the measured-moment predictor (2b + c > 0 from the captured attention inputs) and the "
        "observed rise of the mean pairwise cosine from λ = 0 to 1",
        "the measured-moment predictor has no linearisation error (massive activations break the linearised "
        "one), and the observed curve is the phenomenon itself",
        "λ = 0 (identity attention): the cosine the head's skip path gives without mixing", "heads"),
    "switch": Claim(
        3, "Under mild geometric assumptions (verified in pretrained LLMs), a head implements a hard attention "
        "switch if and only if it implements an attention sink.",
        "pooled 2×2 table of queries × heads: switched off (‖o_t‖ ≤ τ · mean_{j≤t} ‖v_j‖) × hard sink "
        "(A[t,0] ≥ 1 − δ); both P(sink | off) and P(off | sink)",
        "an 'if and only if' needs both directions, on the same queries, with the visible keys of each query",
        "P(off | no sink): how often queries that do not sink are switched off", "switch"),
    "value_drain": Claim(
        3, "A sink's value state is small (Guo et al. 2024): ‖v_0‖ is well below the other tokens' values on "
        "sink heads.",
        "value drain ‖v_0‖ / mean_{j≥1} ‖v_j‖ per key/value group (values are shared within a group), groups "
        "with a hard-sink head vs the other groups, one-sided Mann-Whitney",
        "drain is a property of a value head, so the unit is the KV group; a between-group test says whether "
        "sinking goes with a small v_0 beyond what all groups show",
        "KV groups without a sink head", "value_drain"),
    "mlp_like": Claim(
        3, "Attention layers act like MLPs when token communication is not necessary.",
        "per layer, the fraction of queries on which every head is hard-sink or hard-diagonal",
        "the paper states a condition (when communication is not needed), not how often it happens: measured, "
        "not judged",
        "none (descriptive)", "geometry"),
    "sink_ablation": Claim(
        3, "A hard attention switch is a head whose output on a fraction of tokens is identically zero; a head "
        "implements it if and only if it implements an attention sink.",
        "zero the 10 % most hard-sink heads only on their sink queries (A[t,0] ≥ 1 − δ in the clean model), "
        "Δloss vs matched random head-and-query sets",
        "the claim is about the queries where a head sinks; zeroing it everywhere also removes what it does "
        "elsewhere, and matching heads and query counts fixes what removing that many outputs costs",
        "random heads, each zeroed on as many random queries per window (many draws; the interval is over draws)",
        "ablation"),
    "sink_ablation_bos": Claim(
        3, "The only geometrically viable solution to 'switch off' a head is to attend fully to the BOS token "
        "(the sink).",
        "the 10 % most hard-sink heads' attention moved to BOS on every query, Δloss vs random head sets",
        "this keeps what a sinking head really outputs (v_0) and removes only its other queries' mixing",
        "random head sets of the same size (many draws; the interval is over draws)", "ablation"),
    "cost_closed_forms": Claim(
        4, "Sink cost scales with κ√T (low-rank structure); diagonal cost scales with κT (full-rank structure).",
        "exponent of the nuclear cost ~ T^a on orthonormal embeddings (closed forms, T = 64 … 1024) and the "
        "exact convex programs beside the closed forms at small T",
        "the claim is a scaling law; the exact programs check the closed forms it rests on",
        "the diagonal pattern on the same embeddings", "cost_theory"),
    "cost_real_layers": Claim(
        4, "Sinks are provably cheaper to represent than diagonal patterns across a wide range of "
        "hyperparameters and context lengths.",
        "exact nuclear costs (κ = 1) of the sink and the diagonal pattern on each layer's unit attention inputs",
        "the claim is about costs; the model's own inputs are the geometry the model faces",
        "the diagonal pattern on the same inputs", "cost_layers"),
    "bigram_backcopy_regimes": Claim(
        4, "For typical backcopy tasks sinks incur lower parameter costs, so a model learns a sink when BOS is "
        "available.",
        "per initialisation, the switch head's BOS mass on non-trigger queries of bigram-backcopy models "
        "trained with BOS (3 seeds); the diagonal without BOS is our addition, reported, not judged",
        "training from scratch is the only way to see which mechanism is learned; the init is part of the "
        "setting (docs/experiments.md)", "the same models trained without BOS", "regime_cells"),
    "weights_low_rank": Claim(
        5, "A sink is the low-rank solution: its W_QK needs rank 1 (the cost theory's rank-1 sink).",
        "effective rank of W_QK at relative offset 0, sink heads (head class sink) vs the others, one-sided "
        "Mann-Whitney",
        "rank is what the cost theory predicts; offset 0 is the position-free form",
        "non-sink heads of the same model", "weights"),
    "weights_bos_alignment": Claim(
        5, "A sink is realised by a rank-1 W_QK reading queries along the contexts' shared direction p̂ and keys "
        "along the BOS-separating direction q̂.",
        "|p̂ W_QK(Δ) q̂ᵀ| / σ₁ averaged over the RoPE offsets Δ = 1 … T−1 at which queries see BOS, with p̂, q̂ "
        "the layer's half-space certificate directions; sink heads vs the others, one-sided Mann-Whitney",
        "p̂ and q̂ are the directions of the theory's rank-1 construction, and the BOS key is only ever scored "
        "at offsets t ≥ 1",
        "non-sink heads of the same layers", "weights"),
    "gu_sink_rate": Claim(
        6, "Gu et al. 2025: the sink appears on natural text, random tokens and repeated tokens.",
        "Gu et al.'s sink rate (per window, ε = 0.3, T = 64) on builtin:prose, builtin:random, builtin:repeat",
        "the same statistic and settings as the paper it comes from", "random and repeated tokens are the "
        "controls of the claim itself", "anchors"),
    "dormant_heads": Claim(
        6, "Sandoval-Segura et al. 2025: dormant heads (low AHON-LN) can be zeroed at much less cost than "
        "random heads.",
        "zero the 10 % lowest-AHON-LN heads, Δloss vs random head sets; the fraction of dormant heads is given "
        "as a curve over the AHON-LN threshold",
        "the ablation is the paper's own test; a curve avoids one arbitrary dormancy cut",
        "random head sets of the same size (many draws)", "ablation"),
}

SECTION_OF = {claim: spec.section for claim, spec in CLAIMS.items()}


def with_claim_text(record: dict) -> dict:
    """A `Verdict.to_dict()` with the claim's words, test, why, control and table added."""
    spec = CLAIMS[record["claim"]]
    return record | {"paper_claim": spec.paper_claim, "test": spec.test, "why_strongest": spec.why,
                     "control": spec.control, "table": spec.table}  # fmt: skip


def _finite(values: Sequence[float]) -> np.ndarray:
    array = np.asarray(values, dtype=np.float64).ravel()
    return array[np.isfinite(array)]


def middle_layers(n_layers: int, lower: float = 0.25, upper: float = 0.75) -> list[int]:
    """Layers l with lower ≤ l / (L-1) ≤ upper (at least one, for L ≥ 1)."""
    if n_layers <= 1:
        return list(range(n_layers))
    chosen = [layer for layer in range(n_layers) if lower <= layer / (n_layers - 1) <= upper]
    return chosen or [n_layers // 2]


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


# --- section 1 ---------------------------------------------------------------------------------------------

GEOMETRY = {"positive_token_tol": 0.05, "failing_layer_tol": 0.2, "partly_layer_frac": 0.2}


def geometry_verdict(model: str, nonpos: np.ndarray, control: np.ndarray, tokens: int, seed: int = 0) -> Verdict:
    """Claim `geometry` from per-window counts (W, L) of tokens with cos ≤ 0 (BOS; `control`: a random context
    token, over `tokens - 1` others) out of `tokens` per window. A middle layer holds when its pooled fraction is
    ≥ 1 − `positive_token_tol`; supported when ≥ 1 − `failing_layer_tol` of middle layers hold, partly when
    ≥ `partly_layer_frac` do."""
    nonpos, control = np.asarray(nonpos, float), np.asarray(control, float)
    middle = middle_layers(nonpos.shape[1]) if nonpos.ndim == 2 else []

    def effects(units, th):
        frac = units["bos"].sum(0)[middle] / (len(units["bos"]) * tokens)
        ctrl = units["control"].sum(0)[middle] / (len(units["control"]) * (tokens - 1))
        return {"middle_layers_holding": float((frac >= 1 - th["positive_token_tol"]).mean()),
                "control_layers_holding": float((ctrl >= 1 - th["positive_token_tol"]).mean()),
                "middle_mean_nonpos_frac": float(frac.mean()), "control_mean_nonpos_frac": float(ctrl.mean())}

    def decide(e, th):
        return graded(e["middle_layers_holding"], 1 - th["failing_layer_tol"], th["partly_layer_frac"])

    units = {"bos": nonpos, "control": control} if middle else {}
    if not middle:
        return Verdict("geometry", model, NOT_MEASURABLE, {}, GEOMETRY, "no per-window BOS cosines")
    return judge("geometry", model, units, effects, decide, GEOMETRY, over="windows", seed=seed, fractions=tuple(GEOMETRY),
                 evidence={"middle_layers": middle})  # fmt: skip


REPRESENTABILITY = {"failing_layer_tol": 0.2, "partly_layer_frac": 0.2}


def representability_verdict(model: str, layers: Sequence[Mapping], width: int) -> Verdict:
    """Claim `representability` from per-middle-layer certificates `{layer, n_contexts, h1, h2, gamma2,
    control_gamma2_max}` on samples larger than the model `width`. Supported: H1 and H2 hold and BOS's γ₂
    exceeds every control token's in ≥ 1 − `failing_layer_tol` of the layers; partly: H1 and H2 hold in
    ≥ `partly_layer_frac` of them (BOS then passes a test random tokens pass too); else not supported."""
    layers = list(layers)
    if not layers:
        return Verdict("representability", model, NOT_MEASURABLE, {}, REPRESENTABILITY, "no certificates")
    n = min(int(row["n_contexts"]) for row in layers)
    if n <= width:
        return Verdict("representability", model, NOT_MEASURABLE, {"n_contexts": n, "width": width},
                       REPRESENTABILITY, f"the certificate sample ({n} tokens) is not larger than the model width "
                       f"({width}): any token would pass")  # fmt: skip
    holds = np.array([bool(row["h1"]) and bool(row["h2"]) for row in layers])
    beyond = np.array([float(row["gamma2"]) > float(row["control_gamma2_max"]) for row in layers]) & holds

    def effects(_units, _th):
        return {"layers_representable": float(holds.mean()), "layers_beyond_control": float(beyond.mean())}

    def decide(e, th):
        if e["layers_representable"] >= 1 - th["failing_layer_tol"] and e["layers_beyond_control"] >= (
            1 - th["failing_layer_tol"]
        ):
            return SUPPORTED
        return PARTLY if e["layers_representable"] >= th["partly_layer_frac"] else NOT_SUPPORTED

    evidence = {"n_contexts": n, "width": width,
                "gamma2_bos": [float(r["gamma2"]) for r in layers],
                "gamma2_control_max": [float(r["control_gamma2_max"]) for r in layers]}  # fmt: skip
    return judge("representability", model, {}, effects, decide, REPRESENTABILITY, fractions=tuple(REPRESENTABILITY),
                 over="exact certificates on every sampled token: no sampling interval", evidence=evidence)  # fmt: skip


# --- section 2 ---------------------------------------------------------------------------------------------

OVERSMOOTHING = {"counteract_tol": 0.2, "partly_frac": 0.5}


def oversmoothing_verdict(model: str, dense_more: Sequence[bool], observed_rise: Sequence[bool], seed: int = 0
                          ) -> Verdict:  # fmt: skip
    """Claim `oversmoothing` from per-head booleans: 2b + c > 0 by the measured-moment predictor, and an observed
    rise of the mean pairwise cosine. Supported: both fractions ≥ 1 − `counteract_tol` ("rarely" = at most one
    head in five counteracts); partly: either ≥ `partly_frac`. Interval over heads."""
    units = {"dense": np.asarray(dense_more, float), "rise": np.asarray(observed_rise, float)}

    def effects(u, _th):
        return {"frac_observed_rise": float(u["rise"].mean()), "frac_dense_more_measured": float(u["dense"].mean()),
                "sign_agreement": float((u["dense"] == u["rise"]).mean())}  # fmt: skip

    def decide(e, th):
        low = min(e["frac_observed_rise"], e["frac_dense_more_measured"])
        high = max(e["frac_observed_rise"], e["frac_dense_more_measured"])
        return SUPPORTED if low >= 1 - th["counteract_tol"] else PARTLY if high >= th["partly_frac"] else NOT_SUPPORTED

    if units["dense"].size == 0:
        return Verdict("oversmoothing", model, NOT_MEASURABLE, {}, OVERSMOOTHING, "no smoothing columns")
    return judge("oversmoothing", model, units, effects, decide, OVERSMOOTHING, over="heads", seed=seed,
                 fractions=tuple(OVERSMOOTHING),
                 evidence={"n_heads": int(units["dense"].size)})  # fmt: skip


# --- section 3 ---------------------------------------------------------------------------------------------

SWITCH = {"tau": 0.1, "delta": 0.1, "miss_tol": 0.1, "partly_min": 0.5}
GRID = (0.5, 1.0, 2.0)  # the τ and δ scales the per-window switch tables are counted at


def switch_verdict(model: str, counts: np.ndarray, tau: float = 0.1, delta: float = 0.1, seed: int = 0) -> Verdict:
    """Claim `switch` from per-window 2×2 tables `counts` (W, δ scale, τ scale, 4) at δ, τ × `GRID` (or at δ
    only: a δ axis of length 1, then δ is not varied), cells (off·sink, off·no sink, on·sink, on·no sink).
    Supported: P(sink | off) and P(off | sink) both ≥ 1 − `miss_tol`; partly: either ≥ `partly_min`; not
    measurable without a switched-off or a sinking query."""
    thresholds = SWITCH | {"tau": tau, "delta": delta}
    counts = np.asarray(counts, float)
    deltas = GRID if counts.shape[1] == len(GRID) else (1.0,)
    varied = tuple(name for name in thresholds if name != "delta" or deltas == GRID)

    def effects(u, th):
        table = u["counts"][:, deltas.index(th["delta"] / delta), GRID.index(th["tau"] / tau)].sum(0)
        off_sink, off_nosink, on_sink, on_nosink = (float(x) for x in table)
        return {"p_sink_given_off": _ratio(off_sink, off_sink + off_nosink),
                "p_off_given_sink": _ratio(off_sink, off_sink + on_sink),
                "p_off_given_nosink": _ratio(off_nosink, off_nosink + on_nosink),
                "n_off": off_sink + off_nosink, "n_sink": off_sink + on_sink}  # fmt: skip

    def decide(e, th):
        a, b = e["p_sink_given_off"], e["p_off_given_sink"]
        if not (math.isfinite(a) and math.isfinite(b)):
            return NOT_MEASURABLE
        return SUPPORTED if min(a, b) >= 1 - th["miss_tol"] else PARTLY if max(a, b) >= th["partly_min"] else (
            NOT_SUPPORTED)

    return judge("switch", model, {"counts": counts}, effects, decide, thresholds, over="windows", seed=seed,
                 sensitive=varied, fractions=("miss_tol", "partly_min"))  # fmt: skip


VALUE_DRAIN = {"sink_head_hard_frac": 0.5, "drain_max": 0.5, "p_value": 0.05}
MIN_GROUPS = 3


def value_drain_verdict(model: str, drains: np.ndarray, group_hard_frac: np.ndarray, seed: int = 0) -> Verdict:
    """Claim `value_drain` from per-window drains (W, G) of the G key/value groups (all layers) and each group's
    largest hard-sink fraction among its query heads (G,). Sink groups: hard fraction ≥ `sink_head_hard_frac`.
    Supported: the sink groups' median drain ≤ `drain_max` and below the other groups' (one-sided
    Mann-Whitney p < `p_value`); partly: one of the two; not measurable with fewer than 3 groups on a side."""
    from scipy.stats import mannwhitneyu

    group_hard_frac = np.asarray(group_hard_frac, float)

    def effects(u, th):
        per_group = u["drains"].mean(0)
        sink = group_hard_frac >= th["sink_head_hard_frac"]
        a, b = per_group[sink], per_group[~sink]
        if min(a.size, b.size) < MIN_GROUPS:
            return {"median_ratio_sink_over_other": math.nan, "median_sink_groups": math.nan,
                    "median_other_groups": math.nan, "p_value": math.nan, "n_sink_groups": float(a.size)}
        p = float(mannwhitneyu(a, b, alternative="less").pvalue)
        return {"median_ratio_sink_over_other": float(np.median(a) / np.median(b)),
                "median_sink_groups": float(np.median(a)), "median_other_groups": float(np.median(b)),
                "p_value": p, "n_sink_groups": float(a.size)}  # fmt: skip

    def ratio(u, th):
        per_group = u["drains"].mean(0)
        sink = group_hard_frac >= th["sink_head_hard_frac"]
        a, b = per_group[sink], per_group[~sink]
        return float(np.median(a) / np.median(b)) if min(a.size, b.size) >= MIN_GROUPS else math.nan

    def decide(e, th):
        if not math.isfinite(e["p_value"]):
            return NOT_MEASURABLE
        small, lower = e["median_sink_groups"] <= th["drain_max"], e["p_value"] < th["p_value"]
        return SUPPORTED if small and lower else PARTLY if small or lower else NOT_SUPPORTED

    n_sink = int((group_hard_frac >= VALUE_DRAIN["sink_head_hard_frac"]).sum())
    if min(n_sink, group_hard_frac.size - n_sink) < MIN_GROUPS:
        return Verdict("value_drain", model, NOT_MEASURABLE, {"n_groups": int(group_hard_frac.size),
                       "n_sink_groups": n_sink}, VALUE_DRAIN, f"{n_sink} of {group_hard_frac.size} KV groups have a "
                       f"head that is hard-sink on ≥ half its queries: a test between groups needs {MIN_GROUPS} on "
                       "each side")  # fmt: skip
    return judge("value_drain", model, {"drains": np.asarray(drains, float)}, effects, decide, VALUE_DRAIN,
                 over="windows", seed=seed, fractions=("sink_head_hard_frac",), cap=False, primary=ratio, evidence={"n_groups": int(group_hard_frac.size)})  # fmt: skip


def mlp_like_verdict(model: str, counts: np.ndarray, queries: int, seed: int = 0) -> Verdict:
    """Claim `mlp_like`, descriptive: per-window counts (W, L) of queries on which every head is hard-sink or
    hard-diagonal, out of `queries` per window; the largest layer fraction with its interval."""
    counts = np.asarray(counts, float)

    def effects(u, _th):
        frac = u["counts"].sum(0) / (len(u["counts"]) * queries)
        return {"max_layer_frac": float(frac.max()), "argmax_layer": float(np.argmax(frac)),
                "mean_layer_frac": float(frac.mean())}  # fmt: skip

    if counts.size == 0:
        return Verdict("mlp_like", model, NOT_MEASURABLE, {}, {}, "no per-layer MLP-like counts")
    return judge("mlp_like", model, {"counts": counts}, effects, lambda e, th: DESCRIPTIVE, {}, over="windows",
                 seed=seed, descriptive=True)  # fmt: skip


ABLATION = {"supported_ratio": 0.5, "partly_ratio": 1.0}


def ablation_verdict(claim: str, model: str, delta_selected: float, delta_random: Sequence[float],
                     extra: dict | None = None, seed: int = 0) -> Verdict:  # fmt: skip
    """Claims `sink_ablation`, `sink_ablation_bos`, `dormant_heads`: ratio = Δloss of the selected heads / mean
    Δloss of random head sets of the same size. Supported: ratio ≤ `supported_ratio`; partly: < `partly_ratio`;
    not measurable when the random sets do not raise the loss. Interval over the random draws."""
    randoms = _finite(delta_random)

    def effects(u, _th):
        mean = float(u["random"].mean())
        return {"ratio": delta_selected / mean if mean > 0 else math.nan, "delta_random_mean": mean}

    def decide(e, th):
        if not math.isfinite(e["ratio"]):
            return NOT_MEASURABLE
        return SUPPORTED if e["ratio"] <= th["supported_ratio"] else PARTLY if e["ratio"] < th["partly_ratio"] else (
            NOT_SUPPORTED)

    evidence = {"delta_selected": delta_selected, "delta_random": randoms.tolist(), **(extra or {})}
    return judge(claim, model, {"random": randoms}, effects, decide, ABLATION, over="random draws", seed=seed,
                 evidence=evidence)  # fmt: skip


DORMANT_AHON_LN = 0.5  # the dormancy cut of the ablation's head set is by rank (lowest 10 %), not by this value
DORMANT_CURVE = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8)


def dormant_curve(ahon_ln: Sequence[float]) -> dict[str, float]:
    """Fraction of heads with AHON-LN ≤ x for x in `DORMANT_CURVE` (Sandoval-Segura et al. sweep the cut)."""
    values = _finite(ahon_ln)
    return {f"{x:g}": float((values <= x).mean()) if values.size else math.nan for x in DORMANT_CURVE}


# --- section 4 ---------------------------------------------------------------------------------------------

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
                 over="closed forms and exact programs: no sampling interval")  # fmt: skip


COST_REAL = {"losing_pair_tol": 0.2, "partly_frac": 0.5}


def cost_real_verdict(model: str, sink_costs: Sequence[float], diagonal_costs: Sequence[float], seed: int = 0
                      ) -> Verdict:  # fmt: skip
    """Claim `cost_real_layers`: paired nuclear costs per (layer, window) (inf = infeasible). The sink wins a pair
    when it is feasible and cheaper, or the diagonal is infeasible. Supported: it wins ≥ 1 − `losing_pair_tol`
    of the pairs; partly: ≥ `partly_frac`. Interval over pairs."""
    sink, diag = np.asarray(sink_costs, float), np.asarray(diagonal_costs, float)
    valid = ~(np.isnan(sink) | np.isnan(diag)) & (np.isfinite(sink) | np.isfinite(diag))
    sink, diag = sink[valid], diag[valid]
    if sink.size == 0:
        return Verdict("cost_real_layers", model, NOT_MEASURABLE, {}, COST_REAL, "no feasible pattern solved")
    wins = (np.isfinite(sink) & (~np.isfinite(diag) | (sink < diag))).astype(float)
    both = np.isfinite(sink) & np.isfinite(diag)

    def effects(u, _th):
        return {"sink_cheaper_frac": float(u["wins"].mean())}

    def decide(e, th):
        return graded(e["sink_cheaper_frac"], 1 - th["losing_pair_tol"], th["partly_frac"])

    evidence = {"pairs": int(sink.size), "sink_infeasible": int((~np.isfinite(sink)).sum()),
                "diagonal_infeasible": int((~np.isfinite(diag)).sum()),
                "median_diag_over_sink": float(np.median(diag[both] / sink[both])) if both.any() else None}  # fmt: skip
    return judge("cost_real_layers", model, {"wins": wins}, effects, decide, COST_REAL, over="(layer, window) pairs",
                 seed=seed, evidence=evidence, fractions=tuple(COST_REAL))  # fmt: skip


REGIMES = {"bos_mass": 0.5}


def regimes_verdict(model: str, inits: dict[str, tuple[dict, dict]] | None, reason: str = "") -> Verdict:
    """Claim `bigram_backcopy_regimes` as the paper states it (a sink when BOS is available), from
    `{init: (with BOS, without BOS)}` cells `{"bos_mass", "diag_mass", "pattern", "agreement"}` (seed means).
    Supported: the with-BOS switch head sinks (BOS mass ≥ `bos_mass`) at every init; partly (init-dependent):
    at some; else not supported. The without-BOS cells are evidence only (the diagonal is our addition)."""
    if not inits:
        return Verdict("bigram_backcopy_regimes", model, NOT_MEASURABLE, {}, REGIMES, reason or "no runs")
    evidence = {f"{init}_{'bos' if flag else 'nobos'}": cell for init, pair in inits.items()
                for flag, cell in zip((True, False), pair)}  # fmt: skip

    def effects(_u, th):
        sinks = [with_bos["bos_mass"] >= th["bos_mass"] for with_bos, _ in inits.values()]
        return {"inits_with_sink": float(np.mean(sinks))}

    def decide(e, _th):
        share = e["inits_with_sink"]
        return SUPPORTED if share == 1 else PARTLY if share > 0 else NOT_SUPPORTED

    verdict = judge("bigram_backcopy_regimes", model, {}, effects, decide, REGIMES, fractions=("bos_mass",),
                    over="seed means per cell (agreement over seeds in the evidence)", evidence=evidence)  # fmt: skip
    if verdict.verdict == PARTLY:
        holding = [init for init, (with_bos, _) in inits.items() if with_bos["bos_mass"] >= REGIMES["bos_mass"]]
        note = f"init-dependent: a sink with BOS at {', '.join(holding)} only"
        return replace(verdict, reason="; ".join(p for p in (note, verdict.reason) if p))
    return verdict


# --- section 5 ---------------------------------------------------------------------------------------------

WEIGHTS = {"p_value": 0.05}


def weights_verdict(claim: str, model: str, sink_values: Sequence[float], other_values: Sequence[float],
                    sink_lower: bool, seed: int = 0) -> Verdict:  # fmt: skip
    """Claims `weights_low_rank` (sink heads lower: `sink_lower`) and `weights_bos_alignment` (higher): medians and
    a one-sided Mann-Whitney U test. Supported: medians order as claimed and p < `p_value`; partly: medians
    order as claimed; else not supported; not measurable with fewer than 3 heads in a group. Interval over heads."""
    from scipy.stats import mannwhitneyu

    sinks, others = _finite(sink_values), _finite(other_values)
    values = np.concatenate([sinks, others])
    is_sink = np.concatenate([np.ones(sinks.size), np.zeros(others.size)])
    alternative = "less" if sink_lower else "greater"

    def effects(u, _th):
        a, b = u["values"][u["is_sink"] == 1], u["values"][u["is_sink"] == 0]
        if min(a.size, b.size) < 3:
            return {"median_difference": math.nan, "p_value": math.nan}
        return {"median_difference": float(np.median(a) - np.median(b)), "median_sink_heads": float(np.median(a)),
                "median_other_heads": float(np.median(b)),
                "p_value": float(mannwhitneyu(a, b, alternative=alternative).pvalue)}  # fmt: skip

    def difference(u, _th):
        a, b = u["values"][u["is_sink"] == 1], u["values"][u["is_sink"] == 0]
        return float(np.median(a) - np.median(b)) if min(a.size, b.size) >= 3 else math.nan

    def decide(e, th):
        if not math.isfinite(e["p_value"]):
            return NOT_MEASURABLE
        ordered = e["median_difference"] < 0 if sink_lower else e["median_difference"] > 0
        return SUPPORTED if ordered and e["p_value"] < th["p_value"] else PARTLY if ordered else NOT_SUPPORTED

    evidence = {"n_sink_heads": int(sinks.size), "n_other_heads": int(others.size),
                "alternative": f"sink heads {alternative}"}  # fmt: skip
    if min(sinks.size, others.size) < 3:
        return Verdict(claim, model, NOT_MEASURABLE, evidence, WEIGHTS, "fewer than 3 heads in a group")
    return judge(claim, model, {"values": values, "is_sink": is_sink}, effects, decide, WEIGHTS, over="heads",
                 seed=seed, evidence=evidence, cap=False, primary=difference)  # fmt: skip


# --- section 6 ---------------------------------------------------------------------------------------------

GU = {"epsilon": 0.3, "present_rate": 0.2}


def gu_sink_rate_verdict(model: str, scores: dict[str, np.ndarray], seed: int = 0) -> Verdict:
    """Claim `gu_sink_rate` from per-window sink scores α^w (W, L, H) on `natural`, `random` and `repeat`
    tokens: the rate mean [α^w > ε] per corpus. Present when the rate ≥ `present_rate`; supported: present on
    all three; partly: on natural text; else not supported. Interval over windows (each corpus its own)."""
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
                 GU, over="windows", seed=seed, fractions=("present_rate",))  # fmt: skip
