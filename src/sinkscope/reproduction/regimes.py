"""The bigram-backcopy regime map of section 4: which mechanism small models learn with and without BOS.

It calls the `train-bb --grid regimes` Python API when this installation has it; otherwise the section says why
it is not measurable here.
"""

from __future__ import annotations

from pathlib import Path

from sinkscope.reproduction.config import ReproduceConfig

UNAVAILABLE = (
    "this installation has no `train-bb --grid regimes` Python API (the built-in grids are {grids}); the "
    "regime map needs it"
)


def regime_runs(config: ReproduceConfig, out: Path) -> dict:
    """`{"with_bos": {"sink", "diag"}, "without_bos": {...}, "frame": table}` or `{"reason": why not}`."""
    from sinkscope.synthetic.experiments import GRIDS

    if not config.regimes:
        return {"reason": "the regime map was switched off (regimes=False)"}
    if "regimes" not in GRIDS:
        return {"reason": UNAVAILABLE.format(grids=", ".join(GRIDS))}
    return {"reason": "the regimes grid exists but its result format is not read by this version of reproduce"}
