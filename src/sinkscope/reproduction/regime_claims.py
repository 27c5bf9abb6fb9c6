"""Section 4's lab claim `bigram_backcopy_regimes`: the synthetic bigram-backcopy task's switch head sinks when
BOS is available (the runs: `reproduction.regime_section`). Seed means in, a `Verdict` out by the steps of
`reproduction.verdicts`; the claim's words in `reproduction.claim_texts`."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, PARTLY, SUPPORTED, Verdict, judge

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
                    over="seed means per cell (agreement over seeds in the evidence)", evidence=evidence,
                    decides_on=("inits_with_sink",))  # fmt: skip
    holding = [init for init, (with_bos, _) in inits.items() if with_bos["bos_mass"] >= REGIMES["bos_mass"]]
    if verdict.verdict == PARTLY and 0 < len(holding) < len(inits):  # partly by the inits, not by a threshold
        note = f"init-dependent: a sink with BOS at {', '.join(holding)} only"
        return replace(verdict, reason="; ".join(p for p in (note, verdict.reason) if p))
    return verdict
