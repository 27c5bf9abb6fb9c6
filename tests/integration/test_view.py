"""`sinkscope.view` on a tiny random Llama: the embedded maps and scores equal plain transformers' attention."""

import json
import re

import numpy as np
import pytest
import torch

from sinkscope.corpus.windows import windows
from sinkscope.errors import SinkscopeError
from sinkscope.explorer.page import view
from sinkscope.explorer.quantise import dequantise_maps, quant_error
from sinkscope.models.load import load_model

from .view_model import TEXT, eager_attention, save_sharp_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_sharp_llama(tmp_path_factory.mktemp("sharp") / "model")


def embedded(page_html: str) -> tuple[dict, str]:
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page_html, re.S)[1])
    maps = re.search(r'<script id="maps" type="application/octet-stream">(.*?)</script>', page_html, re.S)[1]
    return data, maps


@pytest.mark.parametrize("bits", [8, 16])
def test_page_maps_and_scores_equal_eager_attention(model_dir, tmp_path, bits):
    page = view(str(model_dir), TEXT, seq_len=30, out=tmp_path / "p.html", bits=bits)
    assert page.path.read_text(encoding="utf-8") == page.html and page.n_tokens == 30
    ids, ref = eager_attention(model_dir, TEXT, seq_len=30)
    data, maps = embedded(page.html)
    assert data["ids"] == ids and data["n_tokens"] == 30
    L, H = ref.shape[:2]
    assert data["quant"]["bits"] == bits and data["quant"]["error"] == quant_error(bits)
    got = dequantise_maps(maps, data["quant"]["offsets"], L, H, 30, bits)
    assert np.abs(got - ref.numpy()).max() <= quant_error(bits) + 1e-6
    assert ref.max() > 0.9 and ref[..., 1:, :].min() < 1e-3  # the test model's heads really are peaked
    sink = ref[..., :, 0].mean(-1)
    diag = ref.diagonal(dim1=-2, dim2=-1)[..., 1:].mean(-1)
    for l in range(L):
        for h in range(H):
            cell = data["heads"][l][h]
            assert cell["sink"] == pytest.approx(float(sink[l, h]), abs=1e-4)
            assert cell["diag"] == pytest.approx(float(diag[l, h]), abs=1e-4)


def test_file_text_is_the_first_corpus_window(model_dir, tmp_path):
    corpus = tmp_path / "doc.txt"
    corpus.write_text("w1 w2 w3\n\nw4 w5 w6 w7\n\n" + " ".join(f"w{i}" for i in range(30)))
    page = view(str(model_dir), file=corpus, seq_len=12)
    lm = load_model(str(model_dir))
    first = next(iter(windows(str(corpus), lm.tokenizer, seq_len=12, max_windows=1)))[0]
    assert embedded(page.html)[0]["ids"] == first.tolist()


def test_layer_geometry_equals_hidden_states(model_dir):
    page = view(str(model_dir), TEXT)
    data = embedded(page.html)[0]
    lm = load_model(str(model_dir))
    with torch.no_grad():
        out = lm.base(input_ids=torch.tensor([data["ids"]]), output_hidden_states=True)
    h = torch.stack(out.hidden_states[:-1])[:, 0].double()  # (L, T, d): residual entering each layer
    ratio = h[:, 0].norm(dim=-1) / h[:, 1:].norm(dim=-1).mean(-1)
    assert [row["norm_ratio_h"] for row in data["layers"]] == pytest.approx(ratio.tolist(), abs=2e-3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "exactly one of --text or --file"),
        ({"text": "w1", "file": "x.txt"}, "exactly one of --text or --file"),
        ({"file": "/no/such/file.txt"}, "does not exist"),
        ({"text": "w1", "seq_len": 1}, "--seq-len 1 must lie in 2..1024"),
        ({"text": "w1", "seq_len": 5000}, "--seq-len 5000 must lie in 2..1024"),
        ({"text": "w1", "epsilon": 1.5}, "--epsilon 1.5"),
        ({"text": "w1", "bits": 10}, "--bits 10 must be one of 8, 12, 16"),
    ],
)
def test_bad_input_fails_before_loading_the_model(kwargs, message):
    with pytest.raises(SinkscopeError, match=re.escape(message)):
        view("no/such-model-is-loaded", **kwargs)


def test_too_long_and_empty_texts(model_dir):
    lm = load_model(str(model_dir))
    with pytest.raises(SinkscopeError, match="pass --seq-len N"):
        view(lm, " ".join(["w1"] * 1100))
    with pytest.raises(SinkscopeError, match="the text is empty"):
        view(lm, "   ")


def test_cli_writes_the_page(model_dir, tmp_path, capsys):
    from sinkscope.cli.main import main

    out = tmp_path / "cli.html"
    assert main(["view", "--model", str(model_dir), "--text", TEXT, "--seq-len", "20", "--out", str(out)]) == 0
    assert out.is_file() and "wrote" in capsys.readouterr().out
    data = embedded(out.read_text(encoding="utf-8"))[0]
    assert data["n_tokens"] == 20 and data["quant"]["bits"] == 8
    assert main(["view", "--model", str(model_dir), "--text", "w1", "--seq-len", "1", "--out", str(out)]) == 2
    assert "--seq-len 1 must lie in 2..1024" in capsys.readouterr().err


def test_notebook_display_embeds_the_page(model_dir):
    import html

    page = view(str(model_dir), "w1 w2 w3")
    shown = page._repr_html_()
    assert shown.startswith("<iframe srcdoc=") and html.unescape(shown.split('"')[1]) == page.html
