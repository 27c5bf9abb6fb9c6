"""How a verdict is reached, the same way for every claim: a decision rule on effects, capped by the effects'
bootstrap interval and flagged when half or double a threshold changes it.

1. **Decision.** A claim's `decide(effects, thresholds)` maps its measured effects to `supported`, `partly` or
   `not supported` (or `not measurable here` when an effect does not exist on the data).
2. **Interval.** The effects are recomputed on `n_boot` bootstrap resamples of the units they are measured on
   (windows; random draws for ablations; heads for per-head weights and smoothing), giving a 95 % percentile
   interval of the primary effect and a verdict per resample. The verdict is never stronger than the interval
   allows: when the 2.5 % and 97.5 % quantiles of the resampled verdicts differ by one step the verdict is
   `partly`; when they span `supported` … `not supported` the data cannot decide (`not measurable here`).
3. **Sensitivity.** The verdict is recomputed with each threshold halved and doubled, one at a time. A
   threshold that is a fraction of a whole (a share of layers, tokens or heads, an attention mass) is halved
   and doubled on the odds scale `x / (1 − x)`, so it stays a fraction (0.5 → 1/3 and 2/3; 0.05 → 0.026 and
   0.095); the others (τ, δ, ratios, p-values, tolerances of exponents) are multiplied by ½ and 2. If any of these differs (a `not measurable here` there carries no information), a
   `supported` or `not supported` verdict becomes `partly`, with the reason "depends on NAME".
4. **Descriptive** claims (the paper states a condition, not a frequency) get `descriptive`: the measurement
   and its interval, no verdict.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field

import numpy as np

SUPPORTED, PARTLY, NOT_SUPPORTED = "supported", "partly", "not supported"
NOT_MEASURABLE, DESCRIPTIVE = "not measurable here", "descriptive"
VERDICTS = (SUPPORTED, PARTLY, NOT_SUPPORTED, NOT_MEASURABLE, DESCRIPTIVE)
_RANK = {NOT_SUPPORTED: 0, PARTLY: 1, SUPPORTED: 2}
LEVEL = 0.95  # two-sided level of every interval
N_BOOT = 1000  # bootstrap resamples
SCALES = (0.5, 2.0)  # every threshold is recomputed at half and double its value

Effects = dict[str, float]
Decide = Callable[[Effects, Mapping[str, float]], str]


@dataclass(frozen=True)
class Verdict:
    """One claim checked on one model: the verdict, the numbers it rests on and how sure it is.

    `interval`: `{effect, estimate, low, high, level, over, n}` (the primary effect's bootstrap interval, or
    `None` with the reason in `evidence["interval_note"]`); `sensitivity`: one record per threshold and scale
    `{threshold, scale, value, verdict}`. The claim's words, test and control are added by `to_dict` from
    `reproduction.claims.CLAIMS`.
    """

    claim: str
    model: str
    verdict: str
    evidence: dict = field(default_factory=dict)
    thresholds: dict = field(default_factory=dict)
    reason: str = ""
    corpus: str | None = None
    interval: dict | None = None
    sensitivity: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict {self.verdict!r} is not one of {VERDICTS}")

    def to_dict(self) -> dict:
        return {k: plain(v) for k, v in asdict(self).items()}


def plain(value):
    """JSON-ready: numpy scalars to floats/ints, NaN to None, tuples to lists, recursively."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, np.ndarray)):
        return [plain(v) for v in value]
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(float(value)) else float(f"{float(value):.6g}")
    return value


def graded(value: float, supported_at: float, partly_at: float, higher_is_better: bool = True) -> str:
    """`supported` past `supported_at`, `partly` past `partly_at`, else `not supported`; NaN: not measurable."""
    if not math.isfinite(value):
        return NOT_MEASURABLE
    sign = 1.0 if higher_is_better else -1.0
    if sign * value >= sign * supported_at:
        return SUPPORTED
    return PARTLY if sign * value >= sign * partly_at else NOT_SUPPORTED


def capped(point: str, resampled: list[str]) -> tuple[str, str]:
    """The point verdict limited by the verdicts of the bootstrap resamples: `(verdict, reason)`.

    Ends = the 2.5 % and 97.5 % quantiles of the resampled verdicts (ordered not supported < partly <
    supported; resamples where the effect does not exist are left out). Equal ends keep the point verdict;
    ends one step apart give `partly`; ends `not supported` … `supported` give `not measurable here`.
    """
    if point not in _RANK:
        return point, ""
    ranks = np.sort([_RANK[v] for v in resampled if v in _RANK])
    if ranks.size == 0:
        return point, ""
    tail = (1 - LEVEL) / 2
    low = int(ranks[int(math.floor(tail * (ranks.size - 1)))])
    high = int(ranks[int(math.ceil((1 - tail) * (ranks.size - 1)))])
    names = {rank: name for name, rank in _RANK.items()}
    if low == high:
        return point, ""
    spread = f"the {LEVEL:.0%} bootstrap range of the verdict is {names[low]} … {names[high]}"
    if high - low == 2:
        return NOT_MEASURABLE, f"{spread}: too little data to decide"
    return PARTLY, spread


def bootstrap_indices(n_units: int, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(n_boot, n_units) indices of resamples with replacement (seeded)."""
    return np.random.default_rng(seed).integers(0, n_units, size=(n_boot, n_units))


def resamples(units: Mapping[str, np.ndarray], n_boot: int = N_BOOT, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """`n_boot` bootstrap resamples of `units`: arrays of one length share their indices (paired units, e.g.
    a head's value and its group), arrays of another length (another corpus's windows) get their own."""
    lengths = sorted({len(v) for v in units.values()})
    draws = {n: bootstrap_indices(n, n_boot, seed + i) for i, n in enumerate(lengths)}
    return [{k: np.asarray(v)[draws[len(v)][b]] for k, v in units.items()} for b in range(n_boot)]


def percentile_interval(values: np.ndarray, estimate: float) -> tuple[float, float]:
    """The `LEVEL` percentile interval of the finite bootstrap values (NaN, NaN when none is finite)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0 or not math.isfinite(estimate):
        return math.nan, math.nan
    tail = 100 * (1 - LEVEL) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def judge(
    claim: str,
    model: str,
    units: Mapping[str, np.ndarray],
    effects: Callable[[Mapping[str, np.ndarray], Mapping[str, float]], Effects],
    decide: Decide,
    thresholds: Mapping[str, float],
    *,
    over: str,
    sensitive: tuple[str, ...] | None = None,
    fractions: tuple[str, ...] = (),
    evidence: dict | None = None,
    min_units: int = 2,
    descriptive: bool = False,
    cap: bool = True,
    primary: Callable[[Mapping[str, np.ndarray], Mapping[str, float]], float] | None = None,
    seed: int = 0,
    n_boot: int = N_BOOT,
) -> Verdict:
    """The verdict of one claim by the steps of this module.

    `units`: arrays whose first axis is the resampling unit (see `resamples`), or empty for an exact test
    (no interval; `over` then says why); `effects(units, thresholds)`
    → `{name: value}` (the first is the primary effect, whose interval is reported); `decide(effects,
    thresholds)` → verdict. `sensitive`: the thresholds varied (default: all). Fewer than `min_units` units →
    `not measurable here` with the reason. `evidence` joins the effects in the record.
    """
    thresholds = dict(thresholds)
    base = dict(evidence or {})
    if not units:  # an exact test: no resampling unit, no interval
        return _exact(claim, model, effects, decide, thresholds, (sensitive, fractions), base, over)
    n = min(len(v) for v in units.values())
    if n < min_units:
        reason = f"only {n} {over} (at least {min_units} are needed for an interval)"
        return Verdict(claim, model, NOT_MEASURABLE, base, thresholds, reason)
    point = effects(units, thresholds)
    name = next(iter(point))
    if primary is not None and cap:
        raise ValueError("a primary-only resample cannot cap the verdict: pass cap=False with primary")
    compute = effects if primary is None else (lambda u, th: {name: primary(u, th)})
    resampled_effects = [compute(resample, thresholds) for resample in resamples(units, n_boot, seed)]
    low, high = percentile_interval(np.array([e[name] for e in resampled_effects]), point[name])
    interval = {"effect": name, "estimate": point[name], "low": low, "high": high, "level": LEVEL,
                "over": over, "n": n}  # fmt: skip
    record = base | point
    if descriptive:
        return Verdict(claim, model, DESCRIPTIVE, record, thresholds, "the paper states a condition, not a frequency: "
                       "measured, not judged", interval=interval)  # fmt: skip
    verdict = decide(point, thresholds)
    if verdict == NOT_MEASURABLE:
        return Verdict(claim, model, verdict, record, thresholds, point_reason(point), interval=interval)
    verdict, reason = capped(verdict, [decide(e, thresholds) for e in resampled_effects]) if cap else (verdict, "")
    sensitivity = threshold_sensitivity(units, effects, decide, thresholds, sensitive, fractions)
    verdict, reason = sensitive_verdict(verdict, reason, decide(point, thresholds), sensitivity)
    return Verdict(claim, model, verdict, record, thresholds, reason, interval=interval, sensitivity=sensitivity)


def scaled_threshold(value: float, scale: float, fraction: bool) -> float:
    """`value × scale`, or for a fraction its odds `x / (1 − x)` times `scale`, mapped back to a fraction."""
    if not fraction:
        return value * scale
    odds = value / (1 - value) * scale
    return odds / (1 + odds)


def threshold_sensitivity(units, effects, decide: Decide, thresholds: dict, sensitive, fractions=()) -> list[dict]:
    """The point verdict with each threshold (of `sensitive`, default all) halved and doubled, one at a time
    (the names in `fractions` on the odds scale)."""
    out = []
    for name in sensitive if sensitive is not None else tuple(thresholds):
        for scale in SCALES:
            changed = thresholds | {name: scaled_threshold(thresholds[name], scale, name in fractions)}
            out.append({"threshold": name, "scale": scale, "value": changed[name],
                        "verdict": decide(effects(units, changed), changed)})  # fmt: skip
    return out


def _exact(claim, model, effects, decide: Decide, thresholds: dict, varied: tuple, evidence: dict, note: str
           ) -> Verdict:  # fmt: skip
    """A claim decided by an exact computation (closed forms, certificates on every token): no interval."""
    point = effects({}, thresholds)
    verdict = decide(point, thresholds)
    record = evidence | point | {"interval_note": note}
    if verdict == NOT_MEASURABLE:
        return Verdict(claim, model, verdict, record, thresholds, point_reason(point))
    sensitivity = threshold_sensitivity({}, effects, decide, thresholds, *varied)
    verdict, reason = sensitive_verdict(verdict, "", verdict, sensitivity)
    return Verdict(claim, model, verdict, record, thresholds, reason, sensitivity=sensitivity)


def point_reason(effects: Effects) -> str:
    missing = [name for name, value in effects.items() if not (isinstance(value, float) and math.isfinite(value))]
    return f"not defined on this data: {', '.join(missing)}" if missing else "not defined on this data"


def sensitive_verdict(verdict: str, reason: str, point: str, sensitivity: list[dict]) -> tuple[str, str]:
    """`partly: depends on NAME` when halving or doubling a threshold changes the point verdict."""
    moved = {}
    for record in sensitivity:
        if record["verdict"] in _RANK and record["verdict"] != point:
            moved.setdefault(record["threshold"], []).append(f"{record['verdict']} at {record['value']:.3g}")
    if not moved or verdict not in _RANK:
        return verdict, reason
    words = "; ".join(f"{name}: {', '.join(where)}" for name, where in moved.items())
    note = f"depends on {', '.join(moved)} ({words})"
    return PARTLY, "; ".join(part for part in (reason, note) if part)
