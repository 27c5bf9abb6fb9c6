"""`sinkscope cost`: the cost of sink vs diagonal attention patterns over T, d, margins and embeddings (SPEC §6)."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import corpus_options, float_list, int_list, model_options, output_options
from sinkscope.errors import SinkscopeError

EPILOG = """examples:
  sinkscope cost --out runs/cost                                  # orthonormal + gaussian, T=4..32 (~1 min)
  sinkscope cost --family gaussian,low_rank --rank 4 --d 4,8,16,32 --T 4,8,16 --seeds 3 --out runs/lowrank
  sinkscope cost --family anti_aligned --rho 0.3 --delta 0.1 --norm nuclear --out runs/anti
  sinkscope cost --model smollm2-135m --layer 10 --T 16 --seeds 4 --out runs/cost-smollm2

writes OUT/cost.parquet (one row per setting: T, d, family, layer, seed, pattern, norm, causal, kappa, delta,
cost, rank, reduced_dim, solver, status, seconds, closed_form), OUT/fits.csv (exponents of cost ~ T^a),
OUT/run.json and OUT/figures/{cost_vs_T,ratio,regime_map}.png. Infeasible settings have cost inf."""


def _names(text: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in text.split(",") if part.strip())


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "cost",
        help="cost (nuclear/Frobenius norm of W_QK) of sink vs diagonal patterns",
        description="Minimum-norm W_QK realising a sink or a diagonal attention pattern with logit margin "
        "kappa, swept over context length T, dimension d, margins and embedding families, or measured on "
        "the attention inputs of a real model's layers (docs/theory/cost.md).",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(default=None, model_help="embedded name, hub id, local dir or .gguf (family model)",
                          device=False),
            corpus_options(corpus="windows for --model (default builtin:prose)", seq_len=None, batch_size=False,
                           bos_id=False),
            output_options("output directory (written atomically)", overwrite="replace --out if it exists"),
        ],
    )
    parser.add_argument("--family", type=_names, default=None,
                        help="comma-separated: orthonormal, gaussian, shared_mean, anti_aligned, low_rank, model "
                        "(default orthonormal,gaussian; model when --model is given)")
    parser.add_argument("--T", type=int_list, default=(4, 8, 16, 32), help="context lengths (default 4,8,16,32)")
    parser.add_argument("--d", type=int_list, default=(8, 16, 32, 64),
                        help="embedding dimensions of the synthetic families (default 8,16,32,64)")
    margin = parser.add_mutually_exclusive_group()
    margin.add_argument("--kappa", type=float_list, default=(1.0,), help="logit margins (default 1)")
    margin.add_argument("--delta", type=float_list, default=(),
                        help="attention mass allowed off the target; kappa = log(T(1-delta)/delta) per T")
    parser.add_argument("--norm", type=_names, default=("nuclear", "frobenius"),
                        help="nuclear and/or frobenius (default both)")
    parser.add_argument("--pattern", type=_names, default=("sink", "diagonal"), help="sink and/or diagonal")
    parser.add_argument("--noncausal", action="store_true", help="every query sees every key (default causal)")
    parser.add_argument("--seeds", type=int, default=2, help="random draws, or windows for --model (default 2)")
    parser.add_argument("--rho", type=float, default=0.5, help="shared-mean strength for shared_mean/anti_aligned")
    parser.add_argument("--rank", type=int, default=4, help="rank r of the low_rank family (default 4)")
    parser.add_argument("--solver", choices=("auto", "clarabel", "scs"), default="auto",
                        help="auto: Clarabel up to T=16, SCS up to T=64, beyond: an error naming the closed form")
    parser.add_argument("--layer", type=int_list, default=None, help="layers of --model (default every layer)")
    parser.add_argument("--raw", action="store_true", help="use the model's z as is instead of unit-normalising")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sinkscope.pipelines.cost_sweep import CostSweepConfig, fit_exponents, run_cost_sweep
    from sinkscope.staging import claimed_output

    families = args.family or (("model",) if args.model else ("orthonormal", "gaussian"))
    if "model" in families and not args.model:
        raise SinkscopeError("--family model needs --model NAME (e.g. --model smollm2-135m)")
    config = CostSweepConfig(
        families=families, Ts=args.T, ds=args.d, kappas=() if args.delta else args.kappa, deltas=args.delta,
        norms=args.norm, patterns=args.pattern, causal=not args.noncausal, seeds=args.seeds, rho=args.rho,
        rank=args.rank, solver=args.solver, model=args.model or "smollm2-135m",
        layers=args.layer, corpus=args.corpus, normalize=not args.raw,
    )
    with claimed_output(Path(args.out), args.overwrite):  # an unwritable or busy --out fails before the sweep
        frame = run_cost_sweep(config, Path(args.out), overwrite=True, progress=True)
    print(f"{len(frame)} settings -> {args.out}/cost.parquet; statuses {frame['status'].value_counts().to_dict()}")
    fits = fit_exponents(frame)
    if len(fits):
        table = fits.pivot_table(index=["family", "dim", "layer", "norm"], columns="pattern", values="exponent")
        print("exponent a of cost ~ T^a (dim 0: orthonormal, d = T+1; layer -1: synthetic):")
        print(table.round(2).to_string())
    return 0
