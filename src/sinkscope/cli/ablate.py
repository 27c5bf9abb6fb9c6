"""`sinkscope ablate`: switch heads off (zero them, or move their attention to BOS) and measure the loss change."""

from __future__ import annotations

import argparse

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, float_list, model_options, output_options

EPILOG = """examples:
  sinkscope ablate --model smollm2-135m --corpus builtin:prose --seq-len 64 --max-windows 64 --out runs/abl
  sinkscope ablate --model gemma3-270m --select lowest-ahon-ln --select highest-hard-sink --fractions 0.05,0.1,0.2 \\
      --mode bos --out runs/abl-gemma-bos
  sinkscope ablate --from-run runs/x --select class:sink --out runs/abl-sink-heads   # scores/classes of an analyze run
  sinkscope ablate --select heads:3.1,4.2 --out runs/abl-two

selections (repeat --select): lowest-ahon-ln, highest-hard-sink (one set per fraction), random (baseline only),
class:NAME (heads of that class; needs --from-run), heads:L.H,... (explicit heads). A random baseline of the
same size (--random-draws draws) is always added. Writes OUT/ablation.parquet (one row per head set: selection,
fraction, n_heads, heads, base_loss, loss, delta_loss, delta_sem, seed), OUT/head_scores.parquet,
OUT/ablation.json and OUT/figures/ablation_curve.png."""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "ablate",
        help="zero heads or move their attention to BOS, and measure the next-token loss change",
        description="Head ablations: the k % most dormant heads (lowest AHON-LN, Sandoval-Segura et al. 2025) or "
        "most sink-like (highest hard-sink fraction), a class or a list, against random heads. Writes "
        "ablation.parquet, head_scores.parquet, ablation.json, figures/ and report.html.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(),
            corpus_options(corpus="corpus source (as for analyze)",
                           max_windows=(64, "windows the loss is averaged over (default 64)")),
            output_options("output directory (written atomically)", overwrite=OVERWRITE_HELP),
        ],
    )
    parser.add_argument("--select", action="append", default=None,
                        help="head selection, repeatable (default: lowest-ahon-ln and highest-hard-sink)")
    parser.add_argument("--fractions", type=float_list, default=(0.05, 0.1, 0.2),
                        help="fractions of all heads removed (default 0.05,0.1,0.2)")
    parser.add_argument("--mode", choices=("zero", "bos"), default="zero",
                        help="zero: head output 0; bos: head output v_0, all attention on BOS (default zero)")
    parser.add_argument("--from-run", default=None, help="analyze run directory whose heads.parquet gives scores")
    parser.add_argument("--score-windows", type=int, default=16,
                        help="windows of the scoring pass when --from-run is not given (default 16)")
    parser.add_argument("--random-draws", type=int, default=3, help="random baseline draws per size (default 3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random baseline and random corpora")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sinkscope.cli.analyze import check_arguments
    from sinkscope.corpus.sources import check_source
    from sinkscope.corpus.windows import windows
    from sinkscope.models.families import require_softmax_layers
    from sinkscope.models.load import load_model
    from sinkscope.pipelines.ablate import AblateConfig, curve_summary, run_ablation, save_ablation
    from sinkscope.pipelines.analysis import check_seq_len
    from sinkscope.staging import claimed_output

    config = AblateConfig(
        selections=tuple(args.select or ("lowest-ahon-ln", "highest-hard-sink")),
        fractions=args.fractions,
        mode=args.mode,
        n_random=args.random_draws,
        seed=args.seed,
        score_windows=args.score_windows,
        from_run=args.from_run,
    )
    check_arguments(args)
    check_source(args.corpus)  # a missing, binary or malformed corpus fails before the model loads
    with claimed_output(Path(args.out), args.overwrite):
        lm = load_model(args.model, device=args.device, dtype=args.dtype)
        require_softmax_layers(lm.family, lm.layers, "ablate")
        check_seq_len(lm, args.seq_len)
        stream = windows(args.corpus, lm.tokenizer, args.seq_len, args.max_windows, bos_id=args.bos_id,
                         batch_size=args.batch_size, seed=args.seed)  # fmt: skip
        curve, scores, meta = run_ablation(lm, stream, config, progress=True)
        save_ablation(args.out, curve, scores, meta, overwrite=True)  # --out was checked and claimed above
    print(f"base loss {meta['base_loss']:.4f} nats/token over {stream.count} windows -> {args.out}/ablation.parquet")
    for _, row in curve_summary(curve).iterrows():
        spread = f" ± {row['delta_std']:.4f} (std over {row['draws']} draws)" if row["draws"] > 1 else ""
        print(f"  {row['selection']:<18} {row['n_heads']:>3} heads ({row['fraction']:.3f}): "
              f"Δloss {row['delta_loss']:+.4f}{spread}")  # fmt: skip
    return 0
