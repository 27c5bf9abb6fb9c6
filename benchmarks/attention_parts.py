"""One layer's attention on the CPU, by CPU time, interleaved round by round: sdpa's fused flash kernel (the floor's
attention) against the rows path (`capture.blocks.row_attention`, at its block size and at fixed query rows per
block) and the fused path (`capture.fused.fused_attention`), and the rows path's time split into its parts.

Random q, k, v in SmolLM2's attention shapes (9 query heads, 3 kv heads, head size 64, the layout transformers
hands over: (B, T, H, D) transposed), float32, 1 thread; the median over rounds. Issue 33, item 4 (docs/performance.md,
"The CPU at long T"):

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/attention_parts.py --seq-len 4096 --rounds 3
    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/attention_parts.py --seq-len 16384 --rounds 1 --rows 56
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import sinkscope.capture.blocks as blocks
from sinkscope.capture.blocks import block_elements, block_rows, row_attention
from sinkscope.capture.fused import fused_attention

H, KV, D = 9, 3, 64


def inputs(batch: int, seq_len: int) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    return tuple(torch.randn(batch, seq_len, heads, D, generator=g).transpose(1, 2) for heads in (H, KV, KV))


def rows_parts(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> dict[str, float]:
    """CPU seconds of each step of the rows path's block loop (the same operations as `row_attention`'s)."""
    B, _, T, _ = q.shape
    group, step = H // KV, block_rows(B, H, T, block_elements(q.device))
    above = torch.ones(step, step, dtype=torch.bool).triu(1)
    floor = torch.finfo(torch.float32).min
    spent: dict[str, float] = {}
    for start in range(0, T, step):
        stop, clock = min(T, start + step), time.process_time()

        def tick(name: str) -> None:
            nonlocal clock
            now = time.process_time()
            spent[name] = spent.get(name, 0.0) + now - clock
            clock = now

        block = (q[:, :, start:stop] * scaling).reshape(B, KV, group * (stop - start), D)
        logits = torch.matmul(block, k[:, :, :stop].transpose(-1, -2)).view(B, H, stop - start, stop)
        tick("logits product")
        logits[..., start:stop].masked_fill_(above[: stop - start, : stop - start], floor)
        tick("causal corner")
        probs = torch.softmax(logits, -1)
        tick("softmax")
        torch.matmul(probs.view(B, KV, -1, stop), v[:, :, :stop])
        tick("product with v")
        probs.sum(-2)
        tick("column sums")
        torch.linalg.vecdot(probs, logits)
        tick("entropy's sum of p·s")
    return spent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rows", default="32,56,112", help="fixed query rows per block to try (comma-separated)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    q, k, v = inputs(args.batch, args.seq_len)
    scaling = D**-0.5
    methods = {
        "sdpa": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scaling,
                                                                         enable_gqa=True),  # fmt: skip
        f"rows ({block_rows(args.batch, H, args.seq_len)} rows per block)": lambda: row_attention(q, k, v, scaling),
        "fused": lambda: fused_attention(q, k, v, scaling),
    }
    original = blocks.block_rows
    for rows in (int(r) for r in args.rows.split(",") if r):

        def fixed(rows: int = rows):
            blocks.block_rows = lambda *a, **kw: rows
            try:
                return row_attention(q, k, v, scaling)
            finally:
                blocks.block_rows = original

        methods[f"rows ({rows} rows per block)"] = fixed
    spent: dict[str, list[float]] = {name: [] for name in methods}
    parts: list[dict[str, float]] = []
    with torch.no_grad():
        for _ in range(args.rounds):
            for name, method in methods.items():
                clock = time.process_time()
                method()
                spent[name].append(time.process_time() - clock)
            parts.append(rows_parts(q, k, v, scaling))
    sdpa = statistics.median(spent["sdpa"])
    print(f"T = {args.seq_len}, batch {args.batch}, {args.rounds} rounds, load {open('/proc/loadavg').read().split()[0]}")
    print("| method or part | CPU s | × sdpa |\n|---|---|---|")
    for name, times in spent.items():
        print(f"| {name} | {statistics.median(times):.3f} | {statistics.median(times) / sdpa:.2f} |")
    for name in parts[0]:
        median = statistics.median(p[name] for p in parts)
        print(f"| rows path: {name} | {median:.3f} | {median / sdpa:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
