"""The two embedded real models: analyze agrees with an independent computation from plain transformers."""

import time

import pytest
import torch

from sinkscope.analysis import analyze
from sinkscope.corpus.windows import windows
from sinkscope.models.load import load_model

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("name, bos", [("smollm2-135m", 1), ("gemma3-270m", 2)])
def test_analyze_matches_plain_transformers(name, bos):
    lm = load_model(name)
    stream = windows("builtin:prose", lm.tokenizer, seq_len=32, max_windows=8, batch_size=4)
    run = analyze(lm, stream, progress=False)
    ids = torch.cat(list(stream))
    assert (ids[:, 0] == bos).all() and stream.count == 8
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        out = lm.base(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    att = torch.stack(out.attentions).double()  # (L, N, H, T, T)
    heads = run.heads.sort_values(["layer", "head"])
    expected = {
        "sink_score": att[..., :, 0].mean((1, 3)),
        "diag_score": att.diagonal(dim1=-2, dim2=-1)[..., 1:].mean((1, 3)),
        "prev_score": att.diagonal(offset=-1, dim1=-2, dim2=-1).mean((1, 3)),
    }
    for column, ref in expected.items():
        got = torch.tensor(heads[column].to_numpy()).view_as(ref)
        torch.testing.assert_close(got, ref, atol=1e-4, rtol=0, msg=column)
    # The residual entering layer l is hidden_states[l] for l < L (the last entry is after the final norm).
    h = torch.stack(out.hidden_states[:-1]).double()  # (L, N, T, d)
    ratio = h[..., 0, :].norm(dim=-1) / h[..., 1:, :].norm(dim=-1).mean(-1)
    torch.testing.assert_close(torch.tensor(run.layers["bos_norm_ratio_h"].to_numpy()), ratio.mean(1), rtol=1e-4,
                               atol=0)
    assert 0 < run.meta["summary"]["sink_rate"] <= 1


def test_second_load_of_smollm2_reads_the_safetensors_cache():
    load_model("smollm2-135m")  # builds the cache if this machine has none yet
    started = time.perf_counter()
    lm = load_model("smollm2-135m")
    seconds = time.perf_counter() - started
    assert lm.identity["sha256"] and lm.identity["n_layers"] == 30
    assert seconds < 15, f"cached load took {seconds:.1f}s"
