"""A stored result's identity (`sinkscope.identity`): a model is its weights, config and tokenizer files by content,
hashed once per version of each file; a sweep cell and a `--resume` are reused only for the same content.

Each input field is changed alone (a file's content rewritten in place with its size and modification time put
back, so only the content differs) and the result must be computed again; with nothing changed it must be reused.
The digests are checked against `hashlib.sha256` of the bytes, not against the code under test.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from sinkscope import identity
from sinkscope.cli.main import main
from sinkscope.models.load import file_sha256, weights_identity

from . import test_reliability_three as three
from . import test_reliability_two as two
from .test_reliability import interrupt_after_checkpoints
from .test_reliability_three import change_weights_in_place
from .test_reliability_two import analyze_args, one_error

own_tiny, no_report = three.own_tiny, two.no_report  # the fixtures of rounds two and three


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    """Each test its own digest cache, so what it finds cached it wrote itself."""
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path / "cache"))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def keep_times(path: Path, change) -> None:
    """`change(path)` rewrites the file in place; its modification time is then put back as it was."""
    before = path.stat()
    change(path)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert path.stat().st_mtime_ns == before.st_mtime_ns


def swap_ids(path: Path) -> None:
    """tokenizer.json with the ids of w3 and w4 swapped (same size)."""
    path.write_text(path.read_text().replace('"w3": 6', '"w3": #').replace('"w4": 7', '"w4": 6').replace("#", "7"))


def resave_weights(model: Path) -> None:
    """The weights re-saved in place with other values, same size and modification time."""
    size = (model / "model.safetensors").stat().st_size
    keep_times(model / "model.safetensors", lambda path: change_weights_in_place(model))
    assert (model / "model.safetensors").stat().st_size == size


def edit_json(path: Path, **fields) -> None:
    path.write_text(json.dumps({**json.loads(path.read_text()), **fields}, indent=2))


def test_a_models_identity_holds_its_weights_config_and_tokenizer_files_by_content(own_tiny):
    model, _ = own_tiny
    files = weights_identity(str(model))["files"]
    # every file that decides the numbers, each by the sha256 of its bytes
    # (generation_config.json changes no number of an analysis and is left out)
    assert set(files) == {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"}
    assert all(files[name] == sha256(model / name) for name in files)
    (model / "tokenizer.model").write_bytes(b"a sentencepiece model")
    assert weights_identity(str(model))["files"]["tokenizer.model"] == sha256(model / "tokenizer.model")
    before = weights_identity(str(model))
    keep_times(model / "tokenizer.json", swap_ids)
    after = weights_identity(str(model))
    assert identity.changes(before, after) == ["files.tokenizer.json"]
    assert weights_identity(str(model)) == after  # nothing changed: the same identity


def test_weights_rewritten_in_place_with_size_and_mtime_kept_change_the_identity(own_tiny):
    model, _ = own_tiny
    before = weights_identity(str(model))
    resave_weights(model)
    after = weights_identity(str(model))
    assert after["files"]["model.safetensors"] == sha256(model / "model.safetensors") != before["files"]["model.safetensors"]


def test_a_digest_is_read_from_the_cache_until_the_file_changes(tmp_path, monkeypatch):
    path = tmp_path / "weights.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    assert file_sha256(path) == sha256(path)  # a GGUF file: hashed here once ...
    cached = list((tmp_path / "cache" / "content-sha256").glob("*.json"))
    assert len(cached) == 1 and json.loads(cached[0].read_text())["sha256"] == sha256(path)
    identity._MEMORY.clear()  # a new process: only the file cache is left

    def no_read(*args, **kwargs):
        raise AssertionError("the file was read again although it did not change")

    with monkeypatch.context() as patch:
        patch.setattr(identity, "open", no_read, raising=False)
        assert file_sha256(path) == sha256(path)  # ... and not again
    keep_times(path, lambda p: p.write_bytes(b"GGUF" + bytes(range(255, -1, -1)) * 64))
    assert file_sha256(path) == sha256(path)  # same size and mtime, other bytes: hashed again


def sweep_args(model: Path, corpus: Path, out: Path) -> list[str]:
    return ["sweep", "--models", str(model), "--corpora", str(corpus), "--epsilons", "0.3", "--max-windows", "2",
            "--batch-size", "2", "--seq-lens", "8", "--quiet", "--out", str(out)]  # fmt: skip


@pytest.mark.parametrize("field", ["weights", "tokenizer.json", "config.json", "corpus", "nothing"])
def test_a_sweep_cell_is_computed_again_exactly_when_one_input_changed(own_tiny, tmp_path, capsys, field):
    model, corpus = own_tiny
    out = tmp_path / "sw"
    assert main(sweep_args(model, corpus, out)) == 0
    run_json = next((out / "cells").iterdir()) / "run.json"
    first = run_json.read_bytes()
    if field == "weights":
        resave_weights(model)
    elif field == "tokenizer.json":  # a token's id moves: the cell's windows are other ids
        keep_times(model / "tokenizer.json", swap_ids)
    elif field == "config.json":
        edit_json(model / "config.json", rms_norm_eps=1e-3)
    elif field == "corpus":
        keep_times(corpus, lambda p: p.write_text(p.read_text().replace("w5", "w6")))
    capsys.readouterr()
    assert main(sweep_args(model, corpus, out)) == 0
    out_text = "".join(capsys.readouterr())
    if field == "nothing":
        assert "finished before, skipped" in out_text and run_json.read_bytes() == first
    else:
        what = {"weights": "model.files.model.safetensors", "tokenizer.json": "model.files.tokenizer.json",
                "config.json": "model.files.config.json", "corpus": "corpus.sha256"}[field]  # fmt: skip
        assert f"its inputs changed since it was computed ({what} changed): recomputing" in out_text, out_text
        assert run_json.read_bytes() != first


@pytest.mark.parametrize("name", ["tokenizer_config.json", "model.safetensors"])
def test_resume_after_a_tokenizer_file_or_the_weights_changed_in_place_is_refused(
    own_tiny, tmp_path, capsys, monkeypatch, no_report, name
):
    model, _ = own_tiny
    out = tmp_path / "long"
    args = analyze_args(own_tiny, "--out", str(out), "--checkpoint-every", "2")
    with monkeypatch.context() as patch:
        interrupt_after_checkpoints(patch, 1)
        one_error(capsys, args, code=130)
    if name == "model.safetensors":
        resave_weights(model)
    else:  # a setting the token ids of these windows do not show
        keep_times(model / name, lambda p: edit_json(p, model_max_length=4096))
    line = one_error(capsys, [*args, "--resume"])
    assert f"belongs to a different analysis (model.weights.files.{name}:" in line, line
