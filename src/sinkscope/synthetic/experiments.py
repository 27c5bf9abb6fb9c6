"""Named experiment grids of the gBB lab: the default run and its ablations (SPEC §7), each small enough for CPU.

A grid is a list of (name, overrides) applied to a base `RunConfig` with `RunConfig.with_overrides`. Besides the
built-in grids, a JSON file `{"name": {"section.field": value, ...}, ...}` defines one.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.staging import child, safe_name, staged_file_bytes
from sinkscope.synthetic.summary import row_pattern
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
            f"--grid {name_or_path!r}: neither a built-in grid ({', '.join(GRIDS)}, regimes) nor a JSON file"
        )
    try:
        grid = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise SinkscopeError(f"--grid {path} is not a JSON file ({err}); fix it or pass a built-in grid") from None
    if not isinstance(grid, dict) or not all(isinstance(v, dict) for v in grid.values()):
        raise SinkscopeError(f"--grid {path}: expected a JSON object {{run name: {{section.field: value}}}}")
    return grid


_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def check_override_types(overrides: dict[str, Any], source: str) -> None:
    """Refuse in one line an override whose value has the wrong type for its field (`train.steps` 'abc'),
    which the config would otherwise meet deep inside as a TypeError. `source` names where it came from."""
    from dataclasses import fields
    from typing import get_type_hints

    sections = get_type_hints(RunConfig)
    for key, value in overrides.items():
        section, _, name = key.partition(".")
        if section not in sections:
            continue  # with_overrides names the unknown key
        kind = next((get_type_hints(sections[section])[f.name] for f in fields(sections[section]) if f.name == name),
                    None)  # fmt: skip
        if kind not in _KINDS:
            continue
        ok = isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            ok = True
        if not ok:
            raise SinkscopeError(f"{source} {key}={value!r}: expected {_KINDS[kind]} for {key}")


# Columns of summary.parquet: one row per run (and seed) of a grid.
SUMMARY_KEYS = (
    "seconds", "loss", "bayes_loss", "excess_loss_noncopy", "copy_acc", "copy_head_wqk_nuc_over_fro",
    "copy_head_pred_nuclear", "first_step_copy_acc_0.9", "first_step_copy_head_bos_0.5",
    "first_step_copy_head_diag_0.5",
)
# Columns averaged over seeds in seeds.parquet (mean and `_std`).
SEED_KEYS = ("copy_acc", "excess_loss_noncopy", "bos_attn", "diag_attn", "entropy", "switch_off", "wqk_nuclear",
             "wqk_frobenius", "copy_head_wqk_nuc_over_fro")


def summary_row(name: str, summary: dict[str, Any]) -> dict[str, Any]:
    """One flat row of a run's summary: every head's pattern (`heads`), the copy and switch heads, the copy
    head's final masses and norms, timings."""
    head, switch = summary["copy_head"], summary["switch_head"]
    return {
        "run": name,
        "heads": summary["heads_line"],
        "copy_head": f"L{head['layer']}H{head['head']}",
        "pattern": head["pattern"],
        "switch_head": f"L{switch['layer']}H{switch['head']}",
        "switch_pattern": switch["pattern"],
        **{k: summary[k] for k in SUMMARY_KEYS},
        **summary["copy_head_final"],
    }


def head_timeline(run_dir: Path) -> pd.DataFrame:
    """Every head of one run over the eval steps (rows = step × layer × head): its pattern on non-trigger
    queries (`summary.row_pattern`) and the curves behind it."""
    metrics = pd.read_parquet(Path(run_dir) / "metrics.parquet")
    columns = ["step", "layer", "head", "pattern", "copy_acc", "excess_loss_noncopy", "bos_attn", "diag_attn",
               "prev_attn", "copy_attn", "entropy", "row_mass", "gate_plain", "switch_off", "value_drain",
               "wqk_nuclear", "wqk_frobenius"]
    metrics["pattern"] = [row_pattern(row) for row in metrics.itertuples()]
    return metrics[columns].sort_values(["step", "layer", "head"]).reset_index(drop=True)


def seed_table(table: pd.DataFrame) -> pd.DataFrame:
    """Mean ± spread over seeds: one row per run of a `run_grid` table with a `seed` column. `pattern` is the
    copy head's majority pattern and `agreement` its count (e.g. 2/3); `X_std` the population std of X."""
    rows = []
    for name, group in table.groupby("run", sort=False):
        counts = group["pattern"].value_counts()
        rows.append({
            "run": name, "n_seeds": len(group), "pattern": counts.index[0],
            "agreement": f"{counts.iloc[0]}/{len(group)}", "patterns": ", ".join(group["pattern"]),
            **{k: group[k].mean() for k in SEED_KEYS},
            **{f"{k}_std": group[k].std(ddof=0) for k in SEED_KEYS},
        })
    return pd.DataFrame(rows)


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    """Write `path` whole or not at all (`staging.staged_file_bytes`); a full disk is one line."""
    staged_file_bytes(path, frame.to_parquet(index=False))


def _is_text(name: str) -> bool:
    """Whether `name` encodes as UTF-8 (JSON's '\\ud800' escapes and undecodable file names do not)."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def run_folders(grid: dict[str, dict[str, Any]]) -> dict[str, str]:
    """{run name: its folder} (`safe_name`); names whose folders would coincide on a case-insensitive file system
    are refused in one line."""
    for name in grid:
        if not _is_text(name):
            raise SinkscopeError(f"--grid run name {name!r} is not valid Unicode text (a lone surrogate); rename it")
    folders = {name: safe_name(name) for name in grid}
    seen: dict[str, str] = {}
    for name, folder in folders.items():
        other = seen.setdefault(folder.casefold(), name)
        if other != name:
            raise SinkscopeError(
                f"--grid runs {other!r} and {name!r} would share one folder ({folder}) on a case-insensitive file "
                "system; rename one of them"
            )
    return folders


def trained_with(run_dir: Path, config: RunConfig) -> bool:
    """Whether the finished run in `run_dir` was trained with exactly `config` on files of the same content (its
    config.json, package versions aside: `train.config_record`), so a grid may reuse it."""
    try:
        saved = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return False
    if not isinstance(saved, dict):
        return False
    saved.pop("versions", None)
    inputs = saved.pop("inputs", {})  # a run recorded before its inputs were read none (no bigram text file)
    return saved == json.loads(json.dumps(config.to_dict())) and inputs == config.inputs()


def run_grid(
    grid: dict[str, dict[str, Any]],
    base: RunConfig,
    out_dir: Path,
    overwrite: bool = False,
    log: bool = True,
    seeds: tuple[int, ...] | None = None,
) -> pd.DataFrame:
    """Train every run of `grid` into `out_dir/<name>/` (with `seeds`: `out_dir/<name>/seed_<s>/`, one run per
    seed); write `out_dir/summary.parquet` (one row per run and seed, see `summary_row`),
    `out_dir/timeline.parquet` (every head of every run over steps, see `head_timeline`) and with `seeds`
    `out_dir/seeds.parquet` (mean ± spread over seeds, see `seed_table`).

    Runs whose directory already holds a summary.json are reused unless `overwrite`, so an interrupted grid
    resumes where it stopped. A run's folder is `staging.safe_name(name)`: the name itself when it is plain, else
    a readable part and a hash, always one folder inside `out_dir`.
    """
    out_dir = Path(out_dir)
    folders = run_folders(grid)
    jobs = []  # (name, seed or None, run dir, config), all validated before any training
    for name, overrides in grid.items():
        for seed in seeds if seeds else (None,):
            extra = {} if seed is None else {"train.seed": seed}
            run_dir = child(out_dir, folders[name])
            run_dir = run_dir if seed is None else child(run_dir, f"seed_{seed}")
            check_override_types(overrides, f"--grid run {name!r}:")
            jobs.append((name, seed, run_dir, base.with_overrides({**overrides, **extra})))
    rows, timelines = [], []
    for name, seed, run_dir, config in jobs:
        finished = (run_dir / "summary.json").is_file() and not overwrite
        if finished and trained_with(run_dir, config):
            summary = json.loads((run_dir / "summary.json").read_text())
        else:
            if finished:
                print(f"train-bb: {run_dir} was trained with another configuration (its config.json): training "
                      "it again", file=sys.stderr)  # fmt: skip
            if log:
                print(f"== {name}{'' if seed is None else f' seed {seed}'}: {grid[name]}", flush=True)
            summary = train_bb(config, run_dir, overwrite=True, log=log)
        rows.append({**summary_row(name, summary), **({} if seed is None else {"seed": seed})})
        timelines.append(head_timeline(run_dir).assign(run=name, **({} if seed is None else {"seed": seed})))
    table = pd.DataFrame(rows)
    _write_parquet(table, out_dir / "summary.parquet")
    _write_parquet(pd.concat(timelines), out_dir / "timeline.parquet")
    if seeds:
        _write_parquet(seed_table(table), out_dir / "seeds.parquet")
    return table
