"""`sinkscope train-bb`: train tiny transformers on the gBB task (SPEC §7) and watch sinks or diagonals emerge."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

EPILOG = """examples:
  sinkscope train-bb --out runs/bb                       # default run (~1 min on one free CPU core)
  sinkscope train-bb --out runs/bb_relu --attention relu --weight-decay 1.0
  sinkscope train-bb --out runs/bb_grid --grid ablations # 14 runs: no BOS, RoPE, sink logit, ReLU, gate, wd sweep
  sinkscope train-bb --out runs/x --set model.n_layers=1 --set task.p_copy=0.5
  sinkscope train-bb --out runs/g --grid my_grid.json    # {"name": {"train.weight_decay": 0.3}, ...}
outputs: config.json, metrics.parquet, summary.json, checkpoints/*.safetensors, figures/*.png, report.html
(a grid also writes summary.parquet with one row per run)."""

# (flag, dotted config key, type, help) for the most used settings; --set reaches every field.
FLAGS: tuple[tuple[str, str, Any, str], ...] = (
    ("--steps", "train.steps", int, "training steps"),
    ("--lr", "train.lr", float, "AdamW learning rate"),
    ("--weight-decay", "train.weight_decay", float, "AdamW weight decay on matrices"),
    ("--batch-size", "train.batch_size", int, "sequences per step"),
    ("--eval-every", "train.eval_every", int, "steps between evaluations"),
    ("--seed", "train.seed", int, "seed of the model init and the data"),
    ("--threads", "train.threads", int, "torch CPU threads"),
    ("--vocab-size", "task.vocab_size", int, "V, tokens besides BOS"),
    ("--triggers", "task.n_triggers", int, "K, number of triggers (ids 0..K-1)"),
    ("--copy-offset", "task.copy_offset", int, "k, a trigger at t copies s_{t-k}"),
    ("--p-copy", "task.p_copy", float, "probability that a trigger copies"),
    ("--alpha", "task.dirichlet_alpha", float, "Dirichlet concentration of the bigram rows"),
    ("--bigram-text", "task.bigram_text", str, "text file whose character bigram replaces the Dirichlet rows"),
    ("--length", "task.length", int, "L, positions per sequence including BOS"),
    ("--layers", "model.n_layers", int, "transformer layers"),
    ("--heads", "model.n_heads", int, "heads per layer"),
    ("--d-model", "model.d_model", int, "residual width"),
    ("--attention", "model.attention", str, "softmax | softmax_sink | relu | sigmoid_gate"),
    ("--positional", "model.positional", str, "learned | rope | none"),
    ("--norm", "model.norm", str, "layernorm | rmsnorm"),
    ("--norm-position", "model.norm_position", str, "pre | post"),
)


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train-bb",
        help="train tiny transformers on the bigram-backcopy task (sinks vs diagonal patterns)",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--out", type=Path, required=True, help="run directory (a grid: one subfolder per run)")
    parser.add_argument("--grid", help="built-in grid (default, ablations, weight_decay) or a JSON experiment file")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing run directory")
    parser.add_argument("--no-bos", action="store_true", help="remove BOS from the model's input")
    parser.add_argument("--no-mlp", action="store_true", help="attention-only blocks")
    for flag, key, kind, text in FLAGS:
        metavar = key.split(".")[1].upper()
        parser.add_argument(flag, type=kind, dest=key, default=None, metavar=metavar, help=f"{text} ({key})")
    parser.add_argument(
        "--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
        help="any config field, value parsed as JSON when possible (repeatable)",
    )
    parser.add_argument("--quiet", action="store_true", help="no per-evaluation log lines")
    parser.set_defaults(func=run)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    from sinkscope.errors import SinkscopeError

    overrides: dict[str, Any] = {key: getattr(args, key) for _, key, _, _ in FLAGS if getattr(args, key) is not None}
    if args.no_bos:
        overrides["task.bos"] = False
    if args.no_mlp:
        overrides["model.mlp"] = False
    for item in args.set:
        key, sep, text = item.partition("=")
        if not sep:
            raise SinkscopeError(f"--set {item!r}: use SECTION.FIELD=VALUE, e.g. --set model.n_layers=1")
        try:
            overrides[key] = json.loads(text)
        except json.JSONDecodeError:
            overrides[key] = text
    return overrides


def run(args: argparse.Namespace) -> int:
    from sinkscope.synthetic.experiments import load_grid, run_grid
    from sinkscope.synthetic.train import RunConfig, train_bb

    base = RunConfig().with_overrides(_overrides(args))
    if args.grid:
        table = run_grid(load_grid(args.grid), base, args.out, overwrite=args.overwrite, log=not args.quiet)
        print(table[["run", "pattern", "copy_acc", "excess_loss_noncopy", "bos_attn", "diag_attn"]].to_string())
        print(f"wrote {args.out}/summary.parquet and one folder per run")
        return 0
    summary = train_bb(base, args.out, overwrite=args.overwrite, log=not args.quiet)
    head = summary["copy_head"]
    final = summary["copy_head_final"]
    print(
        f"copy_acc {summary['copy_acc']:.3f}  excess_loss_noncopy {summary['excess_loss_noncopy']:.4f}  "
        f"copy head L{head['layer']}H{head['head']}: {head['pattern']} "
        f"(BOS {final['bos_attn']:.2f}, diag {final['diag_attn']:.2f})"
    )
    print(f"wrote {args.out}/report.html")
    return 0
