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

WEIGHT_DECAYS = (0.0, 0.01, 0.1, 1.0)  # the default run uses 0.1

# Without BOS and without absolute positions (RoPE) no position is marked, so no token can serve as a sink
# in the first layer: the runs that ask what replaces it.
NO_SINK_TOKEN = {"task.bos": False, "model.positional": "rope"}
# One attention-only layer: the head's output goes straight to the unembedding, so on non-trigger queries a
# dense average of other tokens is noise the model cannot clean up, while a diagonal adds a function of the
# current token only (the paper's soft switch).
ATTENTION_ONLY = {"model.n_layers": 1, "model.mlp": False}

GRIDS: dict[str, dict[str, dict[str, Any]]] = {
    "default": {"default": {}},
    "ablations": {
        "default": {},
        "no_bos": {"task.bos": False},
        "rope": {"model.positional": "rope"},
        "no_bos_rope": NO_SINK_TOKEN,
        "sink_logit": {"model.attention": "softmax_sink"},
        "relu": {"model.attention": "relu"},
        "sigmoid_gate": {"model.attention": "sigmoid_gate"},
        **{f"wd_{wd:g}": {"train.weight_decay": wd} for wd in WEIGHT_DECAYS if wd != 0.1},
        "no_bos_rope_wd_0": {**NO_SINK_TOKEN, "train.weight_decay": 0.0},
        "no_bos_rope_wd_1": {**NO_SINK_TOKEN, "train.weight_decay": 1.0},
        "attn_only": ATTENTION_ONLY,
        "attn_only_no_bos_rope": {**ATTENTION_ONLY, **NO_SINK_TOKEN},
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


def copy_head_timeline(run_dir: Path) -> pd.DataFrame:
    """The copy head's curves of one run (rows = eval steps): its pattern on non-trigger queries over time."""
    run_dir = Path(run_dir)
    head = json.loads((run_dir / "summary.json").read_text())["copy_head"]
    metrics = pd.read_parquet(run_dir / "metrics.parquet")
    rows = metrics[(metrics["layer"] == head["layer"]) & (metrics["head"] == head["head"])]
    columns = ["step", "copy_acc", "excess_loss_noncopy", "bos_attn", "diag_attn", "prev_attn", "copy_attn",
               "row_mass", "gate_plain", "value_drain", "wqk_nuclear", "wqk_frobenius"]
    return rows[columns].sort_values("step").reset_index(drop=True)


def run_grid(
    grid: dict[str, dict[str, Any]], base: RunConfig, out_dir: Path, overwrite: bool = False, log: bool = True
) -> pd.DataFrame:
    """Train every run of `grid` into `out_dir/<name>/`; write `out_dir/summary.parquet` (one row per run) and
    `out_dir/timeline.parquet` (the copy head of every run over steps, see `copy_head_timeline`).

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
    timeline = pd.concat([copy_head_timeline(out_dir / name).assign(run=name) for name in configs])
    for name, frame in (("summary", table), ("timeline", timeline)):
        tmp = out_dir / f".{name}.parquet.tmp"
        frame.to_parquet(tmp, index=False)
        tmp.rename(out_dir / f"{name}.parquet")
    return table
