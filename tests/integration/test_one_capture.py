"""One capture of one text (issue 35): `sinkscope view` and `sinkscope.attention` are built on the one
`capture_text` pass, so the page's data equals `sinkscope.attention`'s arrays; and that pass's value norms, read
from each layer's value projection, equal the values the model hands its attention function (read inside the
attention interface by `capture.attention.watch_attention`, a different path), for every family of the table."""

import json
import re

import numpy as np
import pytest
import torch

import sinkscope
from integration.test_reference_columns import FAMILIES, tiny
from integration.view_model import TEXT, save_sharp_llama
from sinkscope.capture.attention import watch_attention
from sinkscope.capture.text_maps import capture_text
from sinkscope.explorer.quantise import dequantise_maps, quant_error
from sinkscope.models.families import attention_module


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_sharp_llama(tmp_path_factory.mktemp("one") / "model")


def test_page_data_equals_sinkscope_attention(model_dir):
    lm = sinkscope.load_model(str(model_dir))
    arrays = sinkscope.attention(lm, TEXT, seq_len=28, epsilon=0.1405, delta=0.9)
    page = sinkscope.view(lm, TEXT, seq_len=28, epsilon=0.1405, delta=0.9, bits=16)
    data = json.loads(re.search(r'<script id="data" type="application/json">(.*?)</script>', page.html, re.S)[1])
    maps = re.search(r'<script id="maps" type="application/octet-stream">(.*?)</script>', page.html, re.S)[1]
    assert data["ids"] == arrays.ids.tolist() and data["tokens"] == arrays.tokens
    L, H, T, _ = arrays.maps.shape
    shown = dequantise_maps(maps, data["quant"]["offsets"], L, H, T, 16)
    assert np.abs(shown - arrays.maps).max() <= quant_error(16)
    for layer in range(L):
        for head in range(H):
            cell = data["heads"][layer][head]
            assert cell["cls"] == arrays.head_class[layer, head]
            for name, values in arrays.scores.items():
                assert cell[name] == round(float(values[layer, head]), 4), (layer, head, name)
    # ε and δ chosen so that this model's heads fall in more than one class and the hard fractions are not all 0
    assert len(set(arrays.head_class.reshape(-1))) > 1 and arrays.scores["hard_sink"].std() > 0


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_value_norms_equal_the_values_the_attention_function_reads(name):
    lm = tiny(name)
    ids = torch.tensor([1, *range(5, 16)])
    capture = capture_text(lm, ids)
    L, H, G = len(lm.layers), lm.layout.n_heads, lm.layout.group
    reference = torch.zeros(L, H, len(ids))

    def on_values(layer, value):  # (B, KV, T, D) as the model hands it to its attention function
        reference[layer] = value[0].float().norm(dim=-1).repeat_interleave(G, dim=0)

    modules = {index: attention_module(lm.family, block) for index, block in enumerate(lm.layers)}
    with watch_attention(lm.model, modules, lambda *_: None, on_values):
        lm.base(input_ids=ids[None], use_cache=False)
    assert reference.abs().min() > 0
    torch.testing.assert_close(capture.value_norms, reference, rtol=1e-5, atol=1e-6)
    assert torch.allclose(capture.attn.sum(-1), torch.ones(L, H, len(ids)), atol=1e-5)
