"""`sinkscope analyze`: per-head sink/diagonal/switch statistics and BOS geometry of a model on a corpus."""

from __future__ import annotations

import argparse
import sys

from sinkscope.cli.options import OVERWRITE_HELP, corpus_options, model_options, output_options
from sinkscope.functional.head_classes import HeadThresholds

EXAMPLE = """examples:
  sinkscope analyze --model smollm2-135m --corpus builtin:prose --seq-len 64 --max-windows 256 --out runs/x
  sinkscope analyze --model ./some/hf/dir --corpus data.jsonl --seq-len 512 --max-windows 100 --out runs/y
  sinkscope analyze --model smollm2-135m --corpus notes.txt --seq-len whole --out runs/notes  # one text, one window
  torchrun --nproc-per-node 2 -m sinkscope.cli.main analyze --model smollm2-135m --out runs/z  # data parallel
corpora: a .txt file (blank-line separated documents), a .jsonl file (text field), a directory of those,
  hf:NAME[:config][:split] (online), builtin:code, builtin:prose, builtin:random, builtin:repeat"""


# (flag, field of AnalyzeConfig and HeadThresholds, what a head's score must exceed for the class)
THRESHOLD_FLAGS = (
    ("--diag-threshold", "diagonal", "diagonal head: mean attention of a query on itself above X"),
    ("--prev-threshold", "previous", "previous-token head: mean attention on the token before above X"),
    ("--dense-threshold", "dense", "dense head: mean normalised row entropy above X (1 = uniform)"),
)

# Seconds per layer of the half-space certificates at 256 sampled inputs: `make demo` (SmolLM2, builtin:prose,
# T = 64, 256 windows) took timings.geometry_seconds = 2.8 for 30 layers with one BLAS thread at load 13 on 2 CPUs
# (165 s before numpy's BLAS got the chosen thread count: its threads oversubscribed the busy cores). The cost grows
# about as the square of the inputs sampled.
GEOMETRY_SECONDS_PER_LAYER = 0.1


def add_parser(subparsers) -> None:
    parser = subparsers.add_parser(
        "analyze",
        help="analyze a model on a corpus and write a run directory",
        epilog=EXAMPLE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[
            model_options(loading=True),
            corpus_options(corpus="corpus source (see below)", max_windows=(256, "number of windows (default 256)"),
                           whole=True),
            output_options("run directory to write", overwrite=OVERWRITE_HELP, quiet="no progress bar"),
        ],
    )
    parser.add_argument("--epsilon", type=float, default=0.3, help="sink-rate threshold ε (default 0.3)")
    parser.add_argument("--delta", type=float, default=0.1, help="hard-pattern threshold δ (default 0.1)")
    parser.add_argument("--tau", type=float, default=0.1, help="switch threshold τ (default 0.1)")
    classes = parser.add_argument_group(
        "head classes", "a head's class is the first that holds: sink (sink score > ε), diagonal, previous-token, "
        "dense, else mixed (docs/statistics.md, head_class)")  # fmt: skip
    for flag, field, words in THRESHOLD_FLAGS:
        classes.add_argument(flag, dest=field, type=float, default=getattr(HeadThresholds, field), metavar="X",
                             help=f"{words} (default {getattr(HeadThresholds, field)})")  # fmt: skip
    classes.add_argument("--learned-sink-threshold", dest="learned_sink", type=float, default=None, metavar="X",
                         help="learned-sink head: mean mass on a learned sink column above X (gpt-oss; default ε)")
    parser.add_argument("--tail", choices=["overlap", "drop"], default="overlap",
                        help="the corpus's last tokens that fill no whole window: overlap (default) analyses them in "
                        "a last window of the final T-1 tokens; drop leaves them out")  # fmt: skip
    parser.add_argument("--geometry-cap", type=int, default=256,
                        help="attention inputs sampled per layer for the half-space certificates, solved after the "
                        "pass (default 256; 0 skips this optional step, which takes seconds per layer)")
    parser.add_argument("--seed", type=int, default=0, help="seed for random corpora and samples")
    parser.add_argument("--attention-precision", choices=["exact", "model"], default="exact",
                        help="attention on CUDA (the flex path): exact (default) computes in float32; model in the "
                        "model's dtype with float32 accumulation, faster on tensor cores, but the attention output "
                        "and its norms (switch table) carry that dtype's rounding (docs/performance.md, Precision)")
    parser.add_argument("--checkpoint-every", type=int, default=0,
                        help="save the streaming state every N windows next to --out (default: never)")
    parser.add_argument("--resume", action="store_true", help="continue an interrupted run from its checkpoint")
    parser.add_argument("--smoothing", action="store_true",
                        help="also the oversmoothing columns (smooth_*) and λ-curves (docs/theory/oversmoothing.md)")
    parser.set_defaults(func=run)


def check_arguments(args: argparse.Namespace) -> None:
    """Every argument that can be checked without the model, so a typo fails in a second, not after loading."""
    from sinkscope.errors import SinkscopeError

    if args.seq_len != "whole" and args.seq_len < 2:
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

    choice = getattr(args, "thread_choice", None)  # set by main from --threads (auto by default)
    if choice is not None and launched_rank() == 0:
        print(f"sinkscope analyze: {choice.line()}", file=sys.stderr)
    out = Path(args.out)
    check_arguments(args)
    config = AnalyzeConfig(
        epsilon=args.epsilon, delta=args.delta, tau=args.tau, geometry_cap=args.geometry_cap, seed=args.seed,
        diagonal=args.diagonal, previous=args.previous, dense=args.dense, learned_sink=args.learned_sink,
        attention_precision=args.attention_precision,
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


def whole_seq_len(tokens: int, context: int | None, announce: bool = True) -> int:
    """`--seq-len whole`: T = the corpus's tokens + BOS, capped at the model's context (then windows of the
    context, the last one overlapping: nothing is dropped)."""
    from sinkscope.errors import SinkscopeError

    if tokens < 1:
        raise SinkscopeError("--seq-len whole: the corpus holds no token; pass a corpus with text")
    seq_len = tokens + 1 if context is None else min(tokens + 1, context)
    if announce:
        fits = "one window" if seq_len == tokens + 1 else f"longer than the model's context: windows of T={seq_len}"
        print(f"sinkscope analyze: --seq-len whole: the corpus is {tokens} tokens: {fits}", file=sys.stderr)
    return seq_len


def tail_words(tokens: dict) -> str:
    """' (the last window repeats 9 tokens of the one before, so none is dropped)', or '' without a tail."""
    if tokens["complete"] and tokens["overlap"]:
        return f" (the last starts {tokens['overlap']} tokens early, so no token is dropped)"
    if tokens["complete"] and tokens["dropped"]:
        return f" (the last {tokens['dropped']} tokens are dropped: --tail drop)"
    return ""


def token_line(tokens: dict, corpus: str, seq_len: int, max_windows: int) -> str:
    """How many of the corpus's tokens the windows analysed, and how many were dropped or never read."""
    windows = f"{tokens['windows']} window{'s' if tokens['windows'] != 1 else ''} of T={seq_len}"
    if not tokens["complete"]:
        return (f"analysed {tokens['analysed']} tokens in {windows}; stopped at --max-windows {max_windows}, so the "
                f"rest of {corpus} was not read")  # fmt: skip
    twice = f", {tokens['overlap']} of them twice (the last window ends at the corpus's end)" if tokens["overlap"] else ""
    dropped = f"the last {tokens['dropped']} dropped (--tail drop)" if tokens["dropped"] else "none dropped"
    return f"analysed all {tokens['analysed']} tokens of {corpus} in {windows}{twice}; {dropped}"


def geometry_note(n_layers: int, contexts: int, slowdown: float = 1.0) -> str:
    """What the geometry step after the pass computes, why, its estimated time (and, with a `slowdown` above 1.5,
    its bound on a busy machine: `sinkscope.threads.slowdown`), and how to skip it."""
    seconds = GEOMETRY_SECONDS_PER_LAYER * n_layers * (contexts / 256) ** 2
    busy = f" (up to {max(1, round(seconds * slowdown))} s on this busy machine)" if slowdown > 1.5 else ""
    return (
        f"sinkscope analyze: after the pass, the geometry step (optional; --geometry-cap 0 skips it) solves, per "
        f"layer, two small convex problems on {contexts} sampled attention inputs: can one fixed key direction "
        f"make BOS the sink of every query (half-space certificates γ1, γ2, layers.parquet; docs/theory/geometry.md)? "
        f"Estimate: about {max(1, round(seconds))} s for {n_layers} layers{busy}"
    )


def _analyze(args: argparse.Namespace, out, config, checkpoint_dir) -> int:
    from sinkscope.corpus.windows import corpus_length, windows
    from sinkscope.errors import SinkscopeError
    from sinkscope.models.families import require_softmax_layers
    from sinkscope.models.load import check_bos_id, load_model
    from sinkscope.pipelines.analysis import analyze, check_seq_len
    from sinkscope.pipelines.checkpoint import remove_checkpoint
    from sinkscope.pipelines.distributed import distributed_context
    from sinkscope.threads import slowdown

    with distributed_context(args.device) as group:  # under torchrun: one process (and GPU) per rank
        rank = group.rank
        lm = load_model(
            args.model, device=group.device, dtype=args.dtype, trust_remote_code=args.trust_remote_code,
            device_map=args.device_map,
        )  # fmt: skip
        if args.seq_len == "whole":
            args.seq_len = whole_seq_len(corpus_length(args.corpus, lm.tokenizer), lm.max_positions, rank == 0)
        require_softmax_layers(lm.family, lm.layers, "analyze")
        check_seq_len(lm, args.seq_len)
        check_bos_id(lm, args.bos_id)
        stream = windows(
            args.corpus, lm.tokenizer, args.seq_len, args.max_windows,
            bos_id=args.bos_id, batch_size=args.batch_size, seed=args.seed, tail=args.tail,
        )  # fmt: skip
        available = stream.available()
        if rank == 0 and available is not None and available < args.max_windows:
            print(f"sinkscope analyze: corpus {args.corpus} gives {available} windows of T={args.seq_len}"
                  f"{tail_words(stream.tokens())}, fewer than --max-windows {args.max_windows}: analysing "
                  f"{available}", file=sys.stderr)  # fmt: skip
        if rank == 0 and config.geometry_cap > 0:
            windows_known = available if available is not None else args.max_windows
            contexts = min(config.geometry_cap, windows_known * (args.seq_len - 1))
            print(geometry_note(len(lm.layers), contexts, slowdown()), file=sys.stderr)
        result = analyze(
            lm, stream, config, progress=not args.quiet, checkpoint_dir=checkpoint_dir,
            checkpoint_every=args.checkpoint_every, resume=args.resume, smoothing=args.smoothing,
        )  # fmt: skip
    if rank != 0:
        return 0
    choice = getattr(args, "thread_choice", None)
    if choice is not None:
        result.meta["timings"]["threads_chosen"] = choice.reason
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
    print(f"sinkscope analyze: {token_line(stream.tokens(), args.corpus, args.seq_len, args.max_windows)}",
          file=sys.stderr)  # fmt: skip
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
