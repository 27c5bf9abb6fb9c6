"""The `kv_plan_measures` claim: KV heads the paper's measures class as sink, diagonal or previous-token heads can
keep only sink + recent window with less loss than random KV heads streamed at equal memory
(`reproduction.kv_plan_section` measures it; the words in `reproduction.claim_texts`).

Per window w, the loss increase over the full cache of the measures' plan, Δ_plan(w) = plan(w) − full(w), and of
random draw d, Δ_d(w) = random(w, d) − full(w). Effects, over the (resampled) windows and draws:

- `saved_share` (primary) = 1 − mean Δ_plan / mean Δ_random: the share of the random plans' loss increase the
  measures' plan avoids (1: no increase at all, 0: as random, < 0: worse than random);
- `beats_random` = the share of draws whose mean loss exceeds the plan's;
- `delta_vs_random` = mean plan − mean random (nats/token, negative = the plan loses less).

Not measurable where the random plans cost no loss (mean Δ_random ≤ 0: the control fails). Supported:
saved_share ≥ `saved_min` and beats_random ≥ `beats_min`; partly: saved_share ≥ `partly_min`; else not supported.
Windows and draws are resampled jointly (crossed).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from sinkscope.reproduction.minima import MIN_DRAWS, MIN_WINDOWS
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, judge

KV_PLAN = {"saved_min": 0.25, "beats_min": 0.9, "partly_min": 0.05}
KV_PLAN_FIXED = {"share": "half of the KV heads kept full (`sinkscope kv-plan`'s default share): another share is "
                          "another set of plans and passes",
                 "window": "sink 4 + recent 32 keys per streaming head (`sinkscope kv-plan`'s defaults, probe "
                           "windows of T = max(2 × seq_len, 54)): another window is another set of passes",
                 "draws": "the random plans the section drew (random_draws) are the control; more draws are more "
                          "passes"}  # fmt: skip


def kv_plan_verdict(model: str, losses: dict[str, np.ndarray], seed: int = 0) -> Verdict:
    """The claim from per-window losses: `full` (W,), `plan` (W,), `random` (W, D) (module doc)."""
    random = np.asarray(losses["random"], float)
    W, D = random.shape
    units = {"full": np.repeat(np.asarray(losses["full"], float)[:, None], D, 1),
             "plan": np.repeat(np.asarray(losses["plan"], float)[:, None], D, 1), "random": random}  # fmt: skip

    def effects(u, th):
        plan_increase = float((u["plan"] - u["full"]).mean())
        random_increase = float((u["random"] - u["full"]).mean())
        gap = float(u["plan"].mean() - u["random"].mean())
        if not random_increase > 0:
            return {"saved_share": math.nan, "random_increase": random_increase}
        return {"saved_share": 1 - plan_increase / random_increase,
                "beats_random": float((u["random"].mean(0) > u["plan"].mean()).mean()),
                "delta_vs_random": gap, "plan_increase": plan_increase, "random_increase": random_increase}  # fmt: skip

    def decide(e, th):
        saved = e["saved_share"]
        if not math.isfinite(saved):
            return NOT_MEASURABLE
        if saved >= th["saved_min"] and e["beats_random"] >= th["beats_min"]:
            return SUPPORTED
        return PARTLY if saved >= th["partly_min"] else NOT_SUPPORTED

    extra = {key: int(losses[key]) for key in ("n_full", "n_kv_heads", "seq_len", "sink_size", "recent_size")
             if key in losses}  # fmt: skip
    extra |= {"loss_full": float(np.mean(losses["full"])), "loss_plan": float(np.mean(losses["plan"])),
              "loss_random": float(random.mean()), "draws": D}  # fmt: skip
    return judge("kv_plan_measures", model, units, effects, decide, KV_PLAN, over="windows × draws",
                 min_units=(MIN_WINDOWS, MIN_DRAWS), crossed=True, fractions=tuple(KV_PLAN), fixed=KV_PLAN_FIXED,
                 evidence=extra, seed=seed, decides_on=("saved_share", "beats_random"))  # fmt: skip


def kv_plan_table(losses: dict[str, np.ndarray]) -> pd.DataFrame:
    """One row per window: the full cache's, the plan's and the random plans' mean loss with their min and max, and
    the share of draws the plan beats."""
    random = np.asarray(losses["random"], float)
    return pd.DataFrame({"window": np.arange(len(random)), "loss_full": losses["full"], "loss_plan": losses["plan"],
                         "loss_random_mean": random.mean(1), "loss_random_min": random.min(1),
                         "loss_random_max": random.max(1),
                         "plan_beats_share": (random > np.asarray(losses["plan"])[:, None]).mean(1)})  # fmt: skip
