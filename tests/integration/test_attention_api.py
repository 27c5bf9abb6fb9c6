"""`sinkscope.attention(lm, text)`: the maps equal plain `transformers` eager attention of the same tokens
(computed here from the model directory, without sinkscope), the scores equal loops over those maps, and the
model's attention implementation is left as it was."""

import numpy as np
import pytest

import sinkscope
from integration.view_model import TEXT, eager_attention, save_sharp_llama


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_sharp_llama(tmp_path_factory.mktemp("attention") / "model")


def test_attention_maps_tokens_and_scores_equal_eager_transformers(model_dir):
    lm = sinkscope.load_model(str(model_dir))
    implementation = lm.model.config._attn_implementation
    result = sinkscope.attention(lm, TEXT, seq_len=24)
    assert lm.model.config._attn_implementation == implementation  # restored
    ids, reference = eager_attention(model_dir, TEXT, seq_len=24)
    reference = reference.numpy()
    assert result.ids.tolist() == ids and len(result.tokens) == 24 and result.tokens[1] == "w0"
    assert result.maps.shape == reference.shape == (2, 4, 24, 24)
    assert np.abs(result.maps - reference).max() < 1e-6
    T = 24
    for layer in range(2):
        for head in range(4):
            a = reference[layer, head]
            sink = sum(a[t, 0] for t in range(T)) / T
            diag = sum(a[t, t] for t in range(1, T)) / (T - 1)
            prev = sum(a[t, t - 1] for t in range(1, T)) / (T - 1)
            hard_sink = sum(a[t, 0] >= 0.9 for t in range(1, T)) / (T - 1)
            assert result.scores["sink"][layer, head] == pytest.approx(sink, abs=1e-6)
            assert result.scores["diag"][layer, head] == pytest.approx(diag, abs=1e-6)
            assert result.scores["prev"][layer, head] == pytest.approx(prev, abs=1e-6)
            assert result.scores["hard_sink"][layer, head] == pytest.approx(hard_sink)
    table = result.table()
    assert len(table) == 8 and list(table.columns[:4]) == ["layer", "head", "sink_score", "diag_score"]
    assert (table["head_class"].to_numpy() == result.head_class.reshape(-1)).all()


def test_attention_refuses_bad_input_in_one_line(model_dir):
    with pytest.raises(sinkscope.SinkscopeError, match="exactly one of text or file"):
        sinkscope.attention(str(model_dir))
    with pytest.raises(sinkscope.SinkscopeError, match="epsilon 1.5 must lie strictly between 0 and 1"):
        sinkscope.attention(str(model_dir), "w1", epsilon=1.5)
