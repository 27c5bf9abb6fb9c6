"""`sinkscope evict`: keep-the-sink evaluation (StreamingLLM): loss when the KV cache keeps a recent window, plus the
first k tokens or the k tokens of largest column mass."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, int_list, model_options, output_options

EPILOG = """examples:
  sinkscope evict --model smollm2-135m --corpus builtin:prose --seq-len 256 --window 32 --max-windows 16 --out runs/ev
  sinkscope evict --model gemma3-270m --ks 0,1,2,4,8 --window 64 --seq-len 512 --out runs/ev-gemma

Each query t keeps the keys j ≤ t with t − j < --window, plus k kept tokens (the first k: BOS is position 0; or
the k of largest column mass of the window's own full pass). Evicted keys are masked in one forward pass with the
absolute RoPE positions kept, which equals decoding with an evicting KV cache (StreamingLLM instead re-numbers
positions inside its cache). Writes OUT/eviction.parquet (per window, policy, k), OUT/eviction_summary.parquet
(Δ loss vs the full cache and vs the window alone with 95 % intervals), OUT/eviction.json, OUT/figures/eviction.png,
OUT/report.html. See docs/experiments.md, Keep-the-sink."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "evict",
        help="keep-the-sink evaluation: loss with a recent-window KV cache, with and without the first tokens",
        description="StreamingLLM's functional test of a sink: next-token loss when every query sees only a recent "
        "window of keys, the window plus the first k tokens, or the window plus the k tokens of largest column mass.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(corpus="corpus source (as for analyze)",
                           max_windows=(16, "windows the loss is averaged over (default 16)")),
            output_options("output directory (written atomically)", overwrite=OVERWRITE_HELP),
        ],
    )
    parser.add_argument("--window", type=int, default=32, help="recent keys each query keeps, itself included "
                        "(default 32)")  # fmt: skip
    parser.add_argument("--ks", type=int_list, default=(0, 1, 2, 4), help="kept-set sizes (default 0,1,2,4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of random corpora")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from sinkscope.cli.model_windows import model_windows
    from sinkscope.pipelines.eviction import EvictConfig, run_eviction, save_eviction

    config = EvictConfig(window=args.window, ks=args.ks)
    config.check_seq_len(args.seq_len)
    with model_windows(args) as (lm, stream):
        losses, summary, meta = run_eviction(lm, stream, config, progress=True)
        save_eviction(args.out, losses, summary, meta, overwrite=True)
    print(f"{summary['n_windows'].iloc[0]} windows, T={args.seq_len}, window {args.window} -> {args.out}")
    for _, row in summary.iterrows():
        print(f"  {row['policy']:<9} k={row['k']}: loss {row['loss']:.4f}  Δ vs full {row['delta_full']:+.4f} "
              f"[{row['delta_full_lo']:+.4f}, {row['delta_full_hi']:+.4f}]")  # fmt: skip
    return 0
