"""Issue 32, item 10, in a real process: `analyze --max-windows 2` on a 40 MB text file without a blank line (one
document) costs the memory of what it was asked to analyse, not of the file. Before, the file was read whole and
tokenized whole, twice: 5.9 GB and 225 s (the issue); with the tiny Llama's tokenizer here, 1.7 GB for 8 MB."""

import os
import random
import subprocess
import sys
from pathlib import Path

from integration.tiny_checkpoint import WORDS, save_tiny_llama

# The CLI, without drawing report.html (tested in tests/browser; it costs seconds and has nothing to do with the corpus).
# At exit the child writes its own VmHWM (the peak of its own address space): `ru_maxrss` of a child would also count
# the parent's resident memory at the fork (Linux carries the old address space's peak across exec), and the
# parent is a pytest process that holds GBs late in the suite.
CLI = """import atexit, sys
def peak():
    with open(sys.argv[1], "w") as out:
        out.write(next(line for line in open("/proc/self/status") if line.startswith("VmHWM:")))
atexit.register(peak)
import sinkscope.report.html
sinkscope.report.html.write_report = lambda runs, path, figures_dir=None: path.touch()
from sinkscope.cli.main import main
sys.exit(main(sys.argv[2:]))"""
BOUND = 1 << 30  # bytes of peak resident memory; the process itself (torch, transformers, the model) is ~0.5 GB


def peak_memory(argv: list[str], log, report: Path) -> tuple[int, int]:
    """Exit status and peak resident memory (bytes, the child's own `VmHWM`) of one child process."""
    env = os.environ | {"HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    code = subprocess.run([sys.executable, "-c", CLI, str(report), *argv], stdout=log, stderr=log, env=env).returncode
    kilobytes = int(report.read_text().split()[1])  # "VmHWM:   123456 kB"
    return code, kilobytes * 1024


def test_a_40_mb_line_with_max_windows_2_costs_what_two_windows_cost(tmp_path):
    model = save_tiny_llama(tmp_path / "model")
    rng = random.Random(0)
    line = " ".join(rng.choice(WORDS[3:]) for _ in range(100_000)).encode() + b" "
    corpus = tmp_path / "line.txt"
    with open(corpus, "wb") as handle:
        for _ in range(40_000_000 // len(line) + 1):
            handle.write(line)
    assert corpus.stat().st_size > 40_000_000 and b"\n" not in corpus.read_bytes()[: 1 << 20]
    out = tmp_path / "run"
    with open(tmp_path / "log.txt", "wb") as log:
        code, peak = peak_memory(["analyze", "--model", str(model), "--corpus", str(corpus), "--max-windows", "2",
                                  "--seq-len", "16", "--geometry-cap", "0", "--threads", "1", "--quiet",
                                  "--out", str(out)], log, tmp_path / "peak.txt")  # fmt: skip
    said = (tmp_path / "log.txt").read_text()
    assert code == 0, said
    assert "analysed 30 tokens in 2 windows of T=16; stopped at --max-windows 2" in said
    assert peak < BOUND, f"peak resident memory {peak / 2**30:.2f} GiB"
