"""Speed guard: `analyze`'s speed as a share of the forward pass, for the current tree and a named commit, measured
alternately in one session so both see the same machine.

Each measurement is one process (one CPU thread, `OMP_NUM_THREADS=1`) that loads SmolLM2 once, takes the same
BOS-prefixed windows of `builtin:prose`, and alternates a plain sdpa forward of the base model over them (the floor)
with `sinkscope.analyze` over them (default statistics, no certificates: `geometry_cap=0`), `--repeats` times after
one warm-up of each. Its ratio is floor seconds / analyze seconds (1.0 = as fast as the forward alone; the median of
the repeats). The guard runs `--rounds` such processes per tree, tree after tree, and prints for each tree the
median ratio, the ratios' range and the floor's spread (tokens/s), so a change in the floor is not read as a change
of sinkscope. The named commit is exported with `git archive` into a temporary folder and imported from there.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed_guard.py --against HEAD~1 --seq-lens 256,1024
    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/speed_guard.py --against cc25115 --seq-lens 256 --windows 4 --rounds 1

Run it before each stop that touches capture/, statistics/ or pipelines/analysis.py, on a quiet machine, and put
its lines in docs/performance.md with the commit, the load (printed) and the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

MEASURE = r"""
import json, sys, time
import torch
torch.set_num_threads(1)
import sinkscope
from sinkscope.pipelines.analysis import AnalyzeConfig
seq_len, count, repeats = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
clock = time.process_time if sys.argv[4] == "cpu" else time.perf_counter
lm = sinkscope.load_model("smollm2-135m")
ids = torch.cat(list(sinkscope.windows("builtin:prose", lm.tokenizer, seq_len, max_windows=count, batch_size=1)))
from sinkscope.corpus.windows import TokenWindows
def floor():
    with torch.no_grad():
        for row in ids:
            lm.base(input_ids=row[None], use_cache=False)
def sink():
    sinkscope.analyze(lm, TokenWindows(ids, batch_size=1), AnalyzeConfig(geometry_cap=0), progress=False)
def timed(f):
    started = clock(); f(); return clock() - started
floor(); sink()
pairs = [(timed(floor), timed(sink)) for _ in range(repeats)]
print(json.dumps({"floor": [p[0] for p in pairs], "sinkscope": [p[1] for p in pairs], "tokens": int(ids.numel())}))
"""


def measure(src: Path, seq_len: int, count: int, repeats: int, clock: str = "wall") -> dict:
    """One measuring process importing sinkscope from `src`: floor and analyze seconds per repeat (`clock` "wall",
    or "cpu": the process's CPU time, which other jobs on a busy machine disturb less)."""
    env = dict(os.environ, PYTHONPATH=str(src), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", MEASURE, str(seq_len), str(count), str(repeats), clock], env=env,
                          capture_output=True, text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"measuring {src} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summary(name: str, runs: list[dict]) -> str:
    """'NAME: ratio MEDIAN (MIN–MAX), floor A–B tok/s' over every repeat of every round."""
    ratios = [f / s for run in runs for f, s in zip(run["floor"], run["sinkscope"])]
    floors = [run["tokens"] / f for run in runs for f in run["floor"]]
    return (f"{name}: ratio {statistics.median(ratios):.3f} ({min(ratios):.3f}–{max(ratios):.3f}, "
            f"{len(ratios)} repeats), floor {min(floors):.0f}–{max(floors):.0f} tok/s")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--against", required=True, help="a commit to compare with (e.g. HEAD~3, a hash)")
    parser.add_argument("--seq-lens", default="256,1024", help="window lengths (comma-separated)")
    parser.add_argument("--windows", type=int, default=8, help="windows per pass")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes per process (after one warm-up)")
    parser.add_argument("--rounds", type=int, default=2, help="processes per tree, alternating")
    parser.add_argument("--clock", choices=["wall", "cpu"], default="wall",
                        help="time by the wall clock, or by the process's CPU time (one thread: robust to other jobs)")
    args = parser.parse_args(argv)
    commit = subprocess.run(["git", "rev-parse", "--short", args.against], cwd=ROOT, capture_output=True,
                            text=True, check=False)  # fmt: skip
    if commit.returncode != 0:
        raise SystemExit(f"--against {args.against}: not a commit of {ROOT} ({commit.stderr.strip()})")
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    print(f"load {os.getloadavg()[0]:.1f} at start; current tree (HEAD {head.strip()}, with any uncommitted change) "
          f"vs {commit.stdout.strip()}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="speed-guard-") as folder:
        archive = subprocess.run(["git", "archive", args.against, "src"], cwd=ROOT, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        trees = {"current": ROOT / "src", commit.stdout.strip(): Path(folder) / "src"}
        for seq_len in [int(t) for t in args.seq_lens.split(",") if t]:
            runs: dict[str, list[dict]] = {name: [] for name in trees}
            for _ in range(args.rounds):
                for name, src in trees.items():
                    runs[name].append(measure(src, seq_len, args.windows, args.repeats, args.clock))
            for name in trees:
                print(f"T = {seq_len}, {args.windows} windows, 1 thread, {args.clock} clock: " + summary(name, runs[name]))
    print(f"load {os.getloadavg()[0]:.1f} at end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
