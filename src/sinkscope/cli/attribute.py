"""`sinkscope attribute`: per head, the switched-off queries split by the route that switched them off."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, model_options, output_options

EPILOG = """examples:
  sinkscope attribute --model smollm2-135m --corpus builtin:prose --seq-len 64 --max-windows 32 --out runs/attr
  sinkscope attribute --model gemma3-270m --tau 0.1 --delta 0.1 --out runs/attr-gemma

A query t ≥ 1 of a head is switched off when ||o_t|| ≤ τ · mean_{j≤t} ||v_j|| (gated models: the gated output).
Each off query takes the first route that holds, among those the architecture has: gate (the attention alone
would stay on), bos_sink (A[t,0] ≥ 1 − δ), learned_sink (m_t ≥ 1 − δ), cancellation (weighted values not small,
their sum is), learned_partial, bos_partial, self_small_value, low_norm_keys. Writes OUT/attribution.parquet
(and .csv), attribution.json (shares over all heads) and figures/attribution.png; see docs/experiments.md,
Switch attribution on real models."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "attribute",
        help="which route (BOS sink, learned sink, gate, diagonal on a small value, cancellation) switches heads off",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(corpus="corpus source (as for analyze)", max_windows=(32, "windows (default 32)")),
            output_options("output directory (written atomically)", overwrite=OVERWRITE_HELP),
        ],
    )
    parser.add_argument("--tau", type=float, default=0.1, help="switch threshold τ (default 0.1)")
    parser.add_argument("--delta", type=float, default=0.1, help="hard-sink threshold δ (default 0.1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random corpora")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.cli.model_windows import model_windows
    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.switch_attribution import save_attribution, switch_attribution

    if not (0 < args.tau < 1 and 0 < args.delta < 1):
        raise SinkscopeError(f"--tau {args.tau} and --delta {args.delta} must lie strictly between 0 and 1")
    with model_windows(args) as (lm, stream):
        table = switch_attribution(lm, stream, args.tau, args.delta, progress=True)
        meta = {"model": lm.identity.get("name", args.model), "corpus": args.corpus, "seq_len": args.seq_len,
                "windows": args.max_windows, "tau": args.tau, "delta": args.delta}  # fmt: skip
        summary = save_attribution(args.out, table, meta)
    shares = ", ".join(f"{name} {share:.3f}" for name, share in summary["shares"].items())
    print(f"{summary['n_off']} switched-off (head, query) pairs ({summary['off_frac']:.3f} of all): {shares} -> {args.out}")
    return 0
