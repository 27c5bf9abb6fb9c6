"""`reproduce`'s stored sections are reused only for the same inputs' content, and a damaged or half-recorded one is
computed again with one line saying so (docs/reliability.md, "What a stored result's identity holds").

Two real sections of the plan (the weight spectra, which read the model only, and the analysis of a corpus file) are
computed on a tiny random Llama saved with safetensors, then each input field is changed alone and the plan walked
again: exactly the sections that read the changed input are computed again.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sinkscope.ownership import MARKER, foreign_entries, read_marker
from sinkscope.reproduction import files
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import KEY_FILE
from sinkscope.reproduction.plan import model_opener, model_plan, walk

from .test_identity import edit_json, keep_times, resave_weights, swap_ids
from .test_reliability_three import change_weights_in_place
from .tiny_checkpoint import save_tiny_llama, write_corpus

WEIGHTS, ANALYSIS = "weight spectra", "analyze"


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory) -> Path:
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture
def project(tmp_path, saved_model) -> tuple[Path, Path]:
    """A model folder and a corpus file of the test's own (edited by it)."""
    model = shutil.copytree(saved_model, tmp_path / "project" / "model")
    return model, write_corpus(tmp_path / "project" / "c.txt", documents=40, words=30)


def config(model: str, corpus: str, **changes) -> ReproduceConfig:
    settings = {"seq_len": 16, "geometry_cap": 16, "regimes": False} | changes
    return ReproduceConfig.preset(True, models=(model,), corpora=(corpus,), **settings)


def walk_two(model: str, corpus: str, out: Path, **changes) -> dict[str, str]:
    """Walk the weight spectra and the analysis of `corpus`; {label kind: "computed" | "reused"}."""
    c = config(model, corpus, **changes)
    plan = model_plan(model, c, out)
    walked = walk(model, [plan.weights, plan.analyses[corpus]], model_opener(model, c))
    kinds = {WEIGHTS: plan.weights.label, ANALYSIS: plan.analyses[corpus].label}
    return {kind: "reused" if label in walked.reused else "computed" for kind, label in kinds.items()}


def stale_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if "computing it again" in line or "computing the section again" in line]


@pytest.mark.parametrize(
    ("field", "recomputed", "named"),
    [
        ("weights", {WEIGHTS, ANALYSIS}, "model.files.model.safetensors"),
        ("tokenizer.json", {WEIGHTS, ANALYSIS}, "model.files.tokenizer.json"),
        ("config.json", {WEIGHTS, ANALYSIS}, "model.files.config.json"),
        ("corpus", {ANALYSIS}, "corpus.sha256"),
        ("seq_len", {ANALYSIS}, "seq_len"),
        ("nothing", set(), None),
    ],
)
def test_a_section_is_computed_again_exactly_when_an_input_it_reads_changed(project, tmp_path, capsys, field,
                                                                          recomputed, named):  # fmt: skip
    model, corpus = project
    out = tmp_path / "out"
    assert walk_two(str(model), str(corpus), out) == {WEIGHTS: "computed", ANALYSIS: "computed"}
    changes = {}
    if field == "weights":
        resave_weights(model)
    elif field == "tokenizer.json":
        keep_times(model / "tokenizer.json", swap_ids)
    elif field == "config.json":
        edit_json(model / "config.json", rms_norm_eps=1e-3)
    elif field == "corpus":
        keep_times(corpus, lambda p: p.write_text(p.read_text().replace("w5", "w6")))
    elif field == "seq_len":
        changes = {"seq_len": 12}
    capsys.readouterr()
    got = walk_two(str(model), str(corpus), out, **changes)
    assert {kind for kind, what in got.items() if what == "computed"} == recomputed
    lines = stale_lines(capsys.readouterr().err)
    assert len(lines) == len(recomputed), lines  # one line per section computed again, naming what changed
    assert all(f"({named}" in line or f", {named}" in line for line in lines), lines


def test_another_projects_model_and_corpus_of_the_same_names_are_not_reused(project, tmp_path, monkeypatch):
    model, corpus = project
    other = tmp_path / "other"
    shutil.copytree(model.parent, other)
    change_weights_in_place(other / "model")
    (other / "c.txt").write_text((other / "c.txt").read_text().replace("w7", "w8"))
    out = tmp_path / "out"
    monkeypatch.chdir(model.parent)
    assert walk_two("model", "c.txt", out) == {WEIGHTS: "computed", ANALYSIS: "computed"}
    monkeypatch.chdir(other)
    assert walk_two("model", "c.txt", out) == {WEIGHTS: "computed", ANALYSIS: "computed"}
    assert walk_two("model", "c.txt", out) == {WEIGHTS: "reused", ANALYSIS: "reused"}


def damage(directory: Path, how: str) -> str:
    """Damage a stored section the way a disk, a user or a killed copy does; returns the file damaged."""
    if how == "key not UTF-8":
        (directory / KEY_FILE).write_bytes(b"\xff\xfe{not utf-8")
        return KEY_FILE
    data = sorted(p for p in directory.rglob("*") if p.is_file() and p.suffix in (".parquet", ".json", ".npz")
                  and p.name not in (KEY_FILE, MARKER))  # fmt: skip
    target = data[0]
    if how == "deleted":
        target.unlink()
    else:  # truncated
        target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])
    return target.relative_to(directory).as_posix()


@pytest.mark.parametrize("how", ["deleted", "truncated", "key not UTF-8"])
def test_a_damaged_stored_section_is_one_line_naming_its_folder_then_computed_again(project, tmp_path, capsys, how):
    model, corpus = project
    out = tmp_path / "out"
    walk_two(str(model), str(corpus), out)
    plan = model_plan(str(model), config(str(model), str(corpus)), out)
    for section in (plan.weights, plan.analyses[str(corpus)]):
        name = damage(section.directory, how)
        capsys.readouterr()
        expected = {WEIGHTS: "computed", ANALYSIS: "reused"} if section is plan.weights else \
            {WEIGHTS: "reused", ANALYSIS: "computed"}  # fmt: skip
        assert walk_two(str(model), str(corpus), out) == expected
        err = capsys.readouterr().err
        lines = stale_lines(err)
        assert len(lines) == 1 and str(section.directory) in lines[0] and "Traceback" not in err, err
        assert (name in lines[0]) if how != "key not UTF-8" else "damaged" in lines[0]
        assert foreign_entries(section.directory) == []  # replaced whole, by a section sinkscope wrote


def test_a_stamp_left_out_of_its_ownership_record_by_a_kill_does_not_lock_the_section(project, tmp_path, capsys):
    # what a kill between writing the stamp and recording it left (the order before this rule): a stamp the record
    # does not list, so the section, once stale, could never be replaced
    model, corpus = project
    out = tmp_path / "out"
    walk_two(str(model), str(corpus), out)
    directory = model_plan(str(model), config(str(model), str(corpus)), out).weights.directory
    marker = read_marker(directory)
    marker["entries"].remove(KEY_FILE)
    (directory / MARKER).write_text(json.dumps(marker))
    assert foreign_entries(directory) == [KEY_FILE]
    edit_json(model / "config.json", rms_norm_eps=1e-3)
    assert walk_two(str(model), str(corpus), out) == {WEIGHTS: "computed", ANALYSIS: "computed"}
    assert foreign_entries(directory) == [] and not list(directory.parent.glob(f"{directory.name}.unsaved-*"))


def test_a_kill_between_the_record_and_the_stamp_leaves_a_stale_section_sinkscope_may_replace(project, tmp_path,
                                                                                              monkeypatch):  # fmt: skip
    model, corpus = project
    out = tmp_path / "out"
    real, calls = files._replace_whole, []

    def killed_at_the_stamp(path: Path, text: str) -> None:
        calls.append(path.name)
        if path.name == KEY_FILE:
            raise KeyboardInterrupt  # the record is whole, the stamp not yet written
        real(path, text)

    with monkeypatch.context() as patch:
        patch.setattr(files, "_replace_whole", killed_at_the_stamp)
        with pytest.raises(KeyboardInterrupt):
            walk_two(str(model), str(corpus), out)
    assert calls == [MARKER, KEY_FILE]  # the record first, then the stamp
    directory = model_plan(str(model), config(str(model), str(corpus)), out).weights.directory
    assert not (directory / KEY_FILE).exists() and KEY_FILE in read_marker(directory)["entries"]
    assert [p.name for p in directory.parent.iterdir() if ".tmp-" in p.name] == []  # no temporary left beside it
    assert walk_two(str(model), str(corpus), out) == {WEIGHTS: "computed", ANALYSIS: "computed"}
    assert foreign_entries(directory) == [] and (directory / KEY_FILE).is_file()
    assert walk_two(str(model), str(corpus), out) == {WEIGHTS: "reused", ANALYSIS: "reused"}
