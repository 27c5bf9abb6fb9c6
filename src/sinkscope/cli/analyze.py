"""`sinkscope analyze`: per-head sink/diagonal/switch statistics and BOS geometry of a model on a corpus."""

from __future__ import annotations

import argparse
import sys

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, model_options, output_options

EXAMPLE = """examples:
  sinkscope analyze --model smollm2-135m --corpus builtin:prose --seq-len 64 --max-windows 256 --out runs/x
  sinkscope analyze --model ./some/hf/dir --corpus data.jsonl --seq-len 512 --max-windows 100 --out runs/y
  torchrun --nproc-per-node 2 -m sinkscope.cli.main analyze --model smollm2-135m --out runs/z  # data parallel
corpora: a .txt file (blank-line separated documents), a .jsonl file (text field), a directory of those,
  hf:NAME[:config][:split] (online), builtin:code, builtin:prose, builtin:random, builtin:repeat"""


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="analyze a model on a corpus and write a run directory",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(loading=True),
            corpus_options(corpus="corpus source (see below)", max_windows=(256, "number of windows (default 256)")),
            output_options("run directory to write", overwrite=OVERWRITE_HELP, quiet="no progress bar"),
        ],
    )
    parser.add_argument("--epsilon", type=float, default=0.3, help="sink-rate threshold ε (default 0.3)")
    parser.add_argument("--delta", type=float, default=0.1, help="hard-pattern threshold δ (default 0.1)")
    parser.add_argument("--tau", type=float, default=0.1, help="switch threshold τ (default 0.1)")
    parser.add_argument("--geometry-cap", type=int, default=256,
                        help="attention inputs sampled per layer for the half-space certificates (0: skip)")
    parser.add_argument("--seed", type=int, default=0, help="seed for random corpora and samples")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="save the streaming state every N windows next to --out (default: never)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run from its checkpoint")
    parser.add_argument("--smoothing", action="store_true",
                        help="also the oversmoothing columns (smooth_*) and λ-curves (docs/theory/oversmoothing.md)")
    parser.set_defaults(func=run)


def check_arguments(args: argparse.Namespace) -> None:
    """Every argument that can be checked without the model, so a typo fails in a second, not after loading."""
    from sinkscope.errors import SinkscopeError

    if args.seq_len < 2:
        raise SinkscopeError(f"--seq-len {args.seq_len} is too short: a window needs BOS plus at least 1 token")
    for name in ("max_windows", "batch_size"):
        if getattr(args, name) < 1:
            raise SinkscopeError(f"--{name.replace('_', '-')} {getattr(args, name)} must be at least 1")
    from sinkscope.models.load import check_bos_id

    check_bos_id(None, getattr(args, "bos_id", None))
    if getattr(args, "checkpoint_every", 0) < 0:
        raise SinkscopeError(f"--checkpoint-every {args.checkpoint_every} must be ≥ 0 (0: no checkpoints)")


def resume_command(args: argparse.Namespace) -> str:
    """The command line that continues this run from its checkpoint."""
    import shlex

    argv = list(getattr(args, "argv", None) or sys.argv[1:])
    if "--resume" not in argv:
        argv.append("--resume")
    return " ".join(["sinkscope", *map(shlex.quote, argv)])


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from sinkscope.corpus.sources import check_source
    from sinkscope.pipelines.analysis import AnalyzeConfig
    from sinkscope.pipelines.distributed import launched_rank
    from sinkscope.staging import claimed_output

    out = Path(args.out)
    check_arguments(args)
    config = AnalyzeConfig(
        epsilon=args.epsilon, delta=args.delta, tau=args.tau, geometry_cap=args.geometry_cap, seed=args.seed
    )
    check_source(args.corpus)  # a missing, binary or malformed corpus fails before the model loads
    checkpoint_dir = out.with_name(f".{out.name}.checkpoint")
    if args.resume and not checkpoint_dir.is_dir():
        print(f"sinkscope analyze: no checkpoint at {checkpoint_dir}; starting from the first window", file=sys.stderr)
    if launched_rank() != 0:  # under torchrun, rank 0 alone owns --out
        return _analyze(args, out, config, checkpoint_dir)
    with claimed_output(out, args.overwrite):
        try:
            return _analyze(args, out, config, checkpoint_dir)
        except KeyboardInterrupt:
            if not args.checkpoint_every:
                raise KeyboardInterrupt("nothing was saved (--checkpoint-every N makes a run resumable)") from None
            if not checkpoint_dir.is_dir():
                raise KeyboardInterrupt(
                    f"before the first checkpoint (every {args.checkpoint_every} windows); nothing was saved"
                ) from None
            raise KeyboardInterrupt(
                f"the work so far is checkpointed in {checkpoint_dir}/; continue with: {resume_command(args)}"
            ) from None


def _analyze(args: argparse.Namespace, out, config, checkpoint_dir) -> int:
    from sinkscope.corpus.windows import windows
    from sinkscope.errors import SinkscopeError
    from sinkscope.models.load import check_bos_id, load_model
    from sinkscope.pipelines.analysis import analyze, check_seq_len
    from sinkscope.pipelines.checkpoint import remove_checkpoint
    from sinkscope.pipelines.distributed import distributed_context

    with distributed_context(args.device) as group:  # under torchrun: one process (and GPU) per rank
        rank = group.rank
        lm = load_model(
            args.model, device=group.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
            device_map=args.device_map,
        )  # fmt: skip
        check_seq_len(lm, args.seq_len)
        check_bos_id(lm, args.bos_id)
        stream = windows(
            args.corpus, lm.tokenizer, args.seq_len, args.max_windows,
            bos_id=args.bos_id, batch_size=args.batch_size, seed=args.seed,
        )  # fmt: skip
        available = stream.available()
        if rank == 0 and available is not None and available < args.max_windows:
            print(f"sinkscope analyze: corpus {args.corpus} gives {available} windows of T={args.seq_len}, fewer "
                  f"than --max-windows {args.max_windows}: analysing {available}", file=sys.stderr)  # fmt: skip
        result = analyze(
            lm, stream, config, progress=not args.quiet, checkpoint_dir=checkpoint_dir,
            checkpoint_every=args.checkpoint_every, resume=args.resume, smoothing=args.smoothing,
        )  # fmt: skip
    if rank != 0:
        return 0
    if args.smoothing:
        smooth = result.meta["smoothing"]
        print(
            f"oversmoothing: {smooth['frac_dense_more']:.3f} of heads have 2b + c > 0; observed cosine rises for "
            f"{smooth['frac_observed_rise']:.3f}; sign agreement {smooth['sign_agreement']:.3f}"
        )
    try:
        result.save(out, overwrite=True)  # --out was checked and claimed at the start
    except SinkscopeError as err:  # a full disk: the checkpoint (if any) still holds the whole pass
        if args.checkpoint_every and checkpoint_dir.is_dir():
            raise SinkscopeError(
                f"{err}; the analysis is checkpointed in {checkpoint_dir}/: continue with: {resume_command(args)}"
            ) from None
        raise
    remove_checkpoint(checkpoint_dir)  # only now that the result is on disk
    summary = result.meta["summary"]
    print(
        f"{result.meta['model']['name']} on {args.corpus} (T={args.seq_len}, {stream.count} windows): "
        f"sink rate {summary['sink_rate']:.3f}: in {summary['sink_rate']:.1%} of (window, layer, head) the head "
        f"gave BOS more than ε = {args.epsilon} of its attention, averaged over queries "
        f"({summary['sink_rate_of_mean']:.3f} when each head's window-mean is thresholded instead); on average a "
        f"head gives {summary['mean_sink_score']:.3f} of its attention to BOS and {summary['mean_diag_score']:.3f} "
        "to the token itself (definitions: docs/statistics.md)"
    )
    print(f"wrote {out}/ (report: {out / 'report.html'})", file=sys.stderr)
    return 0
