"""Whole texts (issue 35): the corpus's last tokens are analysed in a last window of the final T-1 tokens, or the
text is one window (`--seq-len whole`); the run's scores equal those of a plain transformers forward with
`output_attentions=True` over exactly those windows, and the head-class thresholds are flags."""

import json

import pandas as pd
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from integration.tiny_checkpoint import save_tiny_llama, write_corpus
from sinkscope.cli.main import main


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("whole")
    model = save_tiny_llama(root / "model")
    corpus = write_corpus(root / "two.txt", documents=2, words=40)  # 40 + EOS + 40 = 81 tokens
    tokenizer = AutoTokenizer.from_pretrained(model)
    docs = corpus.read_text().split("\n\n")
    flat = [*tokenizer(docs[0], add_special_tokens=False)["input_ids"], tokenizer.eos_token_id,
            *tokenizer(docs[1], add_special_tokens=False)["input_ids"]]  # fmt: skip
    assert len(flat) == 81
    return root, model, corpus, flat


def plain_scores(model_dir, ids: torch.Tensor) -> pd.DataFrame:
    """Sink score mean_t A[t,0] (all T queries) and diagonal score mean_{t≥1} A[t,t] per head, over the windows,
    from transformers' own eager attention maps."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager", dtype=torch.float64)
    with torch.no_grad():
        maps = model(input_ids=ids, output_attentions=True).attentions  # L × (W, H, T, T)
    rows = []
    for layer, attn in enumerate(maps):
        sink = attn[..., :, 0].mean((0, 2))
        diag = attn.diagonal(dim1=-2, dim2=-1)[..., 1:].mean((0, 2))
        rows += [{"layer": layer, "head": h, "sink": float(sink[h]), "diag": float(diag[h])} for h in range(len(sink))]
    return pd.DataFrame(rows)


def analyze(root, model, corpus, name: str, *flags: str) -> tuple[pd.DataFrame, dict]:
    out = root / name
    argv = ["analyze", "--model", str(model), "--corpus", str(corpus), "--geometry-cap", "0", "--threads", "1",
            "--quiet", "--overwrite", "--out", str(out), *flags]  # fmt: skip
    assert main(argv) == 0
    return pd.read_parquet(out / "heads.parquet"), json.loads((out / "run.json").read_text())


@pytest.fixture(scope="module")
def tail_run(tiny):
    """The default run at T = 16 (the tail in an overlapping last window), with what it printed."""
    root, model, corpus, _ = tiny
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        heads, meta = analyze(root, model, corpus, "tail", "--seq-len", "16")
    return heads, meta, err.getvalue()


def test_the_tail_window_and_a_whole_text_match_plain_transformers(tiny, tail_run, capsys):
    root, model, corpus, flat = tiny
    bos = 0
    heads, meta, err = tail_run
    # 5 windows of 15 tokens and the last 15 (9 of them already in window 5): all 81 analysed
    ids = torch.tensor([[bos, *flat[i : i + 15]] for i in range(0, 75, 15)] + [[bos, *flat[-15:]]])
    assert meta["corpus"]["windows"] == 6 and meta["corpus"]["tail"] == "overlap"
    assert meta["corpus"]["tokens"] == {"read": 81, "analysed": 81, "overlap": 9, "dropped": 0, "windows": 6,
                                        "complete": True}  # fmt: skip
    assert f"analysed all 81 tokens of {corpus} in 6 windows of T=16, 9 of them twice" in err
    assert "none dropped" in err
    ref = plain_scores(model, ids)
    assert (heads["sink_score"] - ref["sink"]).abs().max() < 1e-5
    assert (heads["diag_score"] - ref["diag"]).abs().max() < 1e-5

    heads, meta = analyze(root, model, corpus, "drop", "--seq-len", "16", "--tail", "drop")
    assert meta["corpus"]["windows"] == 5 and meta["corpus"]["tokens"]["dropped"] == 6
    assert "the last 6 dropped (--tail drop)" in capsys.readouterr().err
    assert (heads["sink_score"] - plain_scores(model, ids[:5])["sink"]).abs().max() < 1e-5

    heads, meta = analyze(root, model, corpus, "whole", "--seq-len", "whole")
    err = capsys.readouterr().err
    assert "--seq-len whole: the corpus is 81 tokens: one window" in err
    assert meta["corpus"]["seq_len"] == 82 and meta["corpus"]["windows"] == 1
    ref = plain_scores(model, torch.tensor([[bos, *flat]]))
    assert (heads["sink_score"] - ref["sink"]).abs().max() < 1e-5
    assert (heads["diag_score"] - ref["diag"]).abs().max() < 1e-5


def expected_class(row, epsilon=0.3, diagonal=0.5, previous=0.5, dense=0.7) -> str:
    """The head class written out: the first of sink, diagonal, previous-token, dense that exceeds its threshold."""
    for name, value, threshold in (("sink", row.sink_score, epsilon), ("diagonal", row.diag_score, diagonal),
                                   ("previous-token", row.prev_score, previous), ("dense", row.entropy, dense)):
        if value > threshold:
            return name
    return "mixed"


def test_head_class_thresholds_are_flags(tiny, tail_run):
    root, model, corpus, _ = tiny
    default, meta, _ = tail_run
    assert [expected_class(r) for r in default.itertuples()] == default["head_class"].tolist()
    assert meta["config"]["diagonal"] == 0.5 and meta["config"]["dense"] == 0.7
    flags = {"diagonal": 0.05, "previous": 0.05, "dense": 0.99}
    changed, meta = analyze(root, model, corpus, "flags", "--seq-len", "16", "--diag-threshold", "0.05",
                            "--prev-threshold", "0.05", "--dense-threshold", "0.99")  # fmt: skip
    assert [expected_class(r, **flags) for r in changed.itertuples()] == changed["head_class"].tolist()
    assert (changed["head_class"] != default["head_class"]).any()  # the flags reached the classifier
    assert {k: meta["config"][k] for k in flags} == flags and meta["summary"]["head_classes"] != {}
