"""`sinkscope switch-assumptions`: the switch theorem's assumptions per layer and window, the switch agreement
conditioned on them, and what the switched-off queries that are not sinks are."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, model_options, output_options

EPILOG = """examples:
  sinkscope switch-assumptions --model smollm2-135m --corpus builtin:prose --seq-len 64 --max-windows 16 --out runs/sw
  sinkscope switch-assumptions --model gemma3-270m --tau 0.1 --delta 0.1 --min-distance 0.05 --out runs/sw-gemma

Per (layer, window): numerical rank of the context inputs z_1..z_{T-1} and BOS's relative distance from their span,
and the smallest rank over KV heads of the context values v_1..v_{T-1} (singular values above 1e-4 × the largest);
the assumptions hold when both ranks are full (T - 1; the values' needs T - 1 ≤ head_dim) and the distance ≥
--min-distance. Agreement P(hard sink | switched off)
where they hold / fail / overall (95 % bootstrap interval over windows); every switched-off non-sink query listed
and sorted (near sink, self with a small value, another small-value key, spread). Writes OUT/switch_*.parquet,
switch_assumptions.json, figures/switch_assumptions.png and report.html; see docs/experiments.md."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "switch-assumptions",
        help="the switch theorem's assumptions per layer and window, and the switch agreement conditioned on them",
        description="Judge the hard-switch theorem's assumptions on real windows and inspect its exceptions.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(corpus="corpus source (as for analyze)", max_windows=(16, "windows (default 16)")),
            output_options("output directory (written atomically)", overwrite=OVERWRITE_HELP),
        ],
    )
    parser.add_argument("--tau", type=float, default=0.1, help="switched off: ||o_t|| ≤ τ·mean ||v_j|| (default 0.1)")
    parser.add_argument("--delta", type=float, default=0.1, help="hard sink: A[t,0] ≥ 1 − δ (default 0.1)")
    parser.add_argument("--min-distance", type=float, default=0.05,
                        help="BOS's relative distance from the contexts' span at which it counts as outside "
                        "(default 0.05)")  # fmt: skip
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and of random corpora")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.cli.model_windows import model_windows
    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.switch_assumptions import (
        SwitchConfig,
        run_switch_assumptions,
        save_switch_assumptions,
    )

    for name in ("tau", "delta", "min_distance"):
        if not 0 < getattr(args, name) < 1:
            raise SinkscopeError(f"--{name.replace('_', '-')} {getattr(args, name)} must be between 0 and 1")
    config = SwitchConfig(tau=args.tau, delta=args.delta, min_distance=args.min_distance, seed=args.seed)
    with model_windows(args) as (lm, stream):
        result = run_switch_assumptions(lm, stream, config)
        save_switch_assumptions(args.out, result, overwrite=True)
    print(f"-> {args.out}")
    for _, row in result["conditioned"].iterrows():
        print(f"  {row['cells']:<17} {row['n_cells']:>4} cells, {row['switched']:>6} switched off: agreement "
              f"{row['agreement']:.3f} [{row['agreement_lo']:.3f}, {row['agreement_hi']:.3f}]")  # fmt: skip
    for _, row in result["categories"].iterrows():
        print(f"  not a hard sink, {row['category']:<22} {row['queries']:>6} ({row['share']:.1%})")
    return 0
