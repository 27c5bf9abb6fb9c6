"""`sinkscope prevalence`: the share of sink, diagonal, previous-token, dense and mixed heads per layer, with
intervals over windows."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, model_options, output_options

EPILOG = """examples:
  sinkscope prevalence --model smollm2-135m --corpus builtin:prose --seq-len 64 --max-windows 32 --out runs/prev
  sinkscope prevalence --model gemma3-270m --corpus builtin:code --out runs/prev-gemma-code

Each head is classified in each window (sink: mean_t A[t,0] > ε; diagonal: mean A[t,t] > 0.5; previous-token:
mean A[t,t-1] > 0.5; dense: normalised entropy > 0.7; else mixed; first match wins). Writes OUT/prevalence.parquet
(layer, class, share, share_lo, share_hi; layer -1 = whole model), prevalence_heads.parquet,
prevalence_windows.parquet, prevalence.json, figures/prevalence.png and report.html; see docs/experiments.md."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "prevalence",
        help="share of sink / diagonal / previous-token / dense / mixed heads per layer, with intervals over windows",
        description="How common each head pattern is: every head classified in every window.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(corpus="corpus source (as for analyze)",
                           max_windows=(32, "windows (default 32)")),
            output_options("output directory (written atomically)", overwrite=OVERWRITE_HELP),
        ],
    )
    parser.add_argument("--epsilon", type=float, default=0.3, help="sink threshold ε (default 0.3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random corpora")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.cli.model_windows import model_windows
    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.prevalence import run_prevalence, save_prevalence

    if not 0 < args.epsilon < 1:
        raise SinkscopeError(f"--epsilon {args.epsilon} must be between 0 and 1 (a share of attention)")
    with model_windows(args) as (lm, stream):
        result = run_prevalence(lm, stream, args.epsilon)
        save_prevalence(args.out, result, overwrite=True)
    overall = result["layers"][result["layers"]["layer"] == -1]
    print(f"{result['meta']['n_windows']} windows -> {args.out}")
    for _, row in overall.iterrows():
        print(f"  {row['class']:<15} {row['share']:.3f} [{row['share_lo']:.3f}, {row['share_hi']:.3f}]")
    return 0
