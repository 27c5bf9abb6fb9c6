"""Issue 26, reliability round two: no result lost or overwritten under any fault, no path outside `--out`, every
failure one line.

Full disks are an `OSError(ENOSPC)` injected into the write; interruptions are real SIGINT/SIGTERM sent to real
`sinkscope` subprocesses. Models are the tiny random Llama of `tiny_checkpoint.py`; train-bb runs are 4 steps.
"""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch

import sinkscope.models.load
from sinkscope.cli.main import main

from .test_reliability import interrupt_after_checkpoints
from .tiny_checkpoint import save_tiny_llama, write_corpus
from .waiting import (
    AS_A_FOREGROUND_JOB,
    BLOCK_UNTIL_SIGNALLED,
    HANG_GUARD,
    catches,
    launched_in_the_background,
    wait_for,
)

TINY_BB = ["--steps", "4", "--eval-every", "2", "--layers", "1", "--heads", "1", "--d-model", "16", "--length", "9",
           "--vocab-size", "8", "--triggers", "2", "--batch-size", "4", "--set", "train.eval_batch_size=8",
           "--set", "train.warmup_steps=1", "--quiet"]  # fmt: skip


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt", documents=60)


@pytest.fixture(autouse=True)
def one_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture
def no_report(monkeypatch):
    """Skip drawing report.html (tested in tests/browser) so each run takes about a second."""
    import sinkscope.report.html

    monkeypatch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: the error must come before it."""

    def tripwire(*args, **kwargs):
        raise AssertionError("the model was loaded before the bad input was refused")

    monkeypatch.setattr(sinkscope.models.load, "load_model", tripwire)


def analyze_args(tiny, *extra: str) -> list[str]:
    model, corpus = tiny
    return ["analyze", "--model", str(model), "--corpus", str(corpus), "--seq-len", "12", "--max-windows", "6",
            "--batch-size", "2", "--geometry-cap", "0", "--quiet", *extra]  # fmt: skip


def one_error(capsys, argv: list[str], code: int = 2) -> str:
    """Run the CLI; assert it exits with `code` and printed exactly one error line and no traceback."""
    capsys.readouterr()
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line or ": interrupted" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` with its bytes (hidden ones included)."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# --- 1. grid run names never leave --out ------------------------------------------------------------------------


@pytest.fixture
def no_bb_page(monkeypatch):
    """train-bb runs without their figures and page (tested in tests/unit/test_train_bb.py)."""
    import sinkscope.synthetic.report_page

    monkeypatch.setattr(sinkscope.synthetic.report_page, "write_figures", lambda *args, **kwargs: [])
    monkeypatch.setattr(sinkscope.synthetic.report_page, "write_report", lambda path, *args: path.touch())


def test_grid_names_cannot_write_or_delete_outside_out(tmp_path, capsys, no_bb_page):
    victim = tmp_path / "victim"  # an analyze run next to --out
    victim.mkdir()
    (victim / "run.json").write_text('{"precious": true}')
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"../victim": {}, str(tmp_path / "abs"): {}, "ok": {}}))
    out = tmp_path / "g"
    assert main(["train-bb", "--out", str(out), "--grid", str(grid), *TINY_BB]) == 0
    assert (victim / "run.json").read_text() == '{"precious": true}' and not (tmp_path / "abs").exists()
    folders = sorted(p.name for p in out.iterdir() if p.is_dir())
    assert len(folders) == 3 and "ok" in folders and all((out / f / "summary.json").is_file() for f in folders)
    assert sorted(pd.read_parquet(out / "summary.parquet")["run"]) == sorted(["../victim", str(tmp_path / "abs"), "ok"])
    assert {p.parent for p in tmp_path.rglob("summary.json")} == {out / f for f in folders}


# --- 2, 4, 9. sweeps: resume from any cell, distinct cells, one writer ----------------------------------------


def sweep_args(tiny, out: Path, corpora: str, *extra: str) -> list[str]:
    model, _ = tiny
    return ["sweep", "--models", str(model), "--corpora", corpora, "--seq-lens", "8,12", "--epsilons", "0.3",
            "--max-windows", "2", "--batch-size", "2", "--quiet", "--out", str(out), *extra]  # fmt: skip


def test_sweep_resumes_when_a_models_first_cell_is_done_and_a_later_one_is_not(tiny, tmp_path, capsys, monkeypatch):
    import sinkscope.pipelines.analysis

    _, corpus = tiny
    out = tmp_path / "sw"
    real, calls = sinkscope.pipelines.analysis.analyze, []

    def ctrl_c_in_the_second_cell(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(sinkscope.pipelines.analysis, "analyze", ctrl_c_in_the_second_cell)
        line = one_error(capsys, sweep_args(tiny, out, str(corpus)), code=130)
    assert f"finished cells are kept in {out}/cells/; continue with: sinkscope sweep" in line
    assert len(list((out / "cells").iterdir())) == 1 and not (tmp_path / ".sw.lock").exists()
    capsys.readouterr()
    assert main(sweep_args(tiny, out, str(corpus))) == 0  # was: UnboundLocalError: 'lm'
    err = capsys.readouterr().err
    assert "[1/2]" in err and "skipped" in err and err.count("analysing") == 1
    assert main(sweep_args(tiny, tmp_path / "fresh", str(corpus))) == 0
    columns = ["model", "corpus", "seq_len", "epsilon", "windows", "sink_rate", "mean_sink_score", "cell"]
    pd.testing.assert_frame_equal(pd.read_csv(out / "sweep.csv")[columns],
                                  pd.read_csv(tmp_path / "fresh" / "sweep.csv")[columns])


def test_sweep_cells_of_corpora_with_non_latin_names_do_not_collide(tiny, tmp_path):
    _, corpus = tiny
    text = corpus.read_text().split("\n\n")
    ru, zh = tmp_path / "корпус.txt", tmp_path / "语料.txt"
    ru.write_text("\n\n".join(text[:20]))
    zh.write_text("\n\n".join(text[30:50]))
    out = tmp_path / "sw"
    assert main(sweep_args(tiny, out, f"{ru},{zh}")) == 0
    table = pd.read_csv(out / "sweep.csv")
    assert table["cell"].nunique() == 4 == len({p.name for p in (out / "cells").iterdir()})
    for row in table.itertuples():  # each row points at the cell computed for its own corpus
        meta = json.loads((out / "cells" / row.cell / "run.json").read_text())
        assert meta["sweep_cell"]["corpus"] == row.corpus and meta["sweep_cell"]["seq_len"] == row.seq_len


def test_a_second_sweep_on_one_out_is_refused_and_a_corrupt_cell_is_one_line(tiny, tmp_path, capsys):
    from sinkscope.staging import claimed_output

    _, corpus = tiny
    out = tmp_path / "sw"
    with claimed_output(out, resume=True):  # a first sweep still running
        line = one_error(capsys, sweep_args(tiny, out, str(corpus)))
    assert "is being written by another sinkscope process" in line
    assert main(sweep_args(tiny, out, str(corpus))) == 0
    cell = next((out / "cells").iterdir())
    (cell / "run.json").write_text('{"sweep_cell": ')
    line = one_error(capsys, sweep_args(tiny, out, str(corpus)))
    assert f"sweep cell {cell / 'run.json'} is unreadable" in line and "delete the folder" in line


# --- 3, 11. the checkpoint outlives the save; SIGTERM is Ctrl-C ------------------------------------------------

SLOW_SAVE = (
    f"{AS_A_FOREGROUND_JOB}\n"
    "import pathlib, sys, time\n"
    "import sinkscope.report.html as page\n"
    "def stuck(runs, path, figures_dir=None):\n"
    "    pathlib.Path(sys.argv[1]).touch()\n"
    f"    {BLOCK_UNTIL_SIGNALLED}\n"
    "page.write_report = stuck\n"
    "from sinkscope.cli.main import main; sys.exit(main(sys.argv[2:]))"
)


def test_sigint_or_sigterm_while_the_result_is_saved_keeps_the_checkpoint(tiny, tmp_path, capsys, no_report):
    """Two real `sinkscope analyze` processes (run side by side to save time) are stopped while writing their
    result, one by SIGINT (Ctrl-C), one by SIGTERM: each says so in one line, keeps its checkpoint, names the
    resume command, and leaves no lock, run or staging folder; resuming one gives the uninterrupted result.
    The children start with SIGINT ignored, as from a background job of a script (`make test &`), and restore
    Ctrl-C as a terminal gives it (`AS_A_FOREGROUND_JOB`): the test does not depend on how it was launched."""
    children = {}
    try:
        for signum in (signal.SIGINT, signal.SIGTERM):
            out, ready = tmp_path / signum.name / "long", tmp_path / f"{signum.name}.ready"
            out.parent.mkdir()
            args = analyze_args(tiny, "--out", str(out), "--checkpoint-every", "4")  # 6 windows: saved at 4, then 6
            command = [sys.executable, "-c", SLOW_SAVE, str(ready), *args]
            with launched_in_the_background():
                children[signum] = (subprocess.Popen(command, stderr=subprocess.PIPE, text=True), ready, out, args)
        for signum, (child, ready, _, _) in children.items():
            wait_for(ready, child)  # the pass is done; report.html is being written inside the staged run directory
            assert catches(child.pid, signum), f"the child would not see {signum.name}: it ignores or blocks it"
            child.send_signal(signum)
        for signum, (child, _, out, _) in children.items():
            _, err = child.communicate(timeout=HANG_GUARD)
            check_interrupted(signum, child.returncode, err, out)
    finally:  # a failed check ends the children, which would otherwise sleep in their save forever
        for child, *_ in children.values():
            if child.poll() is None:
                child.kill()
                child.communicate()
    _, _, out, args = children[signal.SIGTERM]
    capsys.readouterr()
    assert main([*args, "--resume"]) == 0
    assert not out.with_name(".long.checkpoint").exists()  # removed once the result was on disk
    assert main(analyze_args(tiny, "--out", str(tmp_path / "fresh"))) == 0
    for name in ("heads", "layers", "positions"):
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"{name}.parquet"),
                                      pd.read_parquet(tmp_path / "fresh" / f"{name}.parquet"), rtol=1e-6, atol=1e-9)


def check_interrupted(signum: int, returncode: int, err: str, out: Path) -> None:
    """The interrupted analyze exited 128 + `signum`, said so in one line naming its checkpoint and the resume
    command, kept the checkpoint, and left no run, staging folder or lock beside `out`."""
    assert returncode == 128 + signum, err
    checkpoint = out.with_name(".long.checkpoint")
    lines = [line for line in err.splitlines() if line.startswith("sinkscope") and " CPU thread" not in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("sinkscope analyze: interrupted" + (" by SIGTERM" if signum == signal.SIGTERM else ""))
    assert f"checkpointed in {checkpoint}/" in lines[0] and "--resume" in lines[0]
    assert (checkpoint / "rank0.safetensors").is_file()
    assert [p.name for p in out.parent.iterdir()] == [".long.checkpoint"]  # no run, .partial-* or lock


def test_a_full_disk_while_saving_keeps_the_checkpoint_and_the_previous_run(tiny, tmp_path, capsys, monkeypatch):
    import sinkscope.report.html

    out = tmp_path / "run"
    monkeypatch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())
    assert main(analyze_args(tiny, "--out", str(out), "--max-windows", "4")) == 0
    before = snapshot(out)
    monkeypatch.setattr(sinkscope.report.html, "write_report", disk_full)
    args = analyze_args(tiny, "--out", str(out), "--overwrite", "--checkpoint-every", "2")
    line = one_error(capsys, args)
    checkpoint = tmp_path / ".run.checkpoint"
    assert f"cannot write {out}: No space left on device" in line and "nothing was changed there" in line
    assert f"checkpointed in {checkpoint}/" in line and "--resume" in line
    assert snapshot(out) == before and (checkpoint / "rank0.safetensors").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".run.checkpoint", "run"]
    monkeypatch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())
    assert main([*args, "--resume"]) == 0 and not checkpoint.exists()
    assert json.loads((out / "run.json").read_text())["corpus"]["windows"] == 6


# --- 6. --out a symbolic link ------------------------------------------------------------------------------------


def test_out_a_symlink_to_a_directory_writes_where_it_points(tiny, tmp_path, capsys, no_report, monkeypatch):
    target = tmp_path / "disk" / "runs"
    target.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(target)
    assert main(analyze_args(tiny, "--out", str(link))) == 0  # was: the whole analysis, then rmtree failed
    assert link.is_symlink() and (target / "run.json").is_file()
    assert main(analyze_args(tiny, "--out", str(link), "--overwrite", "--max-windows", "4")) == 0
    assert link.is_symlink() and json.loads((target / "run.json").read_text())["corpus"]["windows"] == 4
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "nowhere")
    monkeypatch.setattr(sinkscope.models.load, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    line = one_error(capsys, analyze_args(tiny, "--out", str(dangling)))
    assert f"--out {dangling} is a symbolic link to {tmp_path / 'nowhere'}, which is not a directory" in line
    assert not (tmp_path / "nowhere").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "disk", "link"]


# --- 7, 14, 15. resume identity by content; damaged checkpoints ------------------------------------------------


@pytest.fixture
def interrupted(tiny, tmp_path, capsys, monkeypatch):
    """A copy of the corpus, and an analyze of it stopped by Ctrl-C after its first checkpoint (2 of 6 windows)."""
    model, corpus = tiny
    copy = tmp_path / "corpus.txt"
    copy.write_text(corpus.read_text())
    args = analyze_args((model, copy), "--out", str(tmp_path / "run"), "--checkpoint-every", "2")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoints(patch, 1)
        one_error(capsys, args, code=130)
    return copy, args, tmp_path / ".run.checkpoint" / "rank0.safetensors"


def test_resume_on_a_changed_corpus_file_is_refused(interrupted, tmp_path, capsys, no_report):
    corpus, args, checkpoint = interrupted
    text = corpus.read_text()
    first, rest = text.split(" ", 1)
    corpus.write_text(("w1" if first != "w1" else "w2") + " " + rest)  # same path, the first token changed
    line = one_error(capsys, [*args, "--resume"])
    assert f"checkpoint {checkpoint} was computed on other text" in line and "rerun without --resume" in line
    assert not (tmp_path / "run").exists() and checkpoint.is_file()
    corpus.write_text(text)  # the same text again: resumes
    assert main([*args, "--resume"]) == 0


def test_damaged_checkpoints_are_one_line(interrupted, tmp_path, capsys):
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    _, args, checkpoint = interrupted
    good = checkpoint.read_bytes()
    state = load_file(checkpoint)
    with safe_open(str(checkpoint), "pt") as opened:  # the metadata as written
        metadata = opened.metadata()
    nan = dict(state)
    first_float = next(k for k, v in state.items() if v.is_floating_point() and v.numel() and k != "windows")
    nan[first_float] = torch.full_like(state[first_float], float("nan"))
    first_int = next(k for k, v in state.items() if v.dtype == torch.int64 and v.numel() and k != "windows")

    def edited(value: float) -> dict:
        return {**state, first_float: torch.full_like(state[first_float], value)}

    cases = {
        "not safetensors": (lambda: checkpoint.write_bytes(b"not a checkpoint at all"), "is damaged"),
        "truncated": (lambda: checkpoint.write_bytes(good[: len(good) // 2]), "is damaged"),
        "no metadata": (lambda: save_file(state, str(checkpoint)), "lacks its metadata"),
        "metadata not JSON": (lambda: save_file(state, str(checkpoint), metadata={**metadata, "fingerprint": "{"}),
                              "is damaged"),
        "window count changed": (lambda: save_file({**state, "windows": state["windows"] + 2}, str(checkpoint),
                                                   metadata=metadata), "was edited or damaged"),
        "NaN inside": (lambda: save_file(nan, str(checkpoint), metadata=metadata), "was edited or damaged"),
        # issue 32, item 15: values that looked plausible to the old checks
        "inf inside": (lambda: save_file(edited(float("inf")), str(checkpoint), metadata=metadata),
                       "was edited or damaged"),
        "-1e6 inside": (lambda: save_file(edited(-1e6), str(checkpoint), metadata=metadata), "was edited or damaged"),
        "key id 1e12": (lambda: save_file({**state, first_int: torch.full_like(state[first_int], 10**12)},
                                          str(checkpoint), metadata=metadata), "was edited or damaged"),
        "metadata window count -4": (lambda: save_file(state, str(checkpoint), metadata={**metadata, "windows": "-4"}),
                                     "was edited or damaged"),
    }  # fmt: skip
    for case, (damage, message) in cases.items():
        damage()
        line = one_error(capsys, [*args, "--resume"])
        assert message in line and "rerun without --resume" in line and str(checkpoint) in line, f"{case}: {line}"
        checkpoint.write_bytes(good)


# --- 5. view writes a staged page, never over a file that is not a page ---------------------------------------


def test_view_never_truncates_a_page_nor_replaces_a_run_json(tiny, tmp_path, capsys, monkeypatch):
    model, _ = tiny
    view = ["view", "--model", str(model), "--text", "w1 w2 w3 w4 w5", "--out"]
    page = tmp_path / "page.html"
    assert main([*view, str(page)]) == 0
    good = page.read_bytes()
    real_write = Path.write_text

    def full_after_a_few_bytes(self, data, *args, **kwargs):
        real_write(self, data[:100], *args, **kwargs)  # a partial page reached the disk, then ENOSPC
        disk_full()

    with monkeypatch.context() as patch:
        patch.setattr(Path, "write_text", full_after_a_few_bytes)
        line = one_error(capsys, [*view, str(page)])
    assert f"cannot write {page}: No space left on device" in line
    assert page.read_bytes() == good and sorted(p.name for p in tmp_path.iterdir()) == ["page.html"]
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text('{"precious": true}')
    line = one_error(capsys, [*view, str(run / "run.json")])
    assert "exists and is not a page sinkscope wrote" in line
    assert (run / "run.json").read_text() == '{"precious": true}'
    assert "is a directory" in one_error(capsys, [*view, str(run)])


# --- 8, 12. --overwrite keeps nested runs; export replaces only an earlier export, whole or not at all ----------


@pytest.fixture
def finished(tiny, tmp_path, no_report):
    out = tmp_path / "run"
    assert main(analyze_args(tiny, "--out", str(out), "--max-windows", "2")) == 0
    return out


def test_overwrite_refuses_a_run_holding_other_runs(tiny, finished, tmp_path, capsys, no_model):
    nested = finished / "older"
    nested.mkdir()
    (nested / "run.json").write_text('{"nested": true}')
    before = snapshot(finished)
    line = one_error(capsys, analyze_args(tiny, "--out", str(finished), "--overwrite"))
    assert "holds files sinkscope did not write (older, older/run.json)" in line and "move them out" in line
    assert snapshot(finished) == before


def test_export_replaces_only_an_earlier_export_and_never_half(finished, tmp_path, capsys, monkeypatch):
    assert main(["export", str(finished), "--format", "csv"]) == 0
    assert main(["export", str(finished), "--format", "csv"]) == 0  # an earlier export is replaced
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "heads.csv").write_text("my own table")
    (mine / "notes.txt").write_text("keep")
    line = one_error(capsys, ["export", str(finished), "--format", "csv", "--out", str(mine)])
    assert "holds files that are not an export" in line and "notes.txt" in line
    assert (mine / "heads.csv").read_text() == "my own table" and (mine / "notes.txt").read_text() == "keep"
    before = snapshot(finished / "csv")
    real = pd.DataFrame.to_csv

    def full_after_one_table(self, path, *args, **kwargs):
        if Path(path).name != "heads.csv":
            return real(self, path, *args, **kwargs)
        Path(path).write_text("")  # an empty file reached the disk, then ENOSPC
        disk_full()

    monkeypatch.setattr(pd.DataFrame, "to_csv", full_after_one_table)
    line = one_error(capsys, ["export", str(finished), "--format", "csv"])
    assert f"cannot write {finished / 'csv'}: No space left on device" in line
    assert snapshot(finished / "csv") == before  # the earlier export, untouched
    line = one_error(capsys, ["export", str(finished), "--format", "csv", "--out", str(tmp_path / "new")])
    assert not (tmp_path / "new").exists() and not [p for p in tmp_path.iterdir() if ".partial-" in p.name]


# --- 10. the GGUF cache never keeps a half conversion ---------------------------------------------------------

FAKE_GGUF = (
    "import pathlib, sys, time, transformers\n"
    "tiny, ready = sys.argv[1], pathlib.Path(sys.argv[2])\n"
    "real_model = transformers.AutoModelForCausalLM.from_pretrained\n"
    "real_tokenizer = transformers.AutoTokenizer.from_pretrained\n"
    "transformers.AutoModelForCausalLM.from_pretrained = (\n"
    "    lambda path, *a, gguf_file=None, **k: real_model(tiny if gguf_file else path, *a, **k))\n"
    "transformers.AutoTokenizer.from_pretrained = (\n"
    "    lambda path, *a, gguf_file=None, **k: real_tokenizer(tiny if gguf_file else path, *a, **k))\n"
    "real_save = transformers.PreTrainedModel.save_pretrained\n"
    "def slow_save(self, *a, **k):\n"
    "    real_save(self, *a, **k)\n"
    "    ready.touch()\n"
    f"    {BLOCK_UNTIL_SIGNALLED}\n"
    "transformers.PreTrainedModel.save_pretrained = slow_save\n"
    "from sinkscope.cli.main import main; sys.exit(main(sys.argv[3:]))"
)


def test_an_interrupted_gguf_conversion_leaves_nothing_in_the_cache(tiny, tmp_path, monkeypatch):
    """A real `sinkscope analyze` of a .gguf (its conversion replaced by the tiny model, its save held) is stopped by
    SIGTERM while writing the cache: no `.partial-*` stays. A conversion left by a killed process is removed by the
    next one."""
    model, corpus = tiny
    gguf, cache, ready = tmp_path / "m.gguf", tmp_path / "cache", tmp_path / "ready"
    gguf.write_bytes(b"GGUF stand-in")
    argv = [sys.executable, "-c", FAKE_GGUF, str(model), str(ready), "analyze", "--model", str(gguf), "--corpus",
            str(corpus), "--seq-len", "8", "--max-windows", "2", "--out", str(tmp_path / "run")]  # fmt: skip
    child = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env={**os.environ, "SINKSCOPE_CACHE": str(cache)})
    wait_for(ready, child)
    written = [p.name for p in (cache / "gguf").iterdir() if not p.name.endswith(".lock")]
    assert [".partial-" in name for name in written] == [True]  # the conversion is being written
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=HANG_GUARD)
    assert child.returncode == 143 and "interrupted by SIGTERM" in err, err
    assert list((cache / "gguf").iterdir()) == [] and not (tmp_path / "run").exists()
    # SIGKILL leaves a conversion behind; the next conversion removes it (its process is gone) and caches the model
    from sinkscope.models.load import _dequantized_gguf, file_sha256

    sha256 = file_sha256(gguf)
    from sinkscope.locking import host_tag

    stale = cache / "gguf" / f".{sha256[:32]}.partial-{dead_pid()}@{host_tag()}-x1y2"
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    monkeypatch.setenv("SINKSCOPE_CACHE", str(cache))
    import transformers

    for auto in (transformers.AutoModelForCausalLM, transformers.AutoTokenizer):
        real = auto.from_pretrained
        monkeypatch.setattr(auto, "from_pretrained", lambda path, *a, real=real, gguf_file=None, **k: real(model))
    target = _dequantized_gguf(gguf, sha256)
    assert [p.name for p in (cache / "gguf").iterdir()] == [target.name] and (target / "model.safetensors").is_file()


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


# --- 14. one line instead of a traceback ---------------------------------------------------------------------


def test_damaged_model_directories_are_one_line(tiny, tmp_path, capsys):
    import shutil

    model, corpus = tiny

    def damaged(name, damage):
        copy = tmp_path / name
        shutil.copytree(model, copy)
        damage(copy)
        return copy

    weights = (model / "model.safetensors").read_bytes()
    config = json.loads((model / "config.json").read_text())
    cases = {
        "truncated weights": (damaged("t", lambda d: (d / "model.safetensors").write_bytes(weights[:300])),
                              "safetensors weights are truncated or damaged"),
        "garbage weights": (damaged("g", lambda d: (d / "model.safetensors").write_bytes(random.Random(1).randbytes(1000))),
                            "safetensors weights are truncated or damaged"),
        "no heads": (damaged("h", lambda d: (d / "config.json").write_text(
            json.dumps({**config, "num_attention_heads": 0}))), "gives num_attention_heads 0; it must be a positive"),
    }  # fmt: skip
    for case, (directory, message) in cases.items():
        line = one_error(capsys, analyze_args((directory, corpus), "--out", str(tmp_path / case)))
        assert message in line and str(directory) in line, f"{case}: {line}"


def test_bad_bos_id_and_set_values_are_one_line(tiny, tmp_path, capsys, monkeypatch):
    out = str(tmp_path / "o")
    with monkeypatch.context() as patch:
        patch.setattr(sinkscope.models.load, "load_model", lambda *a, **k: pytest.fail("model loaded"))
        assert "--bos-id -5 is not a token id" in one_error(capsys, analyze_args(tiny, "--out", out, "--bos-id", "-5"))
        line = one_error(capsys, ["train-bb", "--out", out, "--set", "train.steps=abc"])
        assert "--set train.steps='abc': expected an integer for train.steps" in line
    line = one_error(capsys, analyze_args(tiny, "--out", out, "--bos-id", "999999"))
    assert "--bos-id 999999 is not a token of the model (its ids are 0 to 63)" in line
    grid = tmp_path / "grid.json"
    grid.write_text(json.dumps({"a": {"train.lr": "fast"}}))
    line = one_error(capsys, ["train-bb", "--out", out, "--grid", str(grid)])
    assert "--grid run 'a': train.lr='fast': expected a number for train.lr" in line
    assert not (tmp_path / "o").exists()


def test_a_full_disk_during_report_keeps_the_runs_figures(tiny, tmp_path, capsys, monkeypatch):
    import sinkscope.report.html

    out = tmp_path / "run"
    with monkeypatch.context() as patch:  # a run whose report and figures stand in for those of an earlier report
        patch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())
        assert main(analyze_args(tiny, "--out", str(out), "--max-windows", "2")) == 0
    (out / "figures").mkdir()
    for name in ("head_scores.png", "sink_rate_by_layer.png", "head_scores.svg"):
        (out / "figures" / name).write_bytes(random.Random(name).randbytes(64))
    before = snapshot(out)
    real_write = Path.write_bytes

    def full_after_a_few_bytes(self, data):
        real_write(self, data[:50])  # a truncated PNG reached the disk, then ENOSPC
        disk_full()

    monkeypatch.setattr(Path, "write_bytes", full_after_a_few_bytes)
    line = one_error(capsys, ["report", str(out)])
    assert f"cannot write {out / 'figures'}" in line and "No space left on device" in line
    assert snapshot(out) == before  # every figure and report.html as they were, no temporaries


def test_a_full_disk_during_train_bb_is_one_line_and_leaves_nothing(tmp_path, capsys, monkeypatch):
    import sinkscope.synthetic.report_page

    monkeypatch.setattr(sinkscope.synthetic.report_page, "write_report", disk_full)
    out = tmp_path / "bb"
    line = one_error(capsys, ["train-bb", "--out", str(out), *TINY_BB])
    assert f"cannot write {out}: No space left on device" in line
    assert list(tmp_path.iterdir()) == []  # no run, no .bb.partial-*, no lock


def test_a_full_disk_while_checkpointing_keeps_the_previous_checkpoint(tiny, tmp_path, capsys, monkeypatch, no_report):
    out = tmp_path / "run"
    args = analyze_args(tiny, "--out", str(out), "--checkpoint-every", "2")
    real_write, writes = Path.write_bytes, []

    def second_checkpoint_fills_the_disk(self, data):
        if ".tmp" in self.name and "rank0" in self.name:
            writes.append(1)
            if len(writes) == 2:
                real_write(self, data[:10])
                disk_full()
        return real_write(self, data)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "write_bytes", second_checkpoint_fills_the_disk)
        line = one_error(capsys, args)
    checkpoint = tmp_path / ".run.checkpoint" / "rank0.safetensors"
    assert f"cannot write checkpoint {checkpoint}: No space left on device" in line and "--resume" in line
    assert [p.name for p in checkpoint.parent.iterdir()] == ["rank0.safetensors"] and not out.exists()
    assert main([*args, "--resume"]) == 0 and not checkpoint.parent.exists()


def test_an_interrupted_grid_keeps_its_finished_runs_and_names_the_command(tmp_path, capsys, monkeypatch, no_bb_page):
    import sinkscope.synthetic.experiments as experiments

    real, calls = experiments.train_bb, []

    def ctrl_c_in_the_second_run(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    out = tmp_path / "g"
    argv = ["train-bb", "--out", str(out), "--seeds", "0,1", *TINY_BB]
    with monkeypatch.context() as patch:
        patch.setattr(experiments, "train_bb", ctrl_c_in_the_second_run)
        line = one_error(capsys, [*argv, "--overwrite"], code=130)
    assert f"finished runs are kept in {out}/; continue with: sinkscope train-bb --out {out} --seeds 0,1" in line
    assert "--overwrite" not in line and (out / "run" / "seed_0" / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g"] and sorted(os.listdir(out / "run")) == ["seed_0"]
    stamp = (out / "run" / "seed_0" / "summary.json").stat().st_mtime_ns
    assert main(argv) == 0 and (out / "run" / "seed_0" / "summary.json").stat().st_mtime_ns == stamp
    assert (out / "run" / "seed_1" / "summary.json").is_file()


def test_view_refuses_a_bad_bos_id_and_a_directory_out_before_the_model_loads(tmp_path, monkeypatch):
    """`view --bos-id -5` and `view --out DIR` are one line before any model loads; `--bos-id` beyond the
    vocabulary is one line right after it, never an IndexError inside the forward pass."""
    import sinkscope.models.load as load
    from sinkscope.errors import SinkscopeError
    from sinkscope.explorer.page import view

    def no_loading(*args, **kwargs):
        raise AssertionError("the model was loaded before the arguments were checked")

    with monkeypatch.context() as patch:
        patch.setattr(load, "load_model", no_loading)
        with pytest.raises(SinkscopeError, match=r"--bos-id -5 is not a token id"):
            view("any-model", "some text", bos_id=-5)
        with pytest.raises(SinkscopeError, match=r"is a directory; name a file"):
            view("any-model", "some text", out=tmp_path)
    from .test_capture_families import build

    lm = build("llama")
    vocab = lm.model.get_input_embeddings().num_embeddings
    with pytest.raises(SinkscopeError, match=rf"--bos-id {vocab} is not a token of the model \(its ids are 0 to"):
        view(lm, "some text", bos_id=vocab)
