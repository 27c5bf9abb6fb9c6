"""`sinkscope.attention` and `sinkscope view` on a model with linear-attention layers (Qwen3-Next, tiny random):
`attention` returns NaN maps, NaN scores and the class "linear" for the layer without a softmax map and the model's
own eager maps (plain `transformers` `output_attentions`) for the full-attention layer; `view`, whose page draws a
map per head of every layer, refuses with one line naming the layers and what to use instead."""

import dataclasses

import numpy as np
import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import sinkscope
from integration.test_qwen3_next import tiny
from integration.tiny_checkpoint import WORDS
from sinkscope.errors import SinkscopeError

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


def test_view_refuses_in_one_line_naming_the_linear_layers():
    with pytest.raises(SinkscopeError) as raised:
        sinkscope.view(with_tokenizer("sdpa"), TEXT)
    message = str(raised.value)
    assert "\n" not in message and "layers [0]" in message and "sinkscope.attention" in message
