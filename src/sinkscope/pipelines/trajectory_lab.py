"""A `sinkscope train-bb` run as a trajectory: the lab's own per-head measures at every evaluation step.

The lab's checkpoints are its `TinyTransformer`, not Hugging Face models, but the run already measured every head
at every evaluation step on one fixed evaluation batch (the same gBB sequences at every step, sampled from seed
`train.seed + 1`): `metrics.parquet`, one row per (step, layer, head) (docs/experiments.md). `lab_table` turns it
into `trajectory.parquet`'s shape without running the model again:

    sink_score = bos_attn = mean A[t,0],  diag_score = diag_attn = mean A[t,t],  entropy (normalised row entropy),
    prev_score = prev_attn = mean A[t,t-1] (only when the task's copy offset k is 1; else NaN),

each a mean over the batch's non-trigger queries (not over every query as `analyze` does: on a trigger the task
asks the head to copy, elsewhere to switch off; without BOS, key 0 is the first token). Every other column of
`metrics.parquet` is kept as it is. `head_class` is `analyze`'s classifier (`classify_head`) on these masses with
the trajectory's thresholds (sink > ε, diagonal > the diagonal threshold), so the class map and `emergence` agree.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.trajectory import TrajectoryConfig, write_trajectory

# metrics.parquet column → trajectory.parquet column (the statistic of the same name in analyze's heads table).
RENAMED = {"bos_attn": "sink_score", "diag_attn": "diag_score", "entropy": "entropy"}


def read_lab_run(run_dir: str | Path) -> tuple[pd.DataFrame, dict]:
    """`metrics.parquet` and `config.json` of a train-bb run folder, or one line naming what is wrong and the fix."""
    run_dir = Path(run_dir).expanduser()
    metrics_path, config_path = run_dir / "metrics.parquet", run_dir / "config.json"
    if not metrics_path.is_file() or not config_path.is_file():
        runs = sorted(p.parent.name for p in run_dir.glob("*/metrics.parquet")) if run_dir.is_dir() else []
        fix = f"pass one run's folder, e.g. {run_dir / runs[0]}" if runs else \
            "pass the folder `sinkscope train-bb --out` wrote"  # fmt: skip
        raise SinkscopeError(f"--train-bb {run_dir} holds no metrics.parquet and config.json of a train-bb run; {fix}")
    try:
        metrics, config = pd.read_parquet(metrics_path), json.loads(config_path.read_text(encoding="utf-8"))
    except Exception as err:  # pyarrow's ArrowInvalid, OSError, JSONDecodeError: a damaged run
        raise SinkscopeError(f"--train-bb {run_dir}'s metrics.parquet or config.json is damaged "
                             f"({type(err).__name__}); train the run again") from None  # fmt: skip
    if not isinstance(config, dict) or not all(isinstance(config.get(k), dict) for k in ("task", "model", "train")):
        raise SinkscopeError(f"{config_path} is not a train-bb run's config (no task, model and train sections); "
                             "pass the folder `sinkscope train-bb --out` wrote")  # fmt: skip
    missing = [c for c in ("step", "layer", "head", "prev_attn", *RENAMED) if c not in metrics.columns]
    if missing:
        raise SinkscopeError(f"{metrics_path} lacks {', '.join(missing)}: it was not written by train-bb; train again")
    if metrics["step"].nunique() < 2:
        raise SinkscopeError(f"--train-bb {run_dir} was evaluated at {metrics['step'].nunique()} step(s); a trajectory "
                             "needs two: train with --eval-every below --steps")  # fmt: skip
    return metrics, config


def lab_table(metrics: pd.DataFrame, copy_offset: int, epsilon: float, diagonal: float) -> pd.DataFrame:
    """`trajectory.parquet`'s rows from a run's `metrics.parquet` (module doc): the renamed masses, `prev_score`,
    `head_class`, and every other column of the run as it is."""
    from sinkscope.functional.head_classes import HeadThresholds, classify_head

    table = metrics.rename(columns=RENAMED)
    table["prev_score"] = table["prev_attn"] if copy_offset == 1 else math.nan
    thresholds = HeadThresholds(sink=epsilon, diagonal=diagonal)
    table["head_class"] = [classify_head(r.sink_score, r.diag_score, r.prev_score, r.entropy, thresholds=thresholds)
                           for r in table.itertuples(index=False)]  # fmt: skip
    return table


def lab_trajectory(run_dir: str | Path, out: str | Path, probe_of: Callable[[dict], dict], epsilon: float = 0.3,
                   diagonal: float = TrajectoryConfig.diagonal,
                   command: str = "") -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """The trajectory files of a train-bb run (`write_trajectory` into `out`): returns the table and the emergence
    table. `probe_of(config)` names the run's evaluation batch (`synthetic.evaluation.evaluation_probe`, passed in by
    the command: the lab's package sits beside this one)."""
    metrics, config = read_lab_run(run_dir)
    out = Path(out)
    # a trajectory of checkpoints has cells/: never overwrite it with a lab run's table
    ours = (out / "trajectory.parquet").is_file() and not (out / "cells").exists()
    if out.is_file() or (out.is_dir() and any(out.iterdir()) and not ours):
        raise SinkscopeError(f"--out {out} exists and is not a train-bb trajectory folder; choose another folder")
    TrajectoryConfig(epsilon=epsilon, diagonal=diagonal)  # ε and the diagonal threshold: refused here if invalid
    table = lab_table(metrics, config["task"]["copy_offset"], epsilon, diagonal)
    model = config["model"]
    meta = {"config": {"epsilon": epsilon, "diagonal": diagonal}, "source": "train-bb", "command": command,
            "probe": probe_of(config), "run": str(Path(run_dir).resolve()),
            "model": {"name": f"train-bb TinyTransformer ({model['n_layers']} layer(s), {model['n_heads']} heads, "
                              f"{model['attention']}, init {model['init']})"},
            "versions": config.get("versions", {})}  # fmt: skip
    return table, write_trajectory(table, meta, out)
