"""Named experiment grids of the gBB lab: the default run and its ablations (SPEC §7), each small enough for CPU.

A grid is a list of (name, overrides) applied to a base `RunConfig` with `RunConfig.with_overrides`. Besides the
built-in grids, a JSON file `{"name": {"section.field": value, ...}, ...}` defines one.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.train import RunConfig, train_bb

WEIGHT_DECAYS = (0.0, 0.01, 0.1, 0.3, 1.0)

GRIDS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {"default": {}},
    "ablations": {
        "default": {},
        "no_bos": {"task.bos": False},
        "sink_logit": {"model.attention": "softmax_sink"},
        "relu": {"model.attention": "relu"},
        "sigmoid_gate": {"model.attention": "sigmoid_gate"},
        **{f"wd_{wd:g}": {"train.weight_decay": wd} for wd in WEIGHT_DECAYS},
    },
    "weight_decay": {f"wd_{wd:g}": {"train.weight_decay": wd} for wd in WEIGHT_DECAYS},
}


def load_grid(name_or_path: str) -> dict[str, dict[str, Any]]:
    """A built-in grid by name, or a JSON experiment file mapping run names to dotted overrides."""
    if name_or_path in GRIDS:
        return GRIDS[name_or_path]
    path = Path(name_or_path)
    if not path.is_file():
        raise SinkscopeError(
            f"--grid {name_or_path!r}: neither a built-in grid ({', '.join(GRIDS)}) nor a JSON file"
        )
    grid = json.loads(path.read_text())
    if not isinstance(grid, dict) or not all(isinstance(v, dict) for v in grid.values()):
        raise SinkscopeError(f"--grid {path}: expected a JSON object {{run name: {{section.field: value}}}}")
    return grid


# Columns of summary.parquet: one row per run of a grid.
SUMMARY_KEYS = (
    "seconds", "loss", "bayes_loss", "excess_loss_noncopy", "copy_acc", "copy_head_wqk_nuc_over_fro",
    "copy_head_pred_nuclear", "first_step_copy_acc_0.9", "first_step_copy_head_bos_0.5",
    "first_step_copy_head_diag_0.5",
)


def summary_row(name: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One flat row of a run's summary (copy-head pattern, masses, norms, timings)."""
    head = summary["copy_head"]
    return {
        "run": name,
        "copy_head": f"L{head['layer']}H{head['head']}",
        "pattern": head["pattern"],
        **{k: summary[k] for k in SUMMARY_KEYS},
        **summary["copy_head_final"],
    }


def run_grid(
    grid: dict[str, dict[str, Any]], base: RunConfig, out_dir: Path, overwrite: bool = False, log: bool = True
) -> pd.DataFrame:
    """Train every run of `grid` into `out_dir/<name>/` and write `out_dir/summary.parquet` (one row per run).

    Runs whose directory already holds a summary.json are reused unless `overwrite`, so an interrupted grid
    resumes where it stopped.
    """
    out_dir = Path(out_dir)
    configs = {name: base.with_overrides(overrides) for name, overrides in grid.items()}  # validate all first
    rows = []
    for name, config in configs.items():
        run_dir = out_dir / name
        if (run_dir / "summary.json").is_file() and not overwrite:
            summary = json.loads((run_dir / "summary.json").read_text())
        else:
            if log:
                print(f"== {name}: {grid[name]}", flush=True)
            summary = train_bb(config, run_dir, overwrite=True, log=log)
        rows.append(summary_row(name, summary))
    table = pd.DataFrame(rows)
    tmp = out_dir / ".summary.parquet.tmp"
    table.to_parquet(tmp, index=False)
    tmp.rename(out_dir / "summary.parquet")
    return table
