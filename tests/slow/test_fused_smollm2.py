"""SmolLM2 takes the rows path on every layer (the fused path when forced), and the statistics of either equal eager
attention maps to 1e-5."""

import pandas as pd
import pytest
import torch

import sinkscope.capture.attention as attention
from sinkscope.corpus.windows import windows
from sinkscope.models.load import load_model
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("path", ["row_attention", "fused_attention"])
def test_smollm2_rows_and_fused_paths_equal_eager_maps(path, monkeypatch):
    lm = load_model("smollm2-135m")
    stream = windows("builtin:prose", lm.tokenizer, seq_len=48, max_windows=2, batch_size=2)
    config = AnalyzeConfig(geometry_cap=0)
    calls = []
    original = getattr(attention, path)
    with monkeypatch.context() as patch:
        patch.setattr(attention.fused_cpu, "available", lambda: False)  # the compiled kernel would take every layer
        if path == "fused_attention":
            patch.setattr(attention, "ROWS_UP_TO_SEQ_LEN", 0)  # T = 48 takes the rows path by default
        patch.setattr(attention, path, lambda *a: calls.append(1) or original(*a))
        run = analyze(lm, stream, config, progress=False)
    assert len(calls) == len(lm.layers)  # one batch: every layer on this path
    with monkeypatch.context() as patch:
        patch.setattr(attention, "attention_path", lambda *a: "blocks")
        blocked = analyze(lm, stream, config, progress=False)
    ids = torch.cat(list(stream))
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        att = torch.stack(lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions).double()
    L, N, H, T, _ = att.shape
    t = torch.arange(1, T)
    p = att[..., 1:, :]
    entropy = -(torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros_like(p))).sum(-1) / torch.log(t + 1.0)
    expected = {
        "sink_score": att[..., :, 0].mean((1, 3)),
        "diag_score": att.diagonal(dim1=-2, dim2=-1)[..., 1:].mean((1, 3)),
        "prev_score": att.diagonal(offset=-1, dim1=-2, dim2=-1).mean((1, 3)),
        "entropy": entropy.mean((1, 3)),
    }
    heads = run.heads.sort_values(["layer", "head"])
    for column, ref in expected.items():
        got = torch.tensor(heads[column].to_numpy()).view(L, H)
        torch.testing.assert_close(got, ref, atol=1e-5, rtol=0, msg=column)
    per_key = torch.stack([att[..., k:, k].sum(-1) / (T - k) for k in range(T)], -1).mean((1, 2))  # (L, T)
    positions = run.positions.sort_values(["layer", "position"])
    torch.testing.assert_close(torch.tensor(positions["mean_key_score"].to_numpy()).view(L, T), per_key,
                               atol=1e-5, rtol=0)
    numeric = run.heads.select_dtypes("number").columns
    pd.testing.assert_frame_equal(run.heads[numeric], blocked.heads[numeric], atol=1e-5, rtol=0)
    pd.testing.assert_frame_equal(run.extra["tokens"][["token_id", "n", "received_mean"]],
                                  blocked.extra["tokens"][["token_id", "n", "received_mean"]], atol=1e-5, rtol=0)
