"""One input, one folder, nothing written outside `--out`; names the file system cannot take are refused before the
work; `reproduce`'s reports are replaced whole or not at all; a bad `--regimes-from` fails before any section."""

from __future__ import annotations

import resource
import signal
from pathlib import Path

import pandas as pd
import pytest

from sinkscope.cli.main import main
from sinkscope.errors import SinkscopeError
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.plan import model_plan
from sinkscope.reproduction.run import check_folders, reproduce
from sinkscope.reproduction.sections import analysis_section, model_directory

from . import test_reliability_two as two
from .test_reliability_two import analyze_args

tiny, no_model = two.tiny, two.no_model  # the fixtures of round two


def config(models=("m",), corpora=("builtin:prose",), **changes) -> ReproduceConfig:
    return ReproduceConfig.preset(True, models=tuple(models), corpora=tuple(corpora), regimes=False, **changes)


@pytest.mark.parametrize(("a", "b"), [("sub/c.txt", "sub-c.txt"), ("builtin:prose", "builtin-prose"),
                                      ("builtin:prose", "./builtin-prose"), ("c.txt", "./c.txt"),
                                      ("a b.txt", "a-b.txt"), ("x" * 300, "x" * 301)])  # fmt: skip
def test_two_corpora_never_share_a_section_folder(tmp_path, a, b):
    c = config(corpora=(a, b))
    first, second = (analysis_section("m", c, tmp_path, corpus, smoothing=True).directory for corpus in (a, b))
    assert first != second and first.parent == second.parent == tmp_path / "m"
    assert len(first.name.encode()) <= 80 and len(second.name.encode()) <= 80  # room for the staging names


@pytest.mark.parametrize(("a", "b"), [("sub/model", "sub-model"), ("a/m", "a-m"), ("m", "./m")])
def test_two_models_never_share_a_folder(tmp_path, a, b):
    assert model_directory(tmp_path, a) != model_directory(tmp_path, b)


@pytest.mark.parametrize("name", ["..", ".", "../..", "a/../../..", "/", "/tmp", "~", "-", ".hidden", "../out",
                                  "..\\..", "x" * 300, "a\nb"])  # fmt: skip
def test_every_section_folder_lies_inside_out_whatever_the_model_or_corpus_is_called(tmp_path, monkeypatch, name):
    here = tmp_path / "a" / "b" / "c"
    here.mkdir(parents=True)
    monkeypatch.chdir(here)  # `..` and `../..` are small folders here (a corpus folder is hashed whole)
    out = here / "out"
    corpus = "builtin:prose" if name.startswith(("/", "~")) else name
    plan = model_plan(name, config(models=(name,), corpora=(corpus, "builtin:code")), out)
    for section in plan.in_order():
        relative = section.directory.relative_to(out)  # raises when outside
        assert ".." not in relative.parts and "." not in relative.parts and len(relative.parts) == 2, relative
        assert section.directory.resolve().is_relative_to(out.resolve())


def test_models_whose_folders_differ_only_in_case_are_refused_before_the_work():
    with pytest.raises(SinkscopeError, match="would share one folder on a file system that ignores case"):
        check_folders(config(models=("Model", "model")))
    check_folders(config(models=("model", "other")))  # distinct names pass


@pytest.mark.parametrize("command", ["analyze", "reproduce"])
def test_an_out_name_too_long_for_the_file_system_is_one_line_before_the_work(tiny, tmp_path, capsys, no_model,
                                                                               command):  # fmt: skip
    out = tmp_path / ("r" * 240)  # the folder fits (255 bytes), the staging names beside it do not
    args = analyze_args(tiny, "--out", str(out)) if command == "analyze" else \
        ["reproduce", "--quick", "--models", str(tiny[0]), "--corpora", str(tiny[1]), "--out", str(out)]  # fmt: skip
    with pytest.raises(SystemExit) as exit_:  # refused while the arguments are read (`cli.options`)
        main(args)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if ": error: " in line]
    assert exit_.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "choose a name at least" in lines[0] and "byte(s) shorter" in lines[0], lines
    assert not out.exists()


def test_a_report_that_cannot_be_written_leaves_the_old_one_whole(tmp_path, monkeypatch):
    from sinkscope.reproduction import report

    out = tmp_path / "repro"
    out.mkdir()
    old = {name: f"the finished report {name}\n".encode() * 1000 for name in ("report.md", "report.html")}
    for name, data in old.items():
        (out / name).write_bytes(data)
    for name in ("write_tables", "section_data"):
        monkeypatch.setattr(report, name, lambda *args, **kwargs: [])
    monkeypatch.setattr(report, "_figures", lambda *args, **kwargs: {})
    monkeypatch.setattr(report, "model_note", lambda *args, **kwargs: "")
    monkeypatch.setattr(report, "render_page", lambda template, **context: "x" * (2 << 20))  # 2 MiB
    summary = {"verdicts": [], "reused": {}, "config": {"models": []}}
    limits = resource.getrlimit(resource.RLIMIT_FSIZE)
    previous = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # past the limit a write fails (EFBIG) instead
    resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, limits[1]))  # the file-size limit: 1 MiB
    try:
        with pytest.raises(SinkscopeError, match="report.md: File too large; the previous file"):
            report.write_reports(out, summary, {}, pd.DataFrame(), {})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, limits)
        signal.signal(signal.SIGXFSZ, previous)
    assert {name: (out / name).read_bytes() for name in old} == old
    assert [p.name for p in out.iterdir() if ".tmp-" in p.name] == []


@pytest.mark.parametrize("damage", ["not parquet", "cut short", "no columns of a map"])
def test_a_bad_regimes_from_fails_before_any_section_is_computed(tmp_path, monkeypatch, damage):
    import sinkscope.reproduction.cost_section as cost_section

    regimes = tmp_path / "regimes"
    regimes.mkdir()
    path = regimes / "regime_cells.parquet"
    if damage == "not parquet":
        path.write_text("a table I wrote by hand")
    else:
        pd.DataFrame({"cell": ["a"], "pattern": ["sink"]} if damage == "no columns of a map" else
                     {"variant": ["softmax"] * 50, "weight_decay": [1e-4] * 50}).to_parquet(path)  # fmt: skip
        if damage == "cut short":
            path.write_bytes(path.read_bytes()[:-40])

    def computed(*args, **kwargs):
        raise AssertionError("a section was computed before --regimes-from was checked")

    monkeypatch.setattr(cost_section, "cost_theory", computed)
    c = config(corpora=("builtin:prose",), regimes_from=str(regimes))
    with pytest.raises(SinkscopeError, match=f"--regimes-from {regimes}: {path} is not"):
        reproduce(c, tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any(Path(tmp_path / "out").rglob("*.parquet"))
