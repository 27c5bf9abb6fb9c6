"""What `SinkscopeCallback` costs a training run at its default interval (every 500 steps).

    nice -n 10 .venv/bin/python benchmarks/callback_overhead.py --steps 200 --every 50

Trains the tiny Llama of `trajectory_pretrain.py` (4 layers, d = 64, byte tokens, batch 16 × 64) for `--steps`
steps twice, without and with the callback every `--every` steps (16 probe windows of 64 tokens), and prints the
seconds per training step, the seconds per analysis, ((with − without) / analyses) and the overhead at the default
interval: one analysis per 500 steps, `analysis / (500 × step)`. The page the callback draws once at the end of
training is timed apart (`page_seconds`): it is paid once per run, not per interval. On a loaded machine the two
runs share the CPU with other work: run it when the load is low, or repeat it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from tempfile import TemporaryDirectory

import torch

from trajectory_pretrain import PROBE_WINDOWS, SEQ_LEN, byte_tokenizer, train_run

DEFAULT_EVERY = 500  # SinkscopeCallback's default interval


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--every", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    from sinkscope.corpus.windows import windows
    from sinkscope.pipelines.trajectory import read_trajectory, write_trajectory

    tokenizer = byte_tokenizer()
    cut = torch.cat(list(windows("builtin:code", tokenizer, SEQ_LEN, 400 + PROBE_WINDOWS, batch_size=64)))
    ids, probe = cut[:-PROBE_WINDOWS], cut[-PROBE_WINDOWS:]
    with TemporaryDirectory() as tmp:
        plain = train_run(Path(tmp) / "plain", ids, probe, tokenizer, 0.0, args.steps, None)
        watched = train_run(Path(tmp) / "watched", ids, probe, tokenizer, 0.0, args.steps, args.every)
        started = time.perf_counter()
        table, meta = read_trajectory(Path(tmp) / "watched" / "sinkscope")
        write_trajectory(table, meta, Path(tmp) / "page")
        page_seconds = time.perf_counter() - started
    analyses = 1 + args.steps // args.every  # step 0 and every interval
    step = plain["seconds"] / args.steps
    analysis = (watched["seconds"] - plain["seconds"] - page_seconds) / analyses
    print(json.dumps({
        "steps": args.steps, "every": args.every, "analyses": analyses, "seconds_without": round(plain["seconds"], 1),
        "seconds_with": round(watched["seconds"], 1), "step_seconds": round(step, 4),
        "analysis_seconds": round(analysis, 3), "page_seconds": round(page_seconds, 2),
        "overhead_at_every_500": round(analysis / (DEFAULT_EVERY * step), 4),
        "same_losses": plain["losses"] == watched["losses"][: len(plain["losses"])],
    }))  # fmt: skip


if __name__ == "__main__":
    main()
