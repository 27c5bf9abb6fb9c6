"""Property-based tests (hypothesis) of `sinkscope analyze` over corpora and arguments.

Whatever the corpus bytes (random, other encodings, empty documents, huge lines, JSONL of any shape) and whatever
the integer arguments, the command either writes a run whose every table equals the eager reference on the same
windows (tests/integration/eager_reference.py), or exits 2 with exactly one `error:` line and no traceback, leaving
no temporaries behind. A tiny random Llama keeps each example short.
"""

import contextlib
import io
import json
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from transformers import AutoModelForCausalLM, AutoTokenizer

import sinkscope.report.html
from sinkscope.cli.main import main
from sinkscope.corpus.windows import windows

from .eager_reference import KEYS, compare, eager_reference
from .tiny_checkpoint import WORDS, save_tiny_llama, write_corpus

FAST = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="module")
def reference(model):
    """The saved model and its tokenizer as plain transformers loads them, for the eager reference."""
    lm = AutoModelForCausalLM.from_pretrained(model).eval().requires_grad_(False)
    return lm, AutoTokenizer.from_pretrained(model)


@pytest.fixture(autouse=True)
def no_report(monkeypatch):
    """report.html is tested in tests/browser; here only the tables matter."""
    monkeypatch.setattr(sinkscope.report.html, "write_report", lambda runs, path, figures_dir=None: path.touch())


def analyze(model: Path, corpus: Path, out: Path, *args: str) -> tuple[int, str]:
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = main(["analyze", "--model", str(model), "--corpus", str(corpus), "--out", str(out), "--quiet",
                     "--geometry-cap", "0", *args])  # fmt: skip
    return code, stderr.getvalue()


def assert_run_or_one_error(code: int, stderr: str, out: Path, reference, corpus: Path, seq_len: int,
                            max_windows: int, epsilon: float = 0.3, tau: float = 0.1) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("sinkscope analyze: error: ")]
    event("a run" if code == 0 else "one error: " + (errors[0][26:].replace(str(out.parent), "")[:40] if errors else ""))
    if code == 2:
        assert len(errors) == 1, stderr
        assert not out.exists()
    else:
        assert code == 0 and not errors, stderr
        assert_equals_reference(out, reference, corpus, seq_len, max_windows, epsilon, tau)
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


def assert_equals_reference(out: Path, reference, corpus: Path, seq_len: int, max_windows: int, epsilon: float,
                            tau: float) -> None:
    """Every table of the run directory and run.json's summary equal the eager reference on the same windows."""
    model, tokenizer = reference
    meta = json.loads((out / "run.json").read_text())
    assert 1 <= meta["corpus"]["windows"] <= max_windows and meta["corpus"]["seq_len"] == seq_len
    ids = torch.cat(list(windows(str(corpus), tokenizer, seq_len, max_windows)))
    assert len(ids) == meta["corpus"]["windows"]
    tables = {name: pd.read_parquet(out / f"{name}.parquet") for name in KEYS}
    expected = eager_reference(model, ids, epsilon, 0.1, tau, geometry=False, tokenizer=tokenizer)
    compare(tables, meta["summary"], expected, f"T={seq_len} ε={epsilon} τ={tau}:")


word = st.sampled_from(WORDS[3:]) | st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=12)
document = st.lists(word, max_size=60).map(" ".join)
text_bytes = st.one_of(
    st.binary(max_size=3000),  # anything at all
    st.lists(document, max_size=8).map(lambda docs: "\n\n".join(docs).encode()),  # empty documents included
    st.lists(document, max_size=8).map(lambda docs: "\n\n".join(docs).encode()),  # (twice as likely)
    st.tuples(document, st.sampled_from(["utf-16", "latin-1", "cp1252", "utf-8-sig"])).map(
        lambda pair: pair[0].encode(pair[1], errors="replace")
    ),
    st.tuples(st.sampled_from(WORDS[3:]), st.integers(1, 20_000)).map(lambda p: ((p[0] + " ") * p[1]).encode()),
    st.tuples(document, st.binary(max_size=4)).map(lambda p: p[0].encode() + p[1] + p[0].encode()),  # few bad bytes
)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20), lambda inner: st.lists(inner, max_size=3)
)
jsonl_line = st.one_of(
    document.map(lambda text: json.dumps({"text": text})),
    st.dictionaries(st.sampled_from(["text", "title", "id"]), json_value | document, max_size=3).map(json.dumps),
    json_value.map(json.dumps),
    st.text(max_size=40),  # malformed JSON, blank lines
)


@FAST
@given(data=text_bytes, seq_len=st.integers(2, 12), max_windows=st.integers(1, 4))
def test_any_text_file_gives_a_consistent_run_or_one_error(model, reference, data, seq_len, max_windows):
    with tempfile.TemporaryDirectory() as root:
        corpus = Path(root) / "corpus.txt"
        corpus.write_bytes(data)
        out = Path(root) / "run"
        code, stderr = analyze(model, corpus, out, "--seq-len", str(seq_len), "--max-windows", str(max_windows))
        assert_run_or_one_error(code, stderr, out, reference, corpus, seq_len, max_windows)


@FAST
@given(lines=st.lists(jsonl_line, max_size=8), seq_len=st.integers(2, 8))
def test_any_jsonl_gives_a_consistent_run_or_one_error(model, reference, lines, seq_len):
    with tempfile.TemporaryDirectory() as root:
        corpus = Path(root) / "corpus.jsonl"
        corpus.write_text("\n".join(lines))
        out = Path(root) / "run"
        code, stderr = analyze(model, corpus, out, "--seq-len", str(seq_len), "--max-windows", "3")
        assert_run_or_one_error(code, stderr, out, reference, corpus, seq_len, 3)
        if code == 2 and "JSON" in stderr:
            assert f"{corpus}:" in stderr  # a JSONL error names file:line


VALID = {"seq-len": st.integers(2, 12), "max-windows": st.integers(1, 4), "batch-size": st.integers(1, 3),
         "epsilon": st.sampled_from([0.05, 0.3, 0.99]), "tau": st.sampled_from([0.1, 0.5]),
         "checkpoint-every": st.integers(0, 2)}  # fmt: skip
INVALID = {"seq-len": st.integers(-2, 1), "max-windows": st.integers(-2, 0), "batch-size": st.integers(-2, 0),
           "epsilon": st.sampled_from([-0.1, 0.0, 1.0, 2.0]), "tau": st.sampled_from([0.0, 1.5]),
           "checkpoint-every": st.integers(-3, -1)}  # fmt: skip


@st.composite
def arguments(draw) -> dict:
    """Valid values for every argument, and in most examples one or two of them out of range."""
    values = {name: draw(strategy) for name, strategy in VALID.items()}
    for name in draw(st.lists(st.sampled_from(sorted(INVALID)), max_size=2, unique=True)):
        values[name] = draw(INVALID[name])
    return values


@FAST
@given(values=arguments())
def test_any_arguments_give_a_consistent_run_or_one_error(model, reference, values):
    with tempfile.TemporaryDirectory() as root:
        corpus = write_corpus(Path(root) / "corpus.txt", documents=20, words=10)
        out = Path(root) / "run"
        code, stderr = analyze(model, corpus, out, *(f"--{k}={v}" for k, v in values.items()))
        assert_run_or_one_error(code, stderr, out, reference, corpus, values["seq-len"], values["max-windows"],
                                values["epsilon"], values["tau"])
        invalid = (values["seq-len"] < 2 or min(values["max-windows"], values["batch-size"]) < 1
                   or not 0 < values["epsilon"] < 1 or not 0 < values["tau"] < 1 or values["checkpoint-every"] < 0)
        assert code == (2 if invalid else 0), stderr
