"""`sinkscope sweep`: sink rates across models × corpora × window lengths × thresholds, one pass per cell."""

from __future__ import annotations

import argparse
import sys

from sinkscope.cli.options import corpus_options, model_options, output_options

EXAMPLE = """examples:
  sinkscope sweep --models smollm2-135m,gemma3-270m --corpora builtin:prose,builtin:random \\
      --seq-lens 64,256 --epsilons 0.1,0.3,0.5,0.8 --max-windows 32 --out sweeps/gu
  sinkscope sweep ... --out sweeps/gu      # run again: finished cells are skipped, missing ones run
writes DIR/cells/<model>__<corpus>__T<T>/ (a run directory per cell), DIR/sweep.parquet and DIR/sweep.csv
(one row per model × corpus × T × ε), DIR/figures/*.png and DIR/report.html; columns in docs/statistics.md"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="sink rates over models × corpora × T × ε (resumable)",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(model=False),  # many models: --models
            corpus_options(seq_len=None, max_windows=(64, "windows per cell (default 64)"), bos_id=False),
            output_options("sweep directory (created, or continued if it exists)",
                           quiet="no progress bars (the per-cell lines remain)"),
        ],
    )
    parser.add_argument("--models", required=True, help="comma-separated models (embedded names, dirs, hub ids)")
    parser.add_argument("--corpora", required=True, help="comma-separated corpus sources (as for analyze)")
    parser.add_argument("--seq-lens", required=True, help="comma-separated window lengths T, e.g. 64,256")
    parser.add_argument("--epsilons", default="0.1,0.3,0.5,0.8", help="comma-separated thresholds ε")
    parser.add_argument("--seed", type=int, default=0, help="seed for random corpora")
    parser.set_defaults(func=run)


def split(text: str, convert: type, option: str) -> tuple:
    """'64,256' → (64, 256), or one clear error naming the option."""
    from sinkscope.errors import SinkscopeError

    try:
        return tuple(convert(part.strip()) for part in text.split(",") if part.strip())
    except ValueError:
        raise SinkscopeError(f"{option} {text!r}: expected comma-separated {convert.__name__} values") from None


def run(args: argparse.Namespace) -> int:
    from sinkscope.pipelines.sweep import SweepConfig, sweep

    config = SweepConfig(
        models=split(args.models, str, "--models"), corpora=split(args.corpora, str, "--corpora"),
        seq_lens=split(args.seq_lens, int, "--seq-lens"), epsilons=split(args.epsilons, float, "--epsilons"),
        max_windows=args.max_windows, batch_size=args.batch_size, seed=args.seed, device=args.device,
        dtype=args.dtype,
    )  # fmt: skip
    try:
        table = sweep(config, args.out, progress=not args.quiet,
                      echo=lambda line: print(line, file=sys.stderr, flush=True))  # fmt: skip
    except KeyboardInterrupt:
        from sinkscope.cli.analyze import resume_command

        command = resume_command(args).removesuffix(" --resume")  # a sweep resumes by running it again
        raise KeyboardInterrupt(f"finished cells are kept in {args.out}/cells/; continue with: {command}") from None
    print(f"{len(table)} rows in {args.out}/sweep.csv (figures and report.html beside it)")
    return 0
