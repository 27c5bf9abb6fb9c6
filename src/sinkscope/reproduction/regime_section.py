"""`reproduce`'s regime section: the bigram-backcopy regime map of section 4 (which mechanism small models learn
with and without BOS), trained or read for the judge. The map itself is `synthetic.regimes`.

Calls the regime map of `sinkscope train-bb --grid regimes` (`sinkscope.synthetic.regimes.run_regimes`) with its
quick grid (2 initialisations × BOS on/off × 3 seeds, 1000 steps each), as many runs at once as this process has
threads (`regime_workers`: the CLI's `--threads`, by default the free CPUs), each in its own process; a run's
numbers do not depend on the others or on the process it trains in (its seed and thread count are its own). `reproduce --quick` does not train them:
one run of even 250 steps took 99 s on the shared 2-core machine (and had not learned its pattern yet), so the
claim is "not measurable here" in a quick reproduction unless the same output directory already holds the map.
`--regimes-from DIR` reads a map that `sinkscope train-bb --grid regimes --out DIR` wrote. Where this
installation has no regime map, the section says so.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import is_fresh, log, write_key

UNAVAILABLE = "this installation has no bigram-backcopy regime map (`train-bb --grid regimes`): {error}"
QUICK_REASON = ("--quick does not train the bigram-backcopy regime map (12 small models, minutes of CPU); run "
                "without --quick, or rerun --quick into an output directory that already holds it")


def cells_by_init(cells: pd.DataFrame) -> dict[str, tuple[dict, dict]]:
    """`{init: (with BOS, without BOS)}` from regime_cells.parquet (softmax attention, the smallest weight decay),
    each `{"bos_mass", "diag_mass", "pattern", "agreement"}`."""
    cells = cells[cells["variant"] == "softmax"]
    cells = cells[cells["weight_decay"] == cells["weight_decay"].min()]
    out = {}
    for init, group in cells.groupby("init", sort=False):
        pair = []
        for bos in (True, False):
            row = group[group["bos"] == bos]
            if row.empty:
                break
            row = row.iloc[0]
            pair.append({"bos_mass": float(row["bos_mass"]), "diag_mass": float(row["diag_mass"]),
                         "pattern": str(row["pattern"]), "agreement": str(row["agreement"])})  # fmt: skip
        if len(pair) == 2:
            out[str(init)] = (pair[0], pair[1])
    return out


CELL_FIELDS = ("variant", "weight_decay", "init", "bos", "bos_mass", "diag_mass", "pattern", "agreement")


def read_regime_map(directory: str | Path) -> pd.DataFrame:
    """regime_cells.parquet of a regime map that `train-bb --grid regimes` wrote, checked to be one (readable, with
    the columns `cells_by_init` reads); anything else is one line naming the file."""
    path = Path(directory) / "regime_cells.parquet"
    fix = "pass the --out of `sinkscope train-bb --grid regimes`, or train it again there"
    try:
        cells = pd.read_parquet(path)
    except Exception as err:  # pyarrow raises its own types on a file that is not parquet or is cut short
        raise SinkscopeError(f"--regimes-from {directory}: {path} is not readable ({type(err).__name__}: "
                             f"{str(err)[:160]}); {fix}") from None  # fmt: skip
    missing = [name for name in CELL_FIELDS if name not in cells.columns]
    if missing or cells.empty:
        raise SinkscopeError(f"--regimes-from {directory}: {path} is not a regime map "
                             f"({'it lacks ' + ', '.join(missing) if missing else 'it has no rows'}); {fix}")  # fmt: skip
    return cells


def regime_key() -> dict:
    """What the regimes section is computed with: the quick grid and the base configuration every run starts from
    (`synthetic.regimes.REGIME_BASE` over `RunConfig`'s defaults), so a change to either trains the map again."""
    from sinkscope.synthetic.regimes import QUICK_GRID, REGIME_BASE
    from sinkscope.synthetic.train import RunConfig

    return {"section": "regimes", "grid": json.loads(json.dumps(QUICK_GRID.__dict__, default=list)),
            "base": RunConfig().with_overrides(REGIME_BASE).to_dict()}  # fmt: skip


def regime_workers(runs: int) -> int:
    """Processes run at once for `runs` independent jobs (the regime map's and the boundary lab's trainings, the
    layer costs' windows): the torch threads of this process (which `reproduce --threads`, auto by default, sets to
    the CPUs free of load), at most `runs`, at least 1."""
    import torch

    return max(1, min(torch.get_num_threads(), runs))


def regime_runs(config: ReproduceConfig, out: Path) -> dict:
    """`{"inits": cells_by_init(...), "cells": table, "grid": ...}`, or `{"reason": why not measurable}`."""
    if config.regimes_from is not None:
        log(f"regimes: reading {config.regimes_from}")
        cells = read_regime_map(config.regimes_from)
        return {"inits": cells_by_init(cells), "cells": cells, "source": config.regimes_from}
    if not config.regimes:
        return {"reason": "the regime map was switched off (regimes=False)"}
    try:
        from sinkscope.synthetic.regimes import QUICK_GRID, run_regimes
    except (ImportError, AttributeError) as err:
        return {"reason": UNAVAILABLE.format(error=err)}
    directory = out / "regimes"
    key = regime_key()
    if not is_fresh(directory, key):
        if config.quick:
            return {"reason": QUICK_REASON}
        grid = QUICK_GRID
        runs = len(grid.cells()) * len(grid.seeds)
        workers = regime_workers(runs)
        log(f"regimes: training {runs} bigram-backcopy models, {workers} at once")
        run_regimes(out_dir=directory, grid=grid, progress=lambda line: log(f"regimes: {line}"), workers=workers)
        write_key(directory, key)
    else:
        log(f"regimes: reusing {directory}")
    cells = pd.read_parquet(directory / "regime_cells.parquet")
    return {"inits": cells_by_init(cells), "cells": cells, "grid": key["grid"]}
