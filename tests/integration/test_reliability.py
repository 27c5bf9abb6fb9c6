"""Issue 13: no lost or silently wrong results, and bad input fails in one line before the model loads.

Runs the CLI in-process on a tiny random Llama. `load_model` is replaced by a tripwire wherever the point is that
the error comes before the model would load.
"""

import json
import os
import random
import subprocess
import sys

import pandas as pd
import pytest

import sinkscope.models.load
from sinkscope.cli.main import main
from sinkscope.staging import claimed_output

from .tiny_checkpoint import save_tiny_llama, write_corpus
from .waiting import HANG_GUARD, wait_for


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("tiny")
    return save_tiny_llama(root / "model"), write_corpus(root / "corpus.txt", documents=60)


def common(tiny, *extra: str) -> list[str]:
    model, corpus = tiny
    return ["analyze", "--model", str(model), "--corpus", str(corpus), "--seq-len", "12", "--max-windows", "6",
            "--batch-size", "2", "--geometry-cap", "0", "--quiet", *extra]  # fmt: skip


def one_error(capsys, argv: list[str], code: int = 2) -> str:
    """Run the CLI; assert it exits with `code` and printed exactly one error line and no traceback."""
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line or ": interrupted" in line]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.fixture
def no_model(monkeypatch):
    """Loading a model fails the test: the error must come before it."""

    def tripwire(*args, **kwargs):
        raise AssertionError("the model was loaded before the bad input was refused")

    monkeypatch.setattr(sinkscope.models.load, "load_model", tripwire)


@pytest.fixture
def no_report(monkeypatch):
    """Skip drawing report.html (tested in tests/browser) so each run takes about a second."""
    import sinkscope.report.html

    monkeypatch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())


def dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def tables(directory):
    return [pd.read_parquet(directory / f"{name}.parquet") for name in ("heads", "layers", "positions")]


# --- results never silently lost or wrong -------------------------------------------------------------------


def test_second_concurrent_writer_is_refused(tiny, tmp_path, capsys, no_model):
    out = tmp_path / "same"
    with claimed_output(out):  # a first `sinkscope analyze --out same` still running
        line = one_error(capsys, common(tiny, "--out", str(out)))
    assert "is being written by another sinkscope process" in line and str(os.getpid()) in line
    assert out.is_dir() and not (tmp_path / ".same.lock").exists()  # the refused writer touched nothing


def test_overwrite_never_deletes_a_directory_that_is_not_a_run(tiny, tmp_path, capsys, no_model):
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("precious")
    line = one_error(capsys, common(tiny, "--out", str(out), "--overwrite"))
    assert "not a sinkscope result" in line
    assert (out / "chapter1.tex").read_text() == "precious"


def test_overwrite_replaces_a_run(tiny, tmp_path, capsys, no_report):
    out = tmp_path / "run"
    assert main(common(tiny, "--out", str(out))) == 0
    assert "already exists" in one_error(capsys, common(tiny, "--out", str(out)))
    assert main(common(tiny, "--out", str(out), "--overwrite", "--max-windows", "4")) == 0
    assert json.loads((out / "run.json").read_text())["corpus"]["windows"] == 4


def interrupt_after_checkpoints(monkeypatch, n: int) -> None:
    """Ctrl-C right after the n-th checkpoint is saved."""
    import sinkscope.pipelines.analysis

    real, calls = sinkscope.pipelines.analysis.save_checkpoint, []

    def save_then_interrupt(*args, **kwargs):
        real(*args, **kwargs)
        calls.append(1)
        if len(calls) == n:
            raise KeyboardInterrupt

    monkeypatch.setattr(sinkscope.pipelines.analysis, "save_checkpoint", save_then_interrupt)


def test_ctrl_c_names_the_checkpoint_and_resume_with_other_arguments_is_refused(
    tiny, tmp_path, capsys, monkeypatch, no_report
):
    out = tmp_path / "long"
    args = common(tiny, "--out", str(out), "--checkpoint-every", "2")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoints(patch, 1)
        line = one_error(capsys, args, code=130)
    checkpoint = tmp_path / ".long.checkpoint"
    assert f"checkpointed in {checkpoint}/" in line and "--resume" in line and "sinkscope analyze" in line
    assert not out.exists() and (checkpoint / "rank0.safetensors").is_file()
    # the resume command must carry the same arguments: a different --max-windows is refused, not mixed
    line = one_error(capsys, [*args[:-4], "--max-windows", "8", *args[-4:], "--resume"])
    assert "corpus.max_windows: 6 in the checkpoint, 8 now" in line
    assert main([*args, "--resume"]) == 0
    assert main(common(tiny, "--out", str(tmp_path / "fresh"))) == 0
    for resumed, fresh in zip(tables(out), tables(tmp_path / "fresh")):
        pd.testing.assert_frame_equal(resumed, fresh, rtol=1e-6, atol=1e-9)


def test_ctrl_c_before_any_checkpoint_says_nothing_was_saved(tiny, tmp_path, capsys, monkeypatch):
    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(sinkscope.models.load, "load_model", interrupt)
    line = one_error(capsys, common(tiny, "--out", str(tmp_path / "x")), code=130)
    assert "nothing was saved" in line and not (tmp_path / "x").exists()


def test_random_bytes_are_refused_with_the_share_and_place(tiny, tmp_path, capsys, no_model):
    corpus = tmp_path / "noise.txt"
    # Seeded noise that starts with an invalid byte: os.urandom once drew a newline first (line 3, CI red).
    noise = b"\xff" + random.Random(7).randbytes(3999)
    corpus.write_bytes(b"plain words first\n" + noise)
    model, _ = tiny
    line = one_error(capsys, common((model, corpus), "--out", str(tmp_path / "o")))
    assert "is not UTF-8 text" in line and "% of 4018 bytes do not decode" in line
    assert "(first at byte 18, line 2)" in line


def test_binary_jsonl_and_nul_bytes_are_refused(tiny, tmp_path, capsys, no_model):
    model, _ = tiny
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"text\x00with a NUL " * 10)
    assert "control characters or NUL" in one_error(capsys, common((model, nul), "--out", str(tmp_path / "o")))


def test_a_few_invalid_bytes_are_replaced_and_reported(tiny, tmp_path, capsys, no_report):
    model, corpus = tiny
    dirty = tmp_path / "dirty.txt"
    text = corpus.read_bytes()
    dirty.write_bytes(text[:500] + b"\xff\xfe" + text[500:])
    assert main(common((model, dirty), "--out", str(tmp_path / "o"))) == 0
    line = text[:500].count(b"\n") + 1
    assert f"2 bytes are not UTF-8 and were replaced by U+FFFD (first at byte 500, line {line})" in capsys.readouterr().err


def test_stale_temporaries_of_dead_processes_are_removed(tiny, tmp_path, capsys, no_report):
    from sinkscope.locking import host_tag

    pid, tag = dead_pid(), host_tag()
    partial = tmp_path / f".run.partial-{pid}@{tag}-x1y2"  # SIGKILL while saving: half-written, no marker
    partial.mkdir()
    (partial / "heads.parquet").write_text("half")
    tmp_html = tmp_path / f".run.tmp-{pid}@{tag}"
    tmp_html.write_text("<html")
    alive = tmp_path / f".run.partial-{os.getppid()}@{tag}-zz"  # a live writer's: left alone
    alive.mkdir()
    legacy = tmp_path / f".run.partial-{pid}-x1y2"  # an older sinkscope's name tells no host: left alone, named
    legacy.mkdir()
    assert main(common(tiny, "--out", str(tmp_path / "run"))) == 0
    err = capsys.readouterr().err
    assert not partial.exists() and not tmp_html.exists() and alive.exists() and legacy.exists()
    assert f"removed {partial}, a half-written result of a process that no longer runs" in err
    assert f"{legacy} is a temporary of an older sinkscope; it is left alone" in err


# --- fail before the work, in one line ------------------------------------------------------------------------


def test_bad_arguments_fail_before_the_model_loads(tiny, tmp_path, capsys, no_model):
    model, _ = tiny
    regular = tmp_path / "file"
    regular.write_text("x")
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "w1 w2"}\n{"text": "w3", oops}\n')
    first_bad = tmp_path / "d.jsonl"
    first_bad.write_text('{"text": "w1 w2"\n')
    no_text = tmp_path / "e.jsonl"
    no_text.write_text('["w1"]\n')
    cases = {
        "--max-windows 0": (common(tiny, "--out", str(tmp_path / "a"), "--max-windows", "0"),
                            "--max-windows 0 must be at least 1"),
        "--batch-size 0": (common(tiny, "--out", str(tmp_path / "a"), "--batch-size", "0"),
                           "--batch-size 0 must be at least 1"),
        "--checkpoint-every -1": (common(tiny, "--out", str(tmp_path / "a"), "--checkpoint-every", "-1"),
                                  "must be ≥ 0"),
        "--epsilon 2": (common(tiny, "--out", str(tmp_path / "a"), "--epsilon", "2"), "strictly between 0 and 1"),
        "malformed JSON, first line": (common((model, first_bad), "--out", str(tmp_path / "a")),
                                       f"{first_bad}:1: not valid JSON"),
        "JSONL without text": (common((model, no_text), "--out", str(tmp_path / "a")),
                               f"{no_text}:1: each JSONL line must be an object with a 'text' field"),
        "--out under a regular file": (common(tiny, "--out", str(regular / "run")), "cannot write --out"),
        "--out in /proc": (common(tiny, "--out", "/proc/sinkscope-run"), "cannot write --out"),
        "--out is a file": (common(tiny, "--out", str(regular)), "exists and is not a directory"),
    }  # fmt: skip
    for case, (argv, message) in cases.items():
        line = one_error(capsys, argv)
        assert message in line, f"{case}: {line}"
    assert not (tmp_path / "a").exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root, whom file permissions do not stop: no directory is read-only")
def test_read_only_out_fails_before_the_model_loads(tiny, tmp_path, capsys, no_model):
    locked = tmp_path / "ro"
    locked.mkdir(mode=0o555)
    assert "cannot write --out" in one_error(capsys, common(tiny, "--out", str(locked / "run")))


def test_malformed_jsonl_later_in_the_file_names_file_and_line(tiny, tmp_path, capsys, no_report):
    model, _ = tiny
    jsonl = tmp_path / "c.jsonl"
    jsonl.write_text('{"text": "w1 w2"}\n\n{"text": "w3", oops}\n')
    assert f"{jsonl}:3: not valid JSON (Expecting property name" in one_error(
        capsys, common((model, jsonl), "--out", str(tmp_path / "a"), "--seq-len", "2")
    )


@pytest.fixture(scope="module")
def finished_run(tiny, tmp_path_factory):
    out = tmp_path_factory.mktemp("done") / "run"
    with pytest.MonkeyPatch.context() as patch:
        import sinkscope.report.html

        patch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())
        assert main(common(tiny, "--out", str(out))) == 0
    return out


def test_report_on_damaged_runs_and_bad_out_says_one_line(finished_run, tmp_path, capsys):
    import shutil

    def damaged(name, damage):
        copy = tmp_path / name
        shutil.copytree(finished_run, copy)
        damage(copy)
        return str(copy)

    cases = {
        "missing parquet": (["report", damaged("m", lambda d: (d / "layers.parquet").unlink())],
                            "layers.parquet is missing"),
        "truncated parquet": (["report", damaged("t", lambda d: (d / "heads.parquet").write_bytes(
            (d / "heads.parquet").read_bytes()[:200]))], "heads.parquet is damaged or truncated"),
        "corrupt run.json": (["report", damaged("c", lambda d: (d / "run.json").write_text('{"model": {'))],
                             "run.json is corrupt"),
        "not a run": (["report", str(tmp_path)], "is not a sinkscope run directory"),
        "--out a directory": (["report", str(finished_run), "--out", str(tmp_path)], "is a directory"),
        "--out in a missing folder": (["report", str(finished_run), "--out", str(tmp_path / "no" / "r.html")],
                                      "does not exist"),
    }  # fmt: skip
    for case, (argv, message) in cases.items():
        line = one_error(capsys, argv)
        assert message in line, f"{case}: {line}"
    assert not [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name]


def test_bare_sinkscope_prints_the_help_with_the_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: sinkscope") and all(c in out for c in ("analyze", "report", "ablate", "cost"))


def test_ablate_and_cost_guard_their_out_before_the_work(tiny, tmp_path, capsys, no_model):
    model, corpus = tiny
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "notes.txt").write_text("precious")
    ablate = ["ablate", "--model", str(model), "--corpus", str(corpus), "--seq-len", "12", "--max-windows", "2"]
    assert "not a sinkscope result" in one_error(capsys, [*ablate, "--out", str(thesis), "--overwrite"])
    assert "--batch-size 0 must be at least 1" in one_error(
        capsys, [*ablate, "--out", str(tmp_path / "a"), "--batch-size", "0"]
    )
    regular = tmp_path / "file"
    regular.write_text("x")
    assert "cannot write --out" in one_error(capsys, ["cost", "--T", "4", "--d", "4", "--out", str(regular / "c")])
    assert "not a sinkscope result" in one_error(capsys, ["cost", "--T", "4", "--out", str(thesis), "--overwrite"])
    assert (thesis / "notes.txt").read_text() == "precious"


def test_two_analyze_processes_with_one_out_keep_the_first_result(tiny, tmp_path, capsys):
    """The race of the issue, with real processes: the first writer is held after claiming --out (before its model
    loads) until the second has been refused; then the first finishes and its run is the one on disk."""
    go = tmp_path / "go"
    held = (
        "import pathlib, sys, time; import sinkscope.models.load as load; real = load.load_model\n"
        "def wait_then_load(*args, **kwargs):\n"
        f"    while not pathlib.Path({str(go)!r}).exists(): time.sleep(0.05)\n"
        "    return real(*args, **kwargs)\n"
        "load.load_model = wait_then_load\n"
        "import sinkscope.report.html as page; page.write_report = lambda runs, path, figures_dir=None: path.touch()\n"
        "from sinkscope.cli.main import main; sys.exit(main(sys.argv[1:]))"
    )
    out = tmp_path / "same"
    first = subprocess.Popen([sys.executable, "-c", held, *common(tiny, "--out", str(out), "--max-windows", "5")],
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for(tmp_path / ".same.lock", first)  # the first writer took its lock
    second = one_error(capsys, common(tiny, "--out", str(out)))  # this test's process is the second writer
    go.touch()
    assert first.wait(timeout=HANG_GUARD) == 0, first.stderr.read()
    assert "is being written by another sinkscope process" in second
    assert json.loads((out / "run.json").read_text())["corpus"]["windows"] == 5
