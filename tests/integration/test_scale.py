"""Issue 7 at small scale: torchrun data parallelism, kill-and-resume, and non-finite windows."""

import signal
import subprocess
import sys

import pandas as pd
import pytest
import torch

from sinkscope.capture.feed import Feed
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel, load_model
from sinkscope.pipelines.analysis import analyze
from sinkscope.pipelines.checkpoint import save_checkpoint

from .tiny_checkpoint import save_tiny_llama, write_corpus
from .waiting import BLOCK_UNTIL_SIGNALLED, HANG_GUARD, wait_for


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt")


# `analyze` held (until killed) right after it saved its first checkpoint: the kill lands between two checkpoints
# however fast or slow the machine is.
HOLD_AFTER_FIRST_CHECKPOINT = (
    "import pathlib, sys, time\n"
    "import sinkscope.pipelines.analysis as analysis\n"
    "real = analysis.save_checkpoint\n"
    "def saved_then_held(*args, **kwargs):\n"
    "    real(*args, **kwargs)\n"
    "    pathlib.Path(sys.argv[1]).touch()\n"
    f"    {BLOCK_UNTIL_SIGNALLED}\n"
    "analysis.save_checkpoint = saved_then_held\n"
    "from sinkscope.cli.main import main; sys.exit(main(sys.argv[2:]))"
)


def analyze_cli(*args: str, launcher: tuple[str, ...] = ()) -> subprocess.Popen:
    command = [sys.executable, *launcher, "-m", "sinkscope.cli.main", "analyze", "--quiet", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def tables(directory):
    return [pd.read_parquet(directory / f"{name}.parquet") for name in ("heads", "layers", "positions")]


def assert_same_run(a, b):
    # Shards batch different windows together, so the float32 forward differs in the last bits (~1e-8);
    # the float64 sums on top of it must not add more.
    for left, right in zip(tables(a), tables(b)):
        pd.testing.assert_frame_equal(left, right, rtol=1e-6, atol=1e-9)


def test_two_process_torchrun_equals_one_process(tiny, tmp_path):
    model, corpus = tiny
    common = ["--model", str(model), "--corpus", str(corpus), "--seq-len", "24", "--max-windows", "11",
              "--batch-size", "2", "--geometry-cap", "40", "--smoothing"]  # smoothing merges like the rest
    single = analyze_cli(*common, "--out", str(tmp_path / "single"))
    assert single.wait(timeout=HANG_GUARD) == 0, single.stderr.read()
    launcher = ("-m", "torch.distributed.run", "--nproc-per-node", "2", "--standalone")  # a free port
    parallel = analyze_cli(*common, "--out", str(tmp_path / "parallel"), launcher=launcher)
    assert parallel.wait(timeout=HANG_GUARD) == 0, parallel.stderr.read()
    assert_same_run(tmp_path / "single", tmp_path / "parallel")


def test_killed_run_resumes_to_the_uninterrupted_result(tiny, tmp_path):
    model, corpus = tiny
    common = ["--model", str(model), "--corpus", str(corpus), "--seq-len", "16", "--max-windows", "30",
              "--batch-size", "1", "--geometry-cap", "40", "--checkpoint-every", "5", "--smoothing"]
    reference = analyze_cli(*common, "--out", str(tmp_path / "reference"))
    assert reference.wait(timeout=HANG_GUARD) == 0, reference.stderr.read()
    out, ready = tmp_path / "resumed", tmp_path / "checkpointed"
    checkpoint = tmp_path / ".resumed.checkpoint" / "rank0.safetensors"
    victim = subprocess.Popen([sys.executable, "-c", HOLD_AFTER_FIRST_CHECKPOINT, str(ready), "analyze", "--quiet",
                               *common, "--out", str(out)], stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for(ready, victim)  # its first checkpoint (5 windows) is on disk and it is held there: kill it now
    victim.send_signal(signal.SIGKILL)
    victim.wait()
    # --out was created (empty) when the run claimed it; SIGKILL leaves it empty, which any later run accepts
    assert checkpoint.exists() and not (out / "run.json").exists()
    resumed = analyze_cli(*common, "--out", str(out), "--resume")
    assert resumed.wait(timeout=HANG_GUARD) == 0, resumed.stderr.read()
    assert_same_run(tmp_path / "reference", out)
    assert not checkpoint.parent.exists()


def test_resume_refuses_a_different_analysis(tiny, tmp_path):
    model, corpus = tiny
    lm = load_model(str(model))
    ids = torch.randint(3, 60, (6, 12))
    ids[:, 0] = 0
    stream = TokenWindows(ids, batch_size=2)
    analyze(lm, stream, progress=False, checkpoint_dir=tmp_path / "ck", checkpoint_every=2)
    assert (tmp_path / "ck" / "rank0.safetensors").is_file()  # kept until the caller has saved the result
    save_checkpoint(Feed([], 12), tmp_path / "ck", 0, {"something": "else"}, windows_sha256="")
    with pytest.raises(SinkscopeError, match="different analysis"):
        analyze(lm, TokenWindows(ids), progress=False, checkpoint_dir=tmp_path / "ck", resume=True)


def test_non_finite_window_is_reported_with_its_index(tiny):
    model, _ = tiny
    lm = load_model(str(model))
    ids = torch.randint(8, 60, (5, 10))
    ids[:, 0] = 0
    ids[3, 4] = 7  # only window 3 holds token 7, whose embedding is broken
    with torch.no_grad():
        lm.model.get_input_embeddings().weight[7] = torch.nan
    bad = LoadedModel(model=lm.model, tokenizer=None, family=family_for("llama"), identity={"dtype": "float32"})
    with pytest.raises(SinkscopeError, match="window 3 gave non-finite attention in layer 0"):
        analyze(bad, TokenWindows(ids, batch_size=2), progress=False)
