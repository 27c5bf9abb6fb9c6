"""How a verdict is reached, the same way for every claim: a decision rule on effect sizes, capped by the
effects' bootstrap over the right unit, and flagged (weakened from `supported`, never raised) when half or double any
deciding threshold changes it.

1. **Units.** A verdict needs at least the claim's stated minimum of units (`min_units`); below it, `not
   measurable here: too few UNITS`.
2. **Decision.** A claim's `decide(effects, thresholds)` maps its effect sizes to `supported`, `partly` or
   `not supported` (or `not measurable here` when an effect does not exist on the data, e.g. its control
   fails). It reads only the effect fields the claim declares (`decides_on`; by default every field its
   `effects` returns) and the claim's thresholds; p-values and other evidence may be reported but are never
   passed to it.
3. **Interval.** The effects are recomputed on `n_boot` bootstrap resamples of the units they are measured on
   (windows; windows × draws jointly for ablations; heads *within layers* for per-head claims), giving a 95 %
   percentile interval of the primary effect (of the effect a word's own rule reads, where a claim's `partly` rule
   reads another one: `interval_for`) and a verdict per resample. A resample whose effect does not
   exist (its control fails) counts as a failed resample, not a missing one. Then, in order:
   a. more than 2.5 % failed resamples → `not measurable here` (the control fails too often);
   b. when the 2.5 % and 97.5 % quantiles of the resampled verdicts span `supported` … `not supported` the data
      cannot decide (`not measurable here`); when they differ by one step a `supported` becomes `partly` (the
      interval only ever weakens a verdict: a `not supported` point stays `not supported`);
   c. the verdict is lowered to the majority (median) of the resampled verdicts when it is stronger.
4. **Sensitivity: it annotates or weakens, never raises.** The point verdict is recomputed with *every*
   threshold of the claim halved and doubled, one at a time. A threshold that is a fraction of a whole (a share
   of layers, tokens or heads, an attention mass) is halved and doubled on the odds scale `x / (1 − x)`, so it
   stays a fraction (0.5 → 1/3 and 2/3; 0.05 → 0.026 and 0.095); the others are multiplied by ½ and 2. Where one
   of these differs from the point verdict (a `not measurable here` there carries no information), a
   `supported` verdict becomes `partly` ("depends on NAME"); a `partly` or `not supported` verdict keeps its
   word, with the note "fragile: WORD at NAME = VALUE". So the word comes from the stated thresholds and the
   interval alone, and a verdict whose whole interval lies below its `partly` cut (every resample `not
   supported`, so step 3c gives `not supported`) stays `not supported` whatever a variant says. A threshold the
   measurement fixed (one δ counted under `--quick`, only 20 controls were drawn, a grid of settings) cannot be
   re-decided from the same numbers: the claim names it in `fixed` with the reason, and the sensitivity records
   it as not varied (`verdict: None`, `not_varied: REASON`), never silently.
5. **Descriptive** claims (the paper states a condition, not a frequency) get `descriptive`: the measurement
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
    `reproduction.claim_texts.CLAIMS`.
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

    Resamples whose verdict is not a rank (`not measurable here`: the effect or its control failed) count as
    failures below `not supported`; more than 2.5 % failures → `not measurable here`. Ends = the 2.5 % and
    97.5 % quantiles of the resampled verdicts (ordered not supported < partly < supported): ends `not
    supported` … `supported` give `not measurable here`; ends one step apart lower a `supported` point to
    `partly`; and the result is never stronger than the point verdict nor than the median resampled verdict
    (the majority).
    """
    if point not in _RANK or not resampled:
        return point, ""
    ranks = np.sort([_RANK.get(v, -1) for v in resampled])
    tail = (1 - LEVEL) / 2
    low = int(ranks[int(math.floor(tail * (ranks.size - 1)))])
    high = int(ranks[int(math.ceil((1 - tail) * (ranks.size - 1)))])
    names = {rank: name for name, rank in _RANK.items()}
    if low < 0:
        failed = float((ranks < 0).mean())
        return NOT_MEASURABLE, f"the effect or its control fails in {failed:.1%} of the bootstrap resamples"
    spread = f"the {LEVEL:.0%} bootstrap range of the verdict is {names[low]} … {names[high]}"
    if high - low == 2:
        return NOT_MEASURABLE, f"{spread}: too little data to decide"
    verdict, reasons = point, []
    if low != high:  # the interval can only weaken: a `not supported` point stays `not supported`
        verdict = names[min(_RANK[point], _RANK[PARTLY])]
        reasons.append(spread)
    majority = int(ranks[(ranks.size - 1) // 2])
    if _RANK[verdict] > majority:
        reasons.append(f"the verdict ({verdict}) would be stronger than the majority of resamples "
                       f"({names[majority]})")  # fmt: skip
        verdict = names[majority]
    return verdict, "; ".join(reasons)


def bootstrap_indices(n_units: int, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(n_boot, n_units) indices of resamples with replacement (seeded)."""
    return np.random.default_rng(seed).integers(0, n_units, size=(n_boot, n_units))


def stratified_indices(strata: np.ndarray, n_boot: int = N_BOOT, seed: int = 0) -> np.ndarray:
    """(n_boot, n) indices of resamples drawn with replacement *within* each stratum (e.g. heads within their
    layer), so every resample keeps each stratum's size."""
    strata = np.asarray(strata)
    rng = np.random.default_rng(seed)
    out = np.empty((n_boot, strata.size), dtype=np.int64)
    for label in np.unique(strata):
        members = np.flatnonzero(strata == label)
        out[:, members] = members[rng.integers(0, members.size, size=(n_boot, members.size))]
    return out


def resamples(units: Mapping[str, np.ndarray], n_boot: int = N_BOOT, seed: int = 0, strata: np.ndarray | None = None,
              crossed: bool = False) -> list[dict[str, np.ndarray]]:  # fmt: skip
    """`n_boot` bootstrap resamples of `units`.

    Default: arrays of one length share their indices (paired units, e.g. a head's value and its group), arrays of
    another length (another corpus's windows) get their own. `strata` (one label per unit of the arrays of that
    length): resample within strata. `crossed`: every array is (W, D, ...) and both axes are resampled
    independently (windows × draws jointly, the pigeonhole bootstrap of a crossed design).
    """
    if crossed:
        shape = {np.shape(v)[:2] for v in units.values()}
        if len(shape) != 1:
            raise ValueError(f"crossed units need one (W, D) shape, got {sorted(shape)}")
        W, D = shape.pop()
        rows, cols = bootstrap_indices(W, n_boot, seed), bootstrap_indices(D, n_boot, seed + 1)
        return [{k: np.asarray(v)[rows[b]][:, cols[b]] for k, v in units.items()} for b in range(n_boot)]
    lengths = sorted({len(v) for v in units.values()})
    draws = {n: bootstrap_indices(n, n_boot, seed + i) for i, n in enumerate(lengths)}
    if strata is not None:
        draws[len(strata)] = stratified_indices(strata, n_boot, seed)
    return [{k: np.asarray(v)[draws[len(v)][b]] for k, v in units.items()} for b in range(n_boot)]


def percentile_interval(values: np.ndarray, estimate: float) -> tuple[float, float]:
    """The `LEVEL` percentile interval of the finite bootstrap values (NaN, NaN when none is finite)."""
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    if values.size == 0 or not math.isfinite(estimate):
        return math.nan, math.nan
    tail = 100 * (1 - LEVEL) / 2
    return float(np.percentile(values, tail)), float(np.percentile(values, 100 - tail))


def deciding(effects: Effects, names: tuple[str, ...] | None = None) -> Effects:
    """The effect fields a decision may read: the declared `names` (those `effects` returned), or, with none
    declared, every field `effects` returned. Reading any other field (a p-value, say) raises KeyError, however
    the field is spelled."""
    return dict(effects) if names is None else {name: effects[name] for name in names if name in effects}


def too_few(claim: str, model: str, what: str, n: int, needed: int, evidence: dict | None = None,
            thresholds: Mapping[str, float] | None = None) -> Verdict:  # fmt: skip
    """`not measurable here: too few WHAT` (n of at least `needed`)."""
    return Verdict(claim, model, NOT_MEASURABLE, dict(evidence or {}) | {f"n_{what.replace(' ', '_')}": n},
                   dict(thresholds or {}), f"too few {what}: {n} (a verdict needs at least {needed})")  # fmt: skip


def judge(
    claim: str,
    model: str,
    units: Mapping[str, np.ndarray],
    effects: Callable[[Mapping[str, np.ndarray], Mapping[str, float]], Effects],
    decide: Decide,
    thresholds: Mapping[str, float],
    *,
    over: str,
    min_units: int | tuple[int, int] | None = None,
    fractions: tuple[str, ...] = (),
    fixed: Mapping[str, str] | None = None,
    evidence: dict | None = None,
    descriptive: bool = False,
    strata: np.ndarray | None = None,
    crossed: bool = False,
    seed: int = 0,
    n_boot: int = N_BOOT,
    decides_on: tuple[str, ...] | None = None,
    interval_for: Mapping[str, str] | None = None,
) -> Verdict:
    """The verdict of one claim by the steps of this module.

    `units`: arrays whose first axis (with `crossed`, first two axes) is the resampling unit (see `resamples`),
    or empty for an exact test (no interval; `over` then says why); `effects(units, thresholds)` → `{name:
    value}` (the first is the primary effect, whose interval is reported); `decide(effects, thresholds)` →
    verdict, called with the effect fields named in `decides_on` only (default: every field of `effects`; p-values
    belong in `evidence`, which `decide` never sees). `min_units`: the fewest units (with `crossed`: (windows, draws)) a
    verdict needs, else `not measurable here: too few OVER`. Every threshold is varied (`fractions` on the odds
    scale) but where `fixed` says why not (`threshold_sensitivity`). `evidence` joins the effects in the record.
    """
    thresholds, fixed = dict(thresholds), dict(fixed or {})
    base = dict(evidence or {})
    if not units:  # an exact test: no resampling unit, no interval
        return _exact(claim, model, effects, decide, thresholds, fractions, fixed, base, over, decides_on)
    if min_units is None:
        raise ValueError(f"{claim}: a verdict over units needs a stated minimum (min_units)")
    shape = next(iter(units.values())).shape
    counts = (min(len(v) for v in units.values()),) if not crossed else tuple(shape[:2])
    needed = (min_units,) if isinstance(min_units, int) else tuple(min_units)
    names = over.split(" × ") if crossed else [over]
    for n, need, name in zip(counts, needed, names):
        if n < need:
            return too_few(claim, model, name, n, need, base, thresholds)
    point = effects(units, thresholds)
    name = next(iter(point))
    resampled_effects = [effects(r, thresholds) for r in resamples(units, n_boot, seed, strata, crossed)]
    low, high = percentile_interval(np.array([e[name] for e in resampled_effects]), point[name])
    interval = {"effect": name, "estimate": point[name], "low": low, "high": high, "level": LEVEL,
                "over": over + (" (within strata)" if strata is not None else ""), "n": counts[0]}  # fmt: skip
    record = base | point
    if descriptive:
        return Verdict(claim, model, DESCRIPTIVE, record, thresholds, "the paper states a condition, not a frequency: "
                       "measured, not judged", interval=interval)  # fmt: skip
    point_verdict = decide(deciding(point, decides_on), thresholds)
    if point_verdict == NOT_MEASURABLE:
        return Verdict(claim, model, point_verdict, record, thresholds, point_reason(point), interval=interval)
    verdict, reason = capped(point_verdict, [decide(deciding(e, decides_on), thresholds) for e in resampled_effects])
    sensitivity = threshold_sensitivity(units, effects, decide, thresholds, fractions, fixed, decides_on)
    verdict, reason = sensitive_verdict(verdict, reason, point_verdict, sensitivity)
    shown = (interval_for or {}).get(verdict, name)
    if shown != name:
        estimate = point.get(shown, math.nan)
        low, high = percentile_interval(np.array([e.get(shown, math.nan) for e in resampled_effects]), estimate)
        primary = {key: interval[key] for key in ("effect", "estimate", "low", "high")}
        interval |= {"effect": shown, "estimate": estimate, "low": low, "high": high, "primary": primary}
    return Verdict(claim, model, verdict, record, thresholds, reason, interval=interval, sensitivity=sensitivity)


def scaled_threshold(value: float, scale: float, fraction: bool) -> float:
    """`value × scale`, or for a fraction its odds `x / (1 − x)` times `scale`, mapped back to a fraction."""
    if not fraction:
        return value * scale
    odds = value / (1 - value) * scale
    return odds / (1 + odds)


def threshold_sensitivity(units, effects, decide: Decide, thresholds: dict, fractions=(),
                          fixed: Mapping[str, str] | None = None,
                          decides_on: tuple[str, ...] | None = None) -> list[dict]:  # fmt: skip
    """The point verdict with every threshold halved and doubled, one at a time (the names in `fractions` on the
    odds scale).

    `fixed` names what the measurement fixed, with the reason, keyed `NAME` (not varied at all: one record with
    scale None; NAME need not be a threshold, e.g. the head fraction of an ablation) or `NAME×SCALE` (a threshold
    varied at the other scale only, e.g. `n_controls×2` when only 20 controls were drawn). Those records carry
    `verdict: None` and `not_varied: REASON`; `sensitive_verdict` reads only the varied ones.
    """
    fixed = dict(fixed or {})
    out = []
    for name in thresholds:
        for scale in SCALES:
            value = scaled_threshold(thresholds[name], scale, name in fractions)
            why = fixed.get(name) or fixed.get(f"{name}×{scale:g}")
            if why:
                out.append({"threshold": name, "scale": scale, "value": value, "verdict": None, "not_varied": why})
                continue
            changed = thresholds | {name: value}
            out.append({"threshold": name, "scale": scale, "value": value,
                        "verdict": decide(deciding(effects(units, changed), decides_on), changed)})  # fmt: skip
    for name, why in fixed.items():
        if name not in thresholds and name.split("×")[0] not in thresholds:
            out.append({"threshold": name, "scale": None, "value": None, "verdict": None, "not_varied": why})
    return out


def _exact(claim, model, effects, decide: Decide, thresholds: dict, fractions: tuple, fixed: dict, evidence: dict,
           note: str, decides_on: tuple[str, ...] | None) -> Verdict:  # fmt: skip
    """A claim decided by an exact computation (closed forms, certificates on every token): no interval."""
    point = effects({}, thresholds)
    verdict = decide(deciding(point, decides_on), thresholds)
    record = evidence | point | {"interval_note": note}
    if verdict == NOT_MEASURABLE:
        return Verdict(claim, model, verdict, record, thresholds, point_reason(point))
    sensitivity = threshold_sensitivity({}, effects, decide, thresholds, fractions, fixed, decides_on)
    verdict, reason = sensitive_verdict(verdict, "", verdict, sensitivity)
    return Verdict(claim, model, verdict, record, thresholds, reason, sensitivity=sensitivity)


def point_reason(effects: Effects) -> str:
    missing = [name for name, value in effects.items() if not (isinstance(value, float) and math.isfinite(value))]
    return f"not defined on this data: {', '.join(missing)}" if missing else "not defined on this data"


def sensitive_verdict(verdict: str, reason: str, point: str, sensitivity: list[dict]) -> tuple[str, str]:
    """The verdict after the sensitivity step, which may annotate or weaken a verdict but never raise it.

    A varied threshold whose point verdict differs from `point` is named: a `supported` verdict becomes `partly`
    ("depends on NAME (NAME: partly at VALUE)"); a `partly` or `not supported` verdict keeps its word and carries
    the note "fragile: WORD at NAME = VALUE" (a variant may say `partly` where the stated thresholds say `not
    supported`: that is recorded, never adopted)."""
    moved = {}
    for record in sensitivity:
        if record["verdict"] in _RANK and record["verdict"] != point:
            moved.setdefault(record["threshold"], []).append((record["verdict"], record["value"]))
    if not moved or verdict not in _RANK:
        return verdict, reason
    if verdict == SUPPORTED:
        words = "; ".join(f"{name}: {', '.join(f'{v} at {x:.3g}' for v, x in where)}" for name, where in moved.items())
        verdict, note = PARTLY, f"depends on {', '.join(moved)} ({words})"
    else:
        note = "fragile: " + "; ".join(f"{v} at {name} = {x:.3g}" for name, where in moved.items() for v, x in where)
    return verdict, "; ".join(part for part in (reason, note) if part)
