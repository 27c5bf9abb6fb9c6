"""Where `sinkscope analyze` spends its time, next to the floor (a plain sdpa forward of the base model).

Wraps sinkscope's capture and statistics functions, and torch's sdpa, with wall-clock timers (CPU torch ops are
synchronous, so a timer around a call measures that call), runs one warm-up and one timed pass of each, and
prints seconds per part. "attention core" is `blocked_attention` less the statistics it hands blocks to.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/profile_analyze.py --seq-len 1024 --windows 4 --batch 2
"""

from __future__ import annotations

import argparse
import functools
import os
import time
from collections import defaultdict

import torch

SECONDS: dict[str, float] = defaultdict(float)
CALLS: dict[str, int] = defaultdict(int)
CLOCK = {"clock": time.perf_counter}  # `--clock cpu`: time.process_time (this process's CPU time, all threads)


def timed(name: str, function):
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        started = CLOCK["clock"]()
        try:
            return function(*args, **kwargs)
        finally:
            SECONDS[name] += CLOCK["clock"]() - started
            CALLS[name] += 1

    return wrapper


def instrument() -> None:
    """Replace the functions sinkscope calls by name with timed versions."""
    import torch.nn.functional as F

    from sinkscope.capture import attention, feed, fused, fused_cpu
    from sinkscope.statistics import bos_geometry, switch_counts

    F.scaled_dot_product_attention = timed("sdpa", F.scaled_dot_product_attention)
    attention.blocked_attention = timed("blocked_attention", attention.blocked_attention)
    attention.row_attention = timed("row_attention", attention.row_attention)
    fused_cpu.compiled_attention = timed("compiled_attention", fused_cpu.compiled_attention)
    attention.fused_attention = timed("fused_attention", attention.fused_attention)
    fused._flash = timed("flash", fused._flash)  # called by fused_attention, in capture/fused.py
    for module, name in [(feed, "pattern_block_sums"), (feed, "pattern_row_sums"), (switch_counts, "switch_block_sums"),
                         (bos_geometry, "bos_geometry_sums_from"), (switch_counts, "value_drain")]:  # fmt: skip
        setattr(module, name, timed(name, getattr(module, name)))
    for name in ("on_block", "on_readout", "_fold_columns", "on_values", "on_layer_input", "end_batch"):
        setattr(feed.Feed, name, timed(name, getattr(feed.Feed, name)))


def split(total: float) -> list[tuple[str, float, int]]:
    """(part, seconds, calls) of one sinkscope pass of `total` seconds."""
    s, n = SECONDS, CALLS
    # Map-free layers (rows, fused, flex paths) hand their rows on at end_batch, where switch_block_sums and the BOS
    # geometry sums of every layer then run; block-path layers run switch_block_sums inside on_block. A model whose
    # layers take both (Gemma-3 beyond its sliding window) has it counted inside end_batch only.
    switch_in_flush = s["switch_block_sums"] if n["on_readout"] else 0.0
    on_block_rest = s["on_block"] - s["pattern_block_sums"] - (s["switch_block_sums"] - switch_in_flush)
    parts = [
        ("compiled path: the C++ kernel and its readout", s["compiled_attention"], n["compiled_attention"]),
        ("rows path: logits, softmax, P·V and their reductions", s["row_attention"], n["row_attention"]),
        ("fused path: flash kernel calls (output + lse; columns + entropy)", s["flash"], n["flash"]),
        ("fused path: A[t,0], A[t,t], A[t,t-1], entropy sum, norms", s["fused_attention"] - s["flash"],
         n["fused_attention"]),
        ("on_readout (keeps the layer's rows until end_batch)", s["on_readout"], n["on_readout"]),
        ("end_batch (map-free layers' statistics, stacked; BOS geometry; state folds)", s["end_batch"],
         n["end_batch"]),
        ("  of which switch_block_sums", switch_in_flush, n["switch_block_sums"] if n["on_readout"] else 0),
        ("  of which bos_geometry_sums_from", s["bos_geometry_sums_from"], n["bos_geometry_sums_from"]),
        (
            "blocked path: attention core (logits, softmax, entropy, P·V)",
            s["blocked_attention"] - s["on_block"],
            n["blocked_attention"],
        ),
        ("  pattern_block_sums", s["pattern_block_sums"], n["pattern_block_sums"]),
        ("  of which _fold_columns (per-window columns, key-token table)", s["_fold_columns"], n["_fold_columns"]),
        ("switch_block_sums (block path)", s["switch_block_sums"] - switch_in_flush, n["switch_block_sums"]),
        ("  rest of on_block (finite checks, accumulator adds)", on_block_rest, n["on_block"]),
        ("on_values (value norms)", s["on_values"], n["on_values"]),
        ("on_layer_input (BOS norms and dots, massive activations, certificate sample)", s["on_layer_input"],
         n["on_layer_input"]),
    ]
    inside = sum(seconds for name, seconds, _ in parts if not name.startswith("  of which"))
    return [*parts, ("model outside attention and hooks, tabulate", total - inside, 1)]


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--geometry-cap", type=int, default=0)
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time parts by the wall clock or by this process's CPU time (robust to other jobs)")
    parser.add_argument("--no-warmup", action="store_true", help="time the first pass (long T: the warm-up is dear)")
    parser.add_argument("--layers", type=int, default=None,
                        help="keep only the model's first N layers (long T on a busy machine: the ratio is per layer)")
    args = parser.parse_args(argv)
    CLOCK["clock"] = time.process_time if args.clock == "cpu" else time.perf_counter
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)

    import sinkscope
    from sinkscope.capture.blocks import block_rows
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    instrument()
    lm = sinkscope.load_model(args.model)
    if args.layers is not None:
        from worker import keep_layers  # benchmarks/worker.py, beside this script

        keep_layers(lm, args.layers)
    if lm.max_positions is not None and args.seq_len > lm.max_positions:  # cost only (as worker.py --beyond-context):
        import sinkscope.pipelines.analysis as analysis  # positions past the trained context mean nothing

        analysis.check_seq_len = lambda lm, seq_len: None
        print(f"T = {args.seq_len} is beyond the model's context of {lm.max_positions}: timing only")
    stream = sinkscope.windows(
        "builtin:prose", lm.tokenizer, args.seq_len, args.windows, batch_size=args.windows
    )
    ids = torch.cat(list(stream))
    config = AnalyzeConfig(geometry_cap=args.geometry_cap)

    def floor() -> None:
        for batch in ids.split(args.batch):
            lm.base(input_ids=batch, use_cache=False)

    def sinkscope_pass() -> None:
        analyze(lm, TokenWindows(ids, batch_size=args.batch), config, progress=False)

    results = {}
    for name, run in (("floor", floor), ("sinkscope", sinkscope_pass)):
        if not args.no_warmup:
            run()
        SECONDS.clear()
        CALLS.clear()
        started = CLOCK["clock"]()
        run()
        results[name] = (CLOCK["clock"]() - started, dict(SECONDS), dict(CALLS))
    tokens = ids.numel()
    floor_total, floor_seconds, _ = results["floor"]
    total, _, _ = results["sinkscope"]
    H = lm.layout.n_heads
    print(
        f"{args.model}, T={args.seq_len}, {len(ids)} windows, batch {args.batch}, {args.threads} threads, "
        f"{len(lm.layers)} layers, {args.clock} clock; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end; "
        f"{block_rows(args.batch, H, args.seq_len)} query rows per block"
    )
    print(
        f"floor      {floor_total:7.2f} s  {tokens / floor_total:6.0f} tok/s  (sdpa {floor_seconds.get('sdpa', 0):.2f} s)"
    )
    print(
        f"sinkscope  {total:7.2f} s  {tokens / total:6.0f} tok/s  ({floor_total / total:.2f}× the floor's speed)"
    )
    for part, seconds, calls in split(total):
        print(f"  {part:55s} {seconds:7.2f} s  {seconds / total:5.1%}  {calls:6d} calls")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
