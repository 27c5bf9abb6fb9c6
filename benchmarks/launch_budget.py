"""Aten operations dispatched per batch by `analyze`'s capture and statistics against the base model's forward,
for each attention path (issue 33's launch budget; on an accelerator each operation is a kernel launch).

Counted on the CPU by `tests/integration/test_launch_budget.py`'s `budget` (tiny Llama, T = 64, batch 4, the
increment between 1 and 3 batches, host reads declared expensive, each flex kernel call one operation):

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/launch_budget.py --layers 2,8,30
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.integration.test_launch_budget import budget, tiny_llama  # noqa: E402

PATHS = ("flex", "rows", "fused", "blocks")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", default="2,8,30", help="model depths (comma-separated)")
    parser.add_argument("--paths", default=",".join(PATHS), help=f"which of {', '.join(PATHS)}")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    print("| layers | path | operations per batch | base forward | ratio |\n|---|---|---|---|---|")
    for layers in (int(n) for n in args.layers.split(",")):
        for path in args.paths.split(","):
            with pytest.MonkeyPatch.context() as patch:
                analysed, floor = budget(tiny_llama(layers), patch, path)
            print(f"| {layers} | {path} | {analysed:.0f} | {floor:.0f} | {analysed / floor:.2f}× |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
