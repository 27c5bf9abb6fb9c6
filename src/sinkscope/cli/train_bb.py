"""`sinkscope train-bb`: train tiny transformers on the gBB task (docs/experiments.md) and watch sinks or diagonals
emerge."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from sinkscope.cli.options import config_flags, defer_options, output_options

EPILOG = """examples:
  sinkscope train-bb --out runs/bb                       # default run (~1 min on one free CPU core)
  sinkscope train-bb --out runs/bb_relu --attention relu --weight-decay 1.0
  sinkscope train-bb --out runs/bb_grid --grid ablations # 14 runs: no BOS, RoPE, sink logit, ReLU, gate, wd sweep
  sinkscope train-bb --out runs/x --set model.n_layers=1 --set task.p_copy=0.5
  sinkscope train-bb --out runs/g --grid my_grid.json    # {"name": {"train.weight_decay": 0.3}, ...}
  sinkscope train-bb --out runs/bb_torch --init torch --seeds 0,1,2   # PyTorch's default init, 3 seeds, mean ± std
  sinkscope train-bb --out runs/regimes --grid regimes --quick --workers 2   # the regime map, reduced grid
outputs: config.json, metrics.parquet, summary.json, checkpoints/*.safetensors, figures/*.png, report.html
(a grid also writes summary.parquet with one row per run and timeline.parquet with every head over steps;
--seeds adds seeds.parquet; --grid regimes writes regimes.parquet, regime_cells.parquet and
figures/phase_diagram.png). See docs/experiments.md."""

# Flags whose name is not the field's: the short names train-bb always had, and the task's seed (--seed is the
# training seed). Every other field `section.field_name` is `--field-name`.
FLAG_NAMES = {
    "task.n_triggers": "--triggers",
    "task.dirichlet_alpha": "--alpha",
    "task.seed": "--task-seed",
    "model.n_layers": "--layers",
    "model.n_heads": "--heads",
}


def add_config_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """One flag per RunConfig field (dest `section.field`, default None: unset); {dotted key: flag}. The help is
    TrainConfig's field metadata and `FIELD_HELP` for the task and model fields."""
    from dataclasses import fields
    from typing import get_type_hints

    from sinkscope.synthetic.config import FIELD_HELP, RunConfig, TrainConfig

    helps = {**FIELD_HELP, **{f"train.{f.name}": f.metadata["help"] for f in fields(TrainConfig)}}
    return config_flags(parser, get_type_hints(RunConfig), helps, FLAG_NAMES)  # {task: GBBConfig, ...}


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train-bb",
        help="train tiny transformers on the bigram-backcopy task (sinks vs diagonal patterns)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            output_options("run directory (a grid: one subfolder per run)", as_path=True,
                           overwrite="replace an existing run directory", quiet="no per-evaluation log lines"),
        ],
    )
    parser.add_argument(
        "--grid", help="built-in grid (default, ablations, weight_decay, regimes) or a JSON experiment file"
    )
    parser.add_argument("--seeds", help="comma-separated seeds, e.g. 0,1,2: one run per seed, mean ± spread")
    parser.add_argument("--quick", action="store_true", help="with --grid regimes: the reduced grid (12 runs)")
    parser.add_argument("--workers", type=int, default=1, help="with --grid regimes: runs trained at once")
    defer_options(parser, add_config_flags)  # the config's modules import torch
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
        help="any config field, value parsed as JSON when possible (repeatable)",
    )
    parser.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from sinkscope.errors import SinkscopeError

    # the config flags' dests are the dotted keys (add_config_flags); --set comes after them and wins
    overrides: dict[str, Any] = {key: value for key, value in vars(args).items() if "." in key and value is not None}
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep:
            raise SinkscopeError(f"--set {item!r}: use SECTION.FIELD=VALUE, e.g. --set model.n_layers=1")
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = text
    return overrides


def _seeds(text: str | None) -> tuple[int, ...] | None:
    from sinkscope.errors import SinkscopeError

    if text is None:
        return None
    try:
        seeds = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise SinkscopeError(f"--seeds {text!r}: use comma-separated integers, e.g. --seeds 0,1,2") from None
    if len(set(seeds)) != len(seeds):
        raise SinkscopeError(f"--seeds {text!r}: a seed is repeated; give distinct seeds")
    return seeds


def _run_regimes(args: argparse.Namespace, overrides: dict[str, Any], seeds: tuple[int, ...] | None) -> int:
    from dataclasses import replace

    from sinkscope.synthetic.regimes import FULL_GRID, QUICK_GRID, REGIME_BASE, run_regimes
    from sinkscope.synthetic.train import RunConfig

    base = RunConfig().with_overrides({**REGIME_BASE, **overrides})
    grid = QUICK_GRID if args.quick else FULL_GRID
    if seeds:
        grid = replace(grid, seeds=seeds)
    rows = run_regimes(base, args.out, grid=grid, overwrite=args.overwrite, workers=args.workers,
                       progress=None if args.quiet else lambda line: print(line, flush=True))
    import pandas as pd

    cells = pd.read_parquet(args.out / "regime_cells.parquet")
    print(cells[["cell", "pattern", "agreement", "bos_mass", "diag_mass", "entropy", "copy_acc",
                 "wqk_nuc_over_fro", "nuclear_over_pred"]].round(3).to_string(index=False))
    print(f"{len(rows)} runs; wrote {args.out}/regimes.parquet, regime_cells.parquet, figures/phase_diagram.png")
    return 0


# What a train-bb grid writes at its top level besides its run folders; its folder carries the ownership marker of
# GRID_KIND, and an unstamped folder of an older grid is one holding only these and sinkscope's runs.
GRID_KIND = "train-bb grid"
GRID_FILES = ("summary.parquet", "timeline.parquet", "seeds.parquet", "regimes.json", "regimes.parquet",
              "regime_cells.parquet", "switch_costs.parquet", "figures")


def _check_resumable(out: Path) -> None:
    """Refuse a grid into an existing `out` that is not a train-bb grid's own folder (`ownership.is_workspace`): a
    grid resumes into its own folder and rewrites its tables there, never over a user's `summary.parquet`."""
    from sinkscope.errors import SinkscopeError
    from sinkscope.ownership import is_workspace

    if out.exists() and not out.is_dir():
        raise SinkscopeError(f"--out {out} exists and is not a directory; choose another --out")
    if out.is_dir() and not is_workspace(out, GRID_KIND, GRID_FILES):
        raise SinkscopeError(
            f"--out {out} holds files that no train-bb grid wrote (a folder a grid makes carries sinkscope's marker), "
            "so the grid will not write into it; choose another --out or empty it yourself"
        )


def run(args: argparse.Namespace) -> int:
    from contextlib import nullcontext

    from sinkscope.ownership import stamped
    from sinkscope.staging import claimed_output
    from sinkscope.synthetic.experiments import check_override_types

    overrides = _overrides(args)
    check_override_types(overrides, "--set")
    seeds = _seeds(args.seeds)
    is_grid = bool(args.grid or seeds)
    if is_grid:
        _check_resumable(args.out)
    # A single run claims --out like analyze does; a grid takes only the lock and resumes into its own folder.
    with claimed_output(args.out, args.overwrite, resume=is_grid):
        if is_grid:
            _check_resumable(args.out)  # again under the lock, then stamped as the grid's own folder
        with stamped(args.out, GRID_KIND) if is_grid else nullcontext():
            return _run_claimed(args, overrides, seeds, is_grid)


def _run_claimed(args: argparse.Namespace, overrides: dict[str, Any], seeds: tuple[int, ...] | None, is_grid: bool
                 ) -> int:  # fmt: skip
    """`_run`, with an interrupt turned into the line that says what was kept and how to continue."""
    try:
        return _run(args, overrides, seeds)
    except KeyboardInterrupt:
        if not is_grid:
            raise KeyboardInterrupt("nothing was saved") from None
        import shlex

        argv = [arg for arg in args.argv if arg != "--overwrite"]  # a grid resumes by running it again
        command = " ".join(["sinkscope", *map(shlex.quote, argv)])
        raise KeyboardInterrupt(f"finished runs are kept in {args.out}/; continue with: {command}") from None


def _run(args: argparse.Namespace, overrides: dict[str, Any], seeds: tuple[int, ...] | None) -> int:
    from sinkscope.synthetic.experiments import load_grid, run_grid
    from sinkscope.synthetic.train import RunConfig, train_bb

    if args.grid == "regimes":
        return _run_regimes(args, overrides, seeds)
    base = RunConfig().with_overrides(overrides)
    if args.grid or seeds:
        grid = load_grid(args.grid) if args.grid else {"run": {}}
        table = run_grid(grid, base, args.out, overwrite=args.overwrite, log=not args.quiet, seeds=seeds)
        print(table[["run", *(["seed"] if seeds else []), "heads", "copy_acc", "excess_loss_noncopy",
                     "bos_attn", "diag_attn"]].to_string(index=False))
        if seeds:
            import pandas as pd

            for row in pd.read_parquet(args.out / "seeds.parquet").itertuples():
                spread = "  ".join(f"{k} {getattr(row, k):.3f} ± {getattr(row, k + '_std'):.3f}"
                                   for k in ("copy_acc", "bos_attn", "diag_attn", "entropy"))
                print(f"{row.run}: copy head {row.pattern} ({row.agreement} seeds)  {spread}")
        print(f"wrote {args.out}/summary.parquet{', seeds.parquet' if seeds else ''} and one folder per run")
        return 0
    summary = train_bb(base, args.out, overwrite=True, log=not args.quiet)  # --out was checked and claimed
    print(f"copy_acc {summary['copy_acc']:.3f}  excess_loss_noncopy {summary['excess_loss_noncopy']:.4f}  "
          f"heads: {summary['heads_line']}")
    print(f"wrote {args.out}/report.html")
    return 0
