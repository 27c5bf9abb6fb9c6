"""Speed of `analyze` against the floor, measured in ONE process, methods interleaved round by round.

On a shared machine the load changes from minute to minute, so ratios of runs made minutes apart (the separate
workers of `benchmarks/run.py`) mix the load into the result. Here every round runs each method once, back to
back on the same windows, and the ratio of each round is floor time / method time; the table gives the median
over rounds of that ratio, by wall clock and by this process's CPU time (user + system, all threads).

Methods (SmolLM2 by default, float32, `AnalyzeConfig(geometry_cap=0)`):
  floor        `lm.base(input_ids, use_cache=False)`, sdpa, no outputs
  sinkscope    `analyze` with the default routing (`capture.attention.attention_path`: the compiled kernel where it builds)
  rows         `analyze` with every plain causal layer on the rows path, whatever T (no compiled kernel)
  fused        `analyze` with every plain causal layer on the fused path (two flash-kernel calls), whatever T
  blocked      `analyze` with every layer on the block path (the path of every release before the fused one)
  budget-rows  `sinkscope` with the rows path's blocks cut by the element budget alone (no `MIN_ROWS_PER_BLOCK`:
               the rows path before issue 33's round four)
"others' CPU" is the share of all cores that other processes used during the rounds (from /proc/stat).

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/paths.py --seq-len 1024 --windows 2 --batch 2 --threads 1

Several lengths in one process (`--seq-len 1024,4096,16384`, `--windows`/`--batch` one value or one per length):
each round then runs every length's methods back to back. `--layers N` keeps the model's first N layers (the
ratio is per layer; long T on a busy machine), lengths beyond the model's context are timed only (their
statistics mean nothing), `--no-warmup` skips the warm-up pass (dear at long T; the median over rounds remains).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from contextlib import ExitStack, contextmanager

import torch

METHODS = ("floor", "sinkscope", "rows", "fused", "blocked", "budget-rows")


def cpu_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields) - idle, sum(fields)


@contextmanager
def variant(method: str):
    """Patch sinkscope's attention module for the benchmark-only variants."""
    from sinkscope.capture import attention, blocks

    with ExitStack() as stack:
        if method == "budget-rows":
            stack.callback(setattr, blocks, "MIN_ROWS_PER_BLOCK", blocks.MIN_ROWS_PER_BLOCK)
            blocks.MIN_ROWS_PER_BLOCK = 1
        elif method == "blocked":
            original = attention.attention_path
            attention.attention_path = lambda *a: "blocks"
            stack.callback(setattr, attention, "attention_path", original)
        elif method in ("rows", "fused"):  # the paths without the compiled kernel
            stack.callback(setattr, attention.fused_cpu, "available", attention.fused_cpu.available)
            attention.fused_cpu.available = lambda: False
            limit = attention.ROWS_UP_TO_SEQ_LEN
            attention.ROWS_UP_TO_SEQ_LEN = 1 << 40 if method == "rows" else 0
            stack.callback(setattr, attention, "ROWS_UP_TO_SEQ_LEN", limit)
        yield


@torch.no_grad()
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m")
    parser.add_argument("--seq-len", default="1024", help="window length(s) T, comma-separated")
    parser.add_argument("--windows", default="2", help="windows per pass: one value or one per length")
    parser.add_argument("--batch", default="2", help="batch size: one value or one per length")
    parser.add_argument("--layers", type=int, default=None, help="keep only the model's first N layers")
    parser.add_argument("--no-warmup", action="store_true", help="no warm-up pass")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--out", default=None, help="append one JSON line with every measurement")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)

    import sinkscope
    import sinkscope.pipelines.analysis as analysis
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    lm = sinkscope.load_model(args.model)
    if args.layers is not None:
        from worker import keep_layers  # benchmarks/worker.py, beside this script

        keep_layers(lm, args.layers)
    analysis.check_seq_len = lambda lm, seq_len: None  # timing only beyond the context (see the module doc)
    lengths = [int(t) for t in args.seq_len.split(",")]
    per_length = lambda text: [int(x) for x in text.split(",")] * (len(lengths) if "," not in text else 1)  # noqa: E731
    ids = {T: torch.cat(list(sinkscope.windows("builtin:prose", lm.tokenizer, T, w, batch_size=w)))
           for T, w in zip(lengths, per_length(args.windows), strict=True)}  # fmt: skip
    batches = dict(zip(lengths, per_length(args.batch), strict=True))
    config = AnalyzeConfig(geometry_cap=0)
    methods = args.methods.split(",")

    def run(T: int, method: str) -> None:
        if method == "floor":
            for batch in ids[T].split(batches[T]):
                lm.base(input_ids=batch, use_cache=False)
        else:
            with variant(method):
                analyze(lm, TokenWindows(ids[T], batch_size=batches[T]), config, progress=False)

    cells = [(T, m) for T in lengths for m in methods]
    for T, method in cells * (not args.no_warmup):
        run(T, method)
    wall: dict[tuple, list[float]] = {c: [] for c in cells}
    cpu: dict[tuple, list[float]] = {c: [] for c in cells}
    busy0, total0 = cpu_ticks()
    own0 = time.process_time()
    for _ in range(args.rounds):
        for cell in cells:
            started, started_cpu = time.perf_counter(), time.process_time()
            run(*cell)
            wall[cell].append(time.perf_counter() - started)
            cpu[cell].append(time.process_time() - started_cpu)
    busy1, total1 = cpu_ticks()
    ticks = os.sysconf("SC_CLK_TCK")
    others = max(0.0, (busy1 - busy0) / ticks - (time.process_time() - own0)) / ((total1 - total0) / ticks)
    print(f"{args.model}, {len(lm.layers)} layers, {args.threads} threads, {args.rounds} rounds; others' CPU "
          f"{others:.0%} of all cores; load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    rows = []
    for T, method in cells:
        floor, own = (T, "floor"), (T, method)
        ratio_wall = statistics.median(f / m for f, m in zip(wall[floor], wall[own], strict=True))
        ratio_cpu = statistics.median(f / m for f, m in zip(cpu[floor], cpu[own], strict=True))
        seconds, tokens = statistics.median(wall[own]), ids[T].numel()
        rows.append({"seq_len": T, "method": method, "seconds": seconds, "tokens_per_s": tokens / seconds,
                     "x_floor_wall": ratio_wall, "x_floor_cpu": ratio_cpu,
                     "cpu_seconds": statistics.median(cpu[own])})  # fmt: skip
        print(f"  T={T:<6d} {len(ids[T])} × batch {batches[T]}  {method:11s} {seconds:8.2f} s  {tokens / seconds:7.0f} "
              f"tok/s  {ratio_wall:5.2f}× floor (wall)  {ratio_cpu:5.2f}× floor (CPU time)")  # fmt: skip
    if args.out:
        record = vars(args) | {"others_cpu": others, "rows": rows, "wall": {f"{T} {m}": v for (T, m), v in wall.items()},
                               "cpu": {f"{T} {m}": v for (T, m), v in cpu.items()},
                               "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())}
        with open(args.out, "a") as f:
            f.write(json.dumps(record) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
