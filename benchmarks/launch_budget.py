"""Aten operations dispatched per batch by `analyze`'s capture and statistics against the base model's forward,
for each attention path (issue 33's launch budget; on an accelerator each operation is a kernel launch).

Counted on the CPU by `tests/integration/test_launch_budget.py`'s `budget` (tiny Llama, T = 64, batch 4, the
increment between 1 and 3 batches, host reads declared expensive, each flex kernel call one operation):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/launch_budget.py --layers 2,8,30
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/launch_budget.py --layers 2,30 --paths flex --whole

`--whole` counts all of `analyze(lm, windows, AnalyzeConfig(geometry_cap=0))` (every statistic it registers,
those added after issue 33 included) instead of the statistics the test holds to the budget. The last column
counts only the operations that launch a kernel on a GPU (views, which only make tensor metadata, left out).
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.test_launch_budget import (  # noqa: E402
    B,
    DispatchCounter,
    T,
    budget,
    every_operation,
    kernels,
    operations_per_batch,
    the_cuda_path,
    tiny_llama,
)

PATHS = ("flex", "rows", "fused", "blocks")


def whole_analysis(lm, monkeypatch, path: str, count=every_operation) -> tuple[float, float]:
    """`budget` for all of `analyze` (every registered statistic), against the base forward."""
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    counter = [DispatchCounter()]
    the_cuda_path(monkeypatch, counter, path)
    ids = torch.randint(1, 96, (3 * B, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 0

    def analysed(batches: int) -> None:
        analyze(lm, TokenWindows(ids[: batches * B], batch_size=B), AnalyzeConfig(geometry_cap=0), progress=False)

    def floor(batches: int) -> None:
        for i in range(batches):
            lm.base(input_ids=ids[i * B : (i + 1) * B], use_cache=False)

    analysed(1)
    return count(operations_per_batch(analysed, counter)), count(operations_per_batch(floor, counter))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="2,8,30", help="model depths (comma-separated)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"which of {', '.join(PATHS)}")
    parser.add_argument("--whole", action="store_true", help="count all of analyze (module doc)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    print("| layers | path | operations per batch | base forward | ratio | kernels only: analyse / forward (ratio) |\n"
          "|---|---|---|---|---|---|")  # fmt: skip
    for layers in (int(n) for n in args.layers.split(",")):
        for path in args.paths.split(","):
            counts = []
            for count in (every_operation, kernels):
                with pytest.MonkeyPatch.context() as patch:
                    counts.append((whole_analysis if args.whole else budget)(tiny_llama(layers), patch, path, count))
            (analysed, floor), (k_analysed, k_floor) = counts
            print(f"| {layers} | {path} | {analysed:.0f} | {floor:.0f} | {analysed / floor:.2f}× | "
                  f"{k_analysed:.0f} / {k_floor:.0f} ({k_analysed / k_floor:.2f}×) |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
