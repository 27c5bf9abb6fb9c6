"""`sinkscope.attention` and `sinkscope view` on a model with linear-attention layers (Qwen3-Next, tiny random):
`attention` returns NaN maps, NaN scores and the class "linear" for the layer without a softmax map and the model's
own eager maps (plain `transformers` `output_attentions`) for the full-attention layer; `view`'s page lists the
linear layer in `linear_layers`, labels its row "linear attention: no softmax map", stores no map for it (an empty
stream, read back as NaN) and no scores or keys, and keeps the full-attention layer's map within the 16-bit bound
of the same eager reference; a model without any softmax layer is refused in one line. The page in a browser:
tests/browser/test_view_linear.py."""

import copy
import dataclasses
import json
import re

import numpy as np
import pytest
import torch
import transformers
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import sinkscope
from integration.test_qwen3_next import tiny
from integration.tiny_checkpoint import WORDS
from sinkscope.errors import SinkscopeError
from sinkscope.explorer.page import view
from sinkscope.explorer.quantise import dequantise_maps, quant_error
from sinkscope.models.families import family_for

TEXT = " ".join(f"w{(7 * i) % 61}" for i in range(20))


def with_tokenizer(attention: str):
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")
    return dataclasses.replace(tiny(attention), tokenizer=tokenizer)


def test_attention_names_the_linear_layer_and_returns_the_full_layers_eager_map():
    arrays = sinkscope.attention(with_tokenizer("sdpa"), TEXT, epsilon=0.3)
    reference = with_tokenizer("eager")
    with torch.no_grad():
        out = reference.model(input_ids=torch.tensor(arrays.ids)[None], output_attentions=True)
    full = [a for a in out.attentions if a is not None]
    assert len(full) == 1
    expected = full[0][0].double().numpy()  # (H, T, T) of layer 1, the full-attention layer
    assert np.isnan(arrays.maps[0]).all() and (arrays.head_class[0] == "linear").all()
    assert all(np.isnan(values[0]).all() for values in arrays.scores.values())
    np.testing.assert_allclose(arrays.maps[1], expected, atol=1e-6)
    np.testing.assert_allclose(arrays.scores["sink"][1], expected[..., 0].mean(-1), atol=1e-6)
    assert "linear" not in set(arrays.head_class[1])


def page_data(html: str) -> dict:
    return json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', html, re.S).group(1))


def test_view_labels_the_linear_layer_and_draws_the_full_layers_eager_map():
    page = view(with_tokenizer("sdpa"), TEXT, bits=16)
    data = page_data(page.html)
    reference = with_tokenizer("eager")
    ids = torch.tensor(data["ids"])[None]
    with torch.no_grad():
        expected = [a for a in reference.model(input_ids=ids, output_attentions=True).attentions if a is not None]
    L, H, T = data["n_layers"], data["n_heads"], data["n_tokens"]
    assert data["linear_layers"] == [0] and data["open"]["layer"] == 1
    assert all(c["cls"] == "linear" and c["sinks"] == [] for c in data["heads"][0])
    assert all(v is None for c in data["heads"][0] for k, v in c.items() if k not in ("cls", "sinks"))
    assert data["layers"][0]["mlp_like"] is None and data["layers"][0]["mlp_tokens"] == []
    assert "linear" not in {c["cls"] for c in data["heads"][1]}
    maps = re.search(r'<script id="maps" type="application/octet-stream">(.*?)</script>', page.html, re.S).group(1)
    stored = dequantise_maps(maps.strip(), data["quant"]["offsets"], L, H, T, bits=16)
    assert np.isnan(stored[0]).all()
    np.testing.assert_allclose(stored[1], expected[0][0].double().numpy(), atol=quant_error(16) + 1e-6)
    sink = expected[0][0].double()[..., 0].mean(-1)  # the full layer's sink score, from the eager map
    np.testing.assert_allclose([c["sink"] for c in data["heads"][1]], sink.numpy(), atol=1e-4)
    row = re.search(r'<tr data-layer="0">.*?</tr>', page.html, re.S).group(0)
    assert "linear attention: no softmax map" in row and row.count('class="cell') == 1


def test_view_refuses_a_model_without_any_softmax_layer_in_one_line():
    lm = with_tokenizer("sdpa")
    config = copy.deepcopy(lm.model.config)
    config.layer_types = ["linear_attention"] * config.num_hidden_layers
    model = transformers.Qwen3NextForCausalLM(config).eval()
    only_linear = dataclasses.replace(lm, model=model, family=family_for("qwen3_next", config))
    with pytest.raises(SinkscopeError) as raised:
        view(only_linear, TEXT)
    message = str(raised.value)
    assert "\n" not in message and "no layer" in message and "all 2 are linear attention" in message
