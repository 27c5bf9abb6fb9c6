"""Issue 32: nothing of the user's is ever deleted, no result silently mixes two inputs, no name breaks a figure.

Each test is one item of the issue; where the item is about processes and signals it uses real ones (SIGKILL
between the two renames of a replacement, a writer in another PID namespace via `unshare --pid`).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from sinkscope.cli.main import main
from sinkscope.locking import host_tag
from sinkscope.staging import claimed_output, claimed_workspace

from . import test_reliability_two as two
from .test_reliability_two import analyze_args, one_error, snapshot
from .waiting import HANG_GUARD, wait_for

tiny, no_model, no_report = two.tiny, two.no_model, two.no_report  # the fixtures of round two


def project(root: Path) -> Path:
    """A user's folder that merely holds a file named run.json (and summary.json, ablation.json)."""
    root.mkdir()
    for name in ("run.json", "summary.json", "ablation.json"):
        (root / name).write_text("{}")
    (root / "thesis.tex").write_text("precious")
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('mine')")
    (root / "report.html").write_text("<html>my own page</html>")
    return root


# --- 1. only what sinkscope can prove it wrote is replaced ------------------------------------------------------


def test_overwrite_never_deletes_a_folder_holding_a_file_named_like_a_result(tiny, tmp_path, capsys, no_model):
    model, corpus = tiny
    mine = project(tmp_path / "mine")
    before = snapshot(mine)
    commands = {
        "analyze": analyze_args(tiny, "--out", str(mine), "--overwrite"),
        "cost": ["cost", "--T", "4", "--out", str(mine), "--overwrite"],
        "train-bb": ["train-bb", "--out", str(mine), "--overwrite"],
        "ablate": ["ablate", "--model", str(model), "--corpus", str(corpus), "--seq-len", "12", "--max-windows", "2",
                   "--out", str(mine), "--overwrite"],  # fmt: skip
    }
    for name, argv in commands.items():
        line = one_error(capsys, argv)
        assert "so --overwrite will not delete it" in line, f"{name}: {line}"
    line = one_error(capsys, ["report", str(mine), "--out", str(mine / "report.html")])
    assert "report.html exists and is not a page sinkscope wrote" in line or "not a sinkscope run" in line, line
    assert snapshot(mine) == before


def test_overwrite_refuses_a_run_the_user_added_files_to(tiny, tmp_path, capsys, no_report):
    out = tmp_path / "run"
    assert main(analyze_args(tiny, "--out", str(out))) == 0
    (out / "figures").mkdir(exist_ok=True)
    (out / "figures" / "my_plot.pdf").write_text("mine")
    line = one_error(capsys, analyze_args(tiny, "--out", str(out), "--overwrite"))
    assert "holds files sinkscope did not write (" in line and "figures/my_plot.pdf" in line
    shutil.rmtree(out / "figures")  # (no_report: the run itself has no figures)
    assert main(["export", str(out), "--format", "csv"]) == 0  # an export inside the run goes with it
    assert main(analyze_args(tiny, "--out", str(out), "--overwrite", "--max-windows", "4")) == 0
    assert json.loads((out / "run.json").read_text())["corpus"]["windows"] == 4


# --- 2. reproduce follows the same rules --------------------------------------------------------------------------


def test_reproduce_never_writes_into_other_files_nor_runs_twice_on_one_out(tmp_path, capsys):
    mine = project(tmp_path / "mine")
    (mine / "figures").mkdir()
    (mine / "figures" / "fig1.png").write_bytes(b"my figure")
    before = snapshot(mine)
    line = one_error(capsys, ["reproduce", "--quick", "--out", str(mine)])
    assert "holds files that are not the output of an earlier sinkscope reproduce" in line
    assert snapshot(mine) == before
    out = tmp_path / "repro"
    with claimed_workspace(out, "reproduce"):  # a first reproduce still running on `out`
        assert "is being written by another sinkscope process" in one_error(capsys, ["reproduce", "--out", str(out)])
    # inside a reproduce output, a section folder the user filled is not replaced; the new section is kept beside it
    from sinkscope.errors import SinkscopeError
    from sinkscope.reproduction.files import swapped_directory

    with claimed_workspace(out, "reproduce"):
        (out / "figures").mkdir()
        (out / "figures" / "mine.png").write_bytes(b"mine")
        with pytest.raises(SinkscopeError, match="the finished result is kept in"):
            with swapped_directory(out / "figures") as staging:
                (staging / "new.png").write_bytes(b"new")
    assert (out / "figures" / "mine.png").read_bytes() == b"mine"
    assert [p.name for p in out.glob("figures.unsaved-*/new.png")] == ["new.png"]


# --- 3. a replacement killed between its two renames is finished, never deleted ----------------------------------

KILL_BETWEEN_RENAMES = """
import json, os, pathlib, signal, sys
real = pathlib.Path.rename
def rename(self, target):
    result = real(self, target)
    if "-old-" in pathlib.Path(target).parent.name:  # the old result has moved aside; the new one has not moved in
        os.kill(os.getpid(), signal.SIGKILL)
    return result
pathlib.Path.rename = rename
from sinkscope.staging import claimed_output, staged_directory
out = pathlib.Path(sys.argv[1])
with claimed_output(out, overwrite=True):  # what `analyze --overwrite` does around its save (Run.save)
    with staged_directory(out, kind="run") as staging:
        (staging / "run.json").write_text(json.dumps({"corpus": {"windows": 4}}))
"""


def fake_run(out: Path, windows: int) -> None:
    """A run directory as `Run.save` stages it (the analysis itself is not the point here)."""
    from sinkscope.staging import staged_directory

    with staged_directory(out, kind="run") as staging:
        (staging / "run.json").write_text(json.dumps({"corpus": {"windows": windows}}))


def killed_between_renames(out: Path) -> None:
    fake_run(out, 6)
    child = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, str(out)], capture_output=True, text=True,
                           timeout=HANG_GUARD)  # fmt: skip
    assert child.returncode == -9, child.stderr


def windows(out: Path) -> int:
    return json.loads((out / "run.json").read_text())["corpus"]["windows"]


def test_sigkill_between_the_two_renames_is_recovered_not_deleted(tiny, tmp_path, capsys):
    out = tmp_path / "run"
    killed_between_renames(out)
    old = [p for p in tmp_path.glob(".run.partial-*-old-*")]
    new = [p for p in tmp_path.glob(".run.partial-*") if "-old-" not in p.name]
    assert not out.exists() and len(old) == 1 and len(new) == 1 and windows(old[0] / "run") == 6
    # the next command on that --out fails on a typo in --model: it still finishes the replacement first
    typo = [*analyze_args(tiny, "--out", str(out), "--overwrite"), "--model", "no/such/model"]
    assert "unknown model" in one_error(capsys, typo)
    assert windows(out) == 4  # the whole new result, in place
    assert not list(tmp_path.glob(".run.partial-*"))


def test_a_replacement_without_a_whole_new_result_puts_the_old_one_back(tiny, tmp_path, capsys, no_model):
    out = tmp_path / "run"
    killed_between_renames(out)
    (new,) = [p for p in tmp_path.glob(".run.partial-*") if "-old-" not in p.name]
    (new / ".sinkscope-result.json").unlink()  # as if the new one were not whole
    assert "already exists" in one_error(capsys, analyze_args(tiny, "--out", str(out)))
    assert windows(out) == 6  # the old result is back
    assert not list(tmp_path.glob(".run.partial-*"))


# --- 4. clean-up only under the lock; a lock and a temporary name their host ---------------------------------------

WRITER = """
import pathlib, sys, time
from sinkscope.staging import claimed_output, staged_directory
out, ready, go = map(pathlib.Path, sys.argv[1:4])
with claimed_output(out):
    with staged_directory(out) as staging:
        (staging / "run.json").write_text("{}")
        ready.write_text(staging.name)
        while not go.exists():
            time.sleep(0.05)
print("saved")
"""
# PID 1 of the new namespace: spawn until the next PID is one the host does not run (its /proc is the host's), then
# start the writer with it, so "its PID is not running here" is true of a live writer.
IN_ANOTHER_NAMESPACE = """
import os, subprocess, sys
while True:
    child = subprocess.Popen(["true"])
    child.wait()
    if not os.path.exists(f"/proc/{child.pid + 1}"):
        break
sys.exit(subprocess.run([sys.executable, "-c", sys.argv[1], *sys.argv[2:]]).returncode)
"""


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0, reason="needs unshare --pid (root)")
def test_a_writer_in_another_pid_namespace_is_neither_cleaned_up_nor_raced(tiny, tmp_path, capsys, no_report):
    out, ready, go = tmp_path / "run", tmp_path / "ready", tmp_path / "go"
    writer = subprocess.Popen(["unshare", "--pid", "--fork", sys.executable, "-c", IN_ANOTHER_NAMESPACE, WRITER,
                               str(out), str(ready), str(go)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    wait_for(ready, writer)
    staging = tmp_path / ready.read_text()
    pid = int(staging.name.split(".partial-")[1].split("@")[0])
    assert not Path(f"/proc/{pid}").exists(), "its PID happens to run here too; the test proves nothing"
    line = one_error(capsys, analyze_args(tiny, "--out", str(out)))
    assert "is being written by another sinkscope process" in line
    # a command on a sibling --out with the same name prefix never touches it either
    assert main(analyze_args(tiny, "--out", str(tmp_path / "run2"))) == 0
    assert staging.is_dir()
    go.touch()
    stdout, stderr = writer.communicate(timeout=HANG_GUARD)
    assert writer.returncode == 0 and "saved" in stdout, stderr
    assert (out / "run.json").read_text() == "{}"


def test_temporaries_of_another_host_are_left_and_a_fixed_pid_is_no_proof(tiny, tmp_path, capsys, no_report):
    foreign = tmp_path / ".run.partial-999999@0badf00d-x1"  # another host's (shared file system)
    foreign.mkdir()
    own_pid = tmp_path / f".run.partial-{os.getpid()}@{host_tag()}-x2"  # a killed container that also ran as this PID
    own_pid.mkdir()
    assert main(analyze_args(tiny, "--out", str(tmp_path / "run"))) == 0
    err = capsys.readouterr().err
    assert foreign.is_dir() and "a process on another host or PID namespace; it is left alone" in err
    assert not own_pid.exists()


def test_clean_up_waits_for_the_lock(tiny, tmp_path, capsys, no_report):
    """A dead writer's temporaries are not touched by a command that cannot take the lock (another process is
    saving); once the lock is free, the next command removes the one of this host (the older name stays, named)."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    ours, older = tmp_path / f".run.partial-{dead.pid}@{host_tag()}-x3", tmp_path / f".run.partial-{dead.pid}-x4"
    out = tmp_path / "run"
    with claimed_output(out):
        ours.mkdir()
        older.mkdir()
        assert "is being written by another" in one_error(capsys, analyze_args(tiny, "--out", str(out)))
        assert ours.is_dir() and older.is_dir()
    assert main(analyze_args(tiny, "--out", str(out), "--overwrite")) == 0
    assert not ours.exists() and older.is_dir()


def test_a_lock_names_its_host_and_one_of_another_host_is_not_taken_over(tiny, tmp_path, capsys, no_report):
    out = tmp_path / "run"
    with claimed_output(out):
        holder = json.loads((tmp_path / ".run.lock").read_text())
    assert holder["pid"] == os.getpid() and holder["tag"] == host_tag() and holder["host"]
    (tmp_path / ".run.lock").write_text(json.dumps({"pid": 7, "host": "node-b", "tag": "0badf00d"}))
    line = one_error(capsys, analyze_args(tiny, "--out", str(out), "--overwrite"))
    assert "(pid 7 on host node-b)" in line and ".run.lock" in line


# --- 5. an --out inside a claimed --out ------------------------------------------------------------------------


def test_a_result_whose_place_was_taken_meanwhile_is_kept_beside_it(tiny, tmp_path, capsys, no_report):
    from sinkscope.pipelines.run import Run

    assert main(analyze_args(tiny, "--out", str(tmp_path / "done"))) == 0
    run = Run.load(tmp_path / "done")
    # a file dropped into the claimed folder while it runs: the finished result is kept, never dropped
    second = tmp_path / "runs" / "m"
    with claimed_output(second):
        (second / "notes.txt").write_text("mine")
        with pytest.raises(Exception, match="the finished result is kept in"):
            run.save(second, overwrite=True)  # what `sinkscope analyze` does once the analysis is done
    (kept,) = second.parent.glob("m.unsaved-*")
    assert (kept / "run.json").is_file() and (second / "notes.txt").read_text() == "mine"


def test_two_processes_one_claims_the_other_nests_inside(tiny, tmp_path, capsys, no_model):
    """The race of item 5 with a real first process: it holds `runs/n` (as `analyze` does from its start to its
    save); a second `analyze --out runs/n/sub` is refused before its model loads; the first then saves its result."""
    out, ready, go = tmp_path / "runs" / "n", tmp_path / "ready", tmp_path / "go"
    holder = """
import json, pathlib, sys, time
from sinkscope.staging import claimed_output, staged_directory
out, ready, go = map(pathlib.Path, sys.argv[1:4])
with claimed_output(out):
    ready.touch()
    while not go.exists():
        time.sleep(0.05)
    with staged_directory(out, kind="run") as staging:
        (staging / "run.json").write_text(json.dumps({"corpus": {"windows": 5}}))
"""
    first = subprocess.Popen([sys.executable, "-c", holder, str(out), str(ready), str(go)], stderr=subprocess.PIPE,
                             text=True)  # fmt: skip
    wait_for(ready, first)
    line = one_error(capsys, analyze_args(tiny, "--out", str(out / "sub")))
    go.touch()
    assert first.wait(timeout=HANG_GUARD) == 0, first.stderr.read()
    assert f"lies inside {out}, which another sinkscope process (pid {first.pid})" in line
    assert windows(out) == 5 and not (out / "sub").exists()


# --- 6-8. a result is reused only when its inputs are the same content ------------------------------------------


def change_weights_in_place(model: Path) -> None:
    """Rewrite the model's weights with other values (same file, same size, same names)."""
    from safetensors.torch import load_file, save_file

    path = model / "model.safetensors"
    state = load_file(str(path))
    save_file({name: tensor * 1.5 for name, tensor in state.items()}, str(path), metadata={"format": "pt"})


@pytest.fixture
def own_tiny(tmp_path):
    from .tiny_checkpoint import save_tiny_llama, write_corpus

    return save_tiny_llama(tmp_path / "model"), write_corpus(tmp_path / "corpus.txt", documents=60)


def test_resume_after_the_weights_changed_in_place_is_refused(own_tiny, tmp_path, capsys, monkeypatch, no_report):
    import hashlib

    from .test_reliability import interrupt_after_checkpoints

    out = tmp_path / "long"
    args = analyze_args(own_tiny, "--out", str(out), "--checkpoint-every", "2")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoints(patch, 1)
        one_error(capsys, args, code=130)
    change_weights_in_place(own_tiny[0])
    line = one_error(capsys, [*args, "--resume"])
    assert "belongs to a different analysis (model.weights.files.model.safetensors:" in line, line
    assert not out.exists()
    # a path given as ./corpus.txt where the checkpoint recorded corpus.txt is the same file (item 16)
    args = [a if a != str(own_tiny[1]) else "corpus.txt" for a in args]
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".long.checkpoint").rename(tmp_path / ".old.checkpoint")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoints(patch, 1)
        one_error(capsys, args, code=130)
    assert main([*[a if a != "corpus.txt" else "./corpus.txt" for a in args], "--resume"]) == 0
    weights = json.loads((out / "run.json").read_text())["model"]["weights"]["files"]["model.safetensors"]
    assert weights == hashlib.sha256((own_tiny[0] / "model.safetensors").read_bytes()).hexdigest()  # in run.json


def test_a_sweep_rerun_recomputes_cells_whose_corpus_or_model_changed(own_tiny, tmp_path, capsys):
    import hashlib

    model, corpus = own_tiny
    out = tmp_path / "sw"
    args = ["sweep", "--models", str(model), "--corpora", str(corpus), "--epsilons", "0.3", "--max-windows", "2",
            "--batch-size", "2", "--quiet", "--out", str(out)]  # fmt: skip
    assert main([*args, "--seq-lens", "8"]) == 0
    text = corpus.read_text().split("\n\n")
    corpus.write_text("\n\n".join(reversed(text)))  # other text, same file
    capsys.readouterr()
    assert main([*args, "--seq-lens", "8,10"]) == 0  # a new T in the same rerun
    err = capsys.readouterr().err
    assert "T=8: its inputs changed since it was computed (corpus.sha256 changed): recomputing" in err
    content = hashlib.sha256(corpus.read_bytes()).hexdigest()
    digest = hashlib.sha256(f"{corpus.name}\0{content}\0".encode()).hexdigest()  # name and content of each file
    for cell in (out / "cells").iterdir():  # every cell of the table was computed on the text now in the file
        assert json.loads((cell / "run.json").read_text())["sweep_cell"]["content"]["corpus"]["sha256"] == digest
    change_weights_in_place(model)
    assert main([*args, "--seq-lens", "8,10"]) == 0
    assert capsys.readouterr().err.count("recomputing") == 2
    assert main([*args, "--seq-lens", "8,10"]) == 0  # nothing changed: both reused
    assert capsys.readouterr().err.count("finished before, skipped") == 2


def test_a_sweep_rerun_with_the_epsilons_reordered_reuses_its_cells(own_tiny, tmp_path, capsys):
    """Item 16: `--epsilons` in another order is the same sweep: every cell is reused and each row keeps its ε's own
    rate (the table equals the first run's, row for row by ε); another set of ε is still refused."""
    import pandas as pd

    model, corpus = own_tiny
    out = tmp_path / "sw"
    args = ["sweep", "--models", str(model), "--corpora", str(corpus), "--seq-lens", "8", "--max-windows", "4",
            "--batch-size", "2", "--quiet", "--out", str(out)]  # fmt: skip
    assert main([*args, "--epsilons", "0.34,0.3,0.36"]) == 0
    first = pd.read_parquet(out / "sweep.parquet").sort_values("epsilon").reset_index(drop=True)
    assert first["sink_rate"].nunique() == 3  # three ε, three rates: a swap would show
    capsys.readouterr()
    assert main([*args, "--epsilons", "0.36,0.34,0.3"]) == 0
    assert "finished before, skipped" in capsys.readouterr().err
    again = pd.read_parquet(out / "sweep.parquet")
    assert again["epsilon"].tolist() == [0.36, 0.34, 0.3]  # listed in the order asked for
    pd.testing.assert_frame_equal(again.sort_values("epsilon").reset_index(drop=True), first)
    for epsilons in ("0.34,0.3", "0.34,0.3,0.36,0.5"):
        assert "was computed with other settings (epsilons)" in one_error(capsys, [*args, "--epsilons", epsilons])


def test_a_train_bb_grid_reuses_a_run_only_when_trained_with_the_same_configuration(tmp_path, capsys, no_bb_page):
    tiny_bb = two.TINY_BB
    out, grid = tmp_path / "g", tmp_path / "grid.json"
    grid.write_text(json.dumps({"a": {}}))
    assert main(["train-bb", "--out", str(out), "--grid", str(grid), *tiny_bb]) == 0
    capsys.readouterr()
    assert main(["train-bb", "--out", str(out), "--grid", str(grid), *tiny_bb, "--set", "train.lr=0.01"]) == 0
    assert "was trained with another configuration (its config.json): training it again" in capsys.readouterr().err
    assert json.loads((out / "a" / "config.json").read_text())["train"]["lr"] == 0.01
    assert main(["train-bb", "--out", str(out), "--grid", str(grid), *tiny_bb, "--set", "train.lr=0.01"]) == 0
    assert "training it again" not in capsys.readouterr().err


no_bb_page = two.no_bb_page


# --- 11. --out . and --out "" ----------------------------------------------------------------------------------


def test_out_dot_and_empty_out_are_one_line_or_work(tiny, tmp_path, capsys, monkeypatch, no_report):
    model, corpus = tiny
    commands = {"analyze": analyze_args(tiny), "cost": ["cost", "--T", "4"], "train-bb": ["train-bb", "--steps", "2"],
                "sweep": ["sweep", "--models", str(model), "--corpora", str(corpus), "--seq-lens", "8"]}  # fmt: skip
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    monkeypatch.chdir(mine)
    for name, argv in commands.items():
        assert f"--out {mine} already exists" in one_error(capsys, [*argv, "--out", "."]) or name == "sweep"
        with pytest.raises(SystemExit) as exit_:
            main([*argv, "--out", ""])
        assert exit_.value.code == 2 and "argument --out: --out is empty" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main([*commands["analyze"], "--out", "."]) == 0
    assert json.loads((tmp_path / "empty" / "run.json").read_text())["corpus"]["windows"] == 6


# --- 12. report on damaged or older runs: one line, nonzero exit ------------------------------------------------


@pytest.fixture(scope="module")
def drawn_run(tiny, tmp_path_factory):
    import sinkscope.report.html

    out = tmp_path_factory.mktemp("drawn") / "run"
    with pytest.MonkeyPatch.context() as patch:  # the page is not the point: where and whether it is written is
        patch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())
        assert main(analyze_args(tiny, "--out", str(out))) == 0
    return out


def _edit_table(name: str, change):
    import pandas as pd

    def damage(directory: Path) -> None:
        path = directory / f"{name}.parquet"
        change(pd.read_parquet(path)).to_parquet(path, index=False)

    return damage


def _edit_summary(change):
    def damage(directory: Path) -> None:
        meta = json.loads((directory / "run.json").read_text())
        change(meta["summary"])
        (directory / "run.json").write_text(json.dumps(meta))

    return damage


DAMAGE = {
    "summary lacks mean_sink_score": _edit_summary(lambda s: s.pop("mean_sink_score")),
    "summary lacks mean_diag_score": _edit_summary(lambda s: s.pop("mean_diag_score")),
    "summary lacks sink_rate": _edit_summary(lambda s: s.pop("sink_rate")),
    "summary lacks epsilon": _edit_summary(lambda s: s.pop("epsilon")),
    "heads lack sink_score": _edit_table("heads", lambda t: t.drop(columns="sink_score")),
    "heads lack head": _edit_table("heads", lambda t: t.drop(columns="head")),
    "heads lack head_class": _edit_table("heads", lambda t: t.drop(columns="head_class")),
    "layers lack sink_rate": _edit_table("layers", lambda t: t.drop(columns="sink_rate")),
    "positions lack position": _edit_table("positions", lambda t: t.drop(columns="position")),
    "sink_score as text": _edit_table("heads", lambda t: t.assign(sink_score=t["sink_score"].astype(str))),
    "layer as text": _edit_table("layers", lambda t: t.assign(layer=t["layer"].astype(str))),
    "duplicated head rows": _edit_table("heads", lambda t: t.iloc[[0, *range(len(t))]]),
    "duplicated layer rows": _edit_table("layers", lambda t: t.iloc[[0, *range(len(t))]]),
    "empty heads": _edit_table("heads", lambda t: t.iloc[:0]),
    "empty layers": _edit_table("layers", lambda t: t.iloc[:0]),
    "positions lack layer": _edit_table("positions", lambda t: t.drop(columns="layer")),
    "layers lack layer": _edit_table("layers", lambda t: t.drop(columns="layer")),
    "position as text": _edit_table("positions", lambda t: t.assign(position=t["position"].astype(str))),
}


def test_report_on_every_kind_of_damage_is_one_line_and_exit_2(drawn_run, tmp_path, capsys, no_report):
    for number, (case, damage) in enumerate(DAMAGE.items()):
        copy = tmp_path / f"d{number}"
        shutil.copytree(drawn_run, copy)
        damage(copy)
        before = (copy / "report.html").read_bytes()
        line = one_error(capsys, ["report", str(copy)])
        assert "damaged or was written by" in line and "rerun `sinkscope analyze`" in line, f"{case}: {line}"
        assert (copy / "report.html").read_bytes() == before, case


def test_a_comparison_without_out_keeps_the_first_runs_own_page(drawn_run, tmp_path, capsys, no_report):
    """Item 16: `report A B` without --out writes A/comparison.html; A's report.html stays A's own."""
    a = tmp_path / "a"
    shutil.copytree(drawn_run, a)
    (a / "report.html").write_text("A's own page")
    assert main(["report", str(a), str(drawn_run)]) == 0
    assert (a / "report.html").read_text() == "A's own page" and (a / "comparison.html").is_file()


# --- 13, 14, 16. one line, before the model loads ------------------------------------------------------------


def test_bad_text_and_bos_id_of_view_and_the_attention_api_are_one_line(tiny, tmp_path, capsys, no_model):
    import sinkscope
    from sinkscope.errors import SinkscopeError

    model, _ = tiny
    undecodable = b"caf\xe9 au lait".decode("utf-8", "surrogateescape")  # what Python makes of such an argv
    line = one_error(capsys, ["view", "--model", str(model), "--text", undecodable, "--out", str(tmp_path / "v.html")])
    assert "--text is not valid UTF-8" in line
    for kwargs, message in (({"text": 42}, "text must be a string, not int"),
                            ({"text": undecodable}, "text is not valid UTF-8"),
                            ({"text": "a b", "bos_id": -1}, "is not a token id")):  # fmt: skip
        with pytest.raises(SinkscopeError, match=message):
            sinkscope.attention(str(model), **kwargs)


def test_bos_id_beyond_the_vocabulary_of_the_attention_api_is_one_line(tiny):
    import sinkscope
    from sinkscope.errors import SinkscopeError

    with pytest.raises(SinkscopeError, match="is not a token of the model"):
        sinkscope.attention(str(tiny[0]), "a b", bos_id=10**6)


def test_impossible_configs_are_one_line(tiny, tmp_path, capsys):
    model, corpus = tiny
    for key, value, message in (("max_position_embeddings", -1, "max_position_embeddings -1; it must be a positive"),
                                ("num_experts_per_tok", 9, "num_experts_per_tok 9 experts of only 4")):  # fmt: skip
        bad = tmp_path / key
        shutil.copytree(model, bad)
        config = json.loads((bad / "config.json").read_text())
        config.update({key: value, **({"num_local_experts": 4} if key == "num_experts_per_tok" else {})})
        (bad / "config.json").write_text(json.dumps(config))
        assert message in one_error(capsys, analyze_args((bad, corpus), "--out", str(tmp_path / f"o-{key}")))


def test_json_export_keeps_full_precision_and_says_inf(drawn_run, tmp_path):
    import math

    import pandas as pd

    run = tmp_path / "run"
    shutil.copytree(drawn_run, run)
    heads = pd.read_parquet(run / "heads.parquet")
    heads.loc[0, "sink_score"], heads.loc[1, "sink_score"], heads.loc[2, "sink_score"] = 3e-15, math.inf, -math.inf
    heads.loc[3, "sink_score"] = 0.1 + 0.2  # needs 17 significant digits
    heads.to_parquet(run / "heads.parquet", index=False)
    assert main(["export", str(run), "--format", "json", "--out", str(tmp_path / "json")]) == 0
    rows = json.loads((tmp_path / "json" / "heads.json").read_text())
    assert [row["sink_score"] for row in rows[:4]] == [3e-15, "inf", "-inf", 0.1 + 0.2]
    assert rows[4]["sink_score"] == heads.loc[4, "sink_score"] and rows[4]["head_class"] == heads.loc[4, "head_class"]


def test_a_cache_that_is_a_file_is_one_line_before_dequantizing(tiny, tmp_path, capsys, monkeypatch):
    cache, gguf = tmp_path / "cache", tmp_path / "m.gguf"
    cache.write_text("not a folder")
    gguf.write_bytes(b"GGUF stand-in")
    monkeypatch.setenv("SINKSCOPE_CACHE", str(cache))

    def tripwire(*args, **kwargs):
        raise AssertionError("dequantized before the cache was checked")

    import transformers

    monkeypatch.setattr(transformers.AutoModelForCausalLM, "from_pretrained", tripwire)
    line = one_error(capsys, analyze_args((gguf, tiny[1]), "--out", str(tmp_path / "o")))
    assert f"the model cache {cache} (SINKSCOPE_CACHE) is a file, not a folder" in line
