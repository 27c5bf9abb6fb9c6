"""The two embedded real models: analyze agrees with an independent computation from plain transformers."""

import pytest
import torch

from integration.waiting import cpu_seconds
from sinkscope.corpus.windows import windows
from sinkscope.models.load import load_model
from sinkscope.pipelines.analysis import analyze

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
    started = cpu_seconds()  # the work of the load, which other processes on the machine do not lengthen
    lm = load_model("smollm2-135m")
    seconds = cpu_seconds() - started
    assert lm.identity["sha256"] and lm.identity["n_layers"] == 30
    assert seconds < 15, f"cached load took {seconds:.1f} CPU seconds"


def test_smollm2_sink_census_matches_full_attention_maps():
    """Gu et al.'s per-window sink rates, per-position rates and the key-token table on a real model, against
    loops over plain `output_attentions` maps (4 windows, T = 64)."""
    from sinkscope.pipelines.analysis import AnalyzeConfig

    lm = load_model("smollm2-135m")
    stream = windows("builtin:prose", lm.tokenizer, seq_len=64, max_windows=4, batch_size=2)
    epsilon = 0.3
    run = analyze(lm, stream, AnalyzeConfig(epsilon=epsilon, epsilons=(0.8,), geometry_cap=0), progress=False)
    ids = torch.cat(list(stream))
    lm.model.set_attn_implementation("eager")
    with torch.no_grad():
        att = torch.stack(lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions).double()
    L, N, H, T, _ = att.shape
    # Eager and blocked float32 attention differ by ~1e-6, so a score that close to ε may fall either side:
    # the captured rate must lie between the reference rates at ε + 1e-5 and ε - 1e-5.
    tol = 1e-5

    def between(got, rate):  # rate(e) → the reference at threshold e
        lo, hi = rate(epsilon + tol), rate(epsilon - tol)
        assert ((lo - 1e-12 <= got) & (got <= hi + 1e-12)).all()

    alpha = att[..., :, 0].mean(-1)  # (L, N, H): α^w per window
    heads = run.heads.sort_values(["layer", "head"])
    between(torch.tensor(heads["sink_rate"].to_numpy()).view(L, H), lambda e: (alpha > e).double().mean(1))
    summary = run.meta["summary"]
    assert summary["sink_rates"]["0.8"] == pytest.approx((alpha > 0.8).double().mean().item(), abs=2 / alpha.numel())
    between(torch.tensor(summary["sink_rate_of_mean"], dtype=torch.float64), lambda e: (alpha.mean(1) > e).double().mean())
    per_key = torch.stack([att[..., k:, k].sum(-1) / (T - k) for k in range(T)], -1)  # (L, N, H, T)
    positions = run.positions.sort_values(["layer", "position"])
    between(torch.tensor(positions["sink_rate"].to_numpy()).view(L, T),
            lambda e: (per_key > e).double().mean((1, 2)))
    table = run.extra["tokens"].set_index("token_id")
    n, total, over_lo, over_hi = {}, {}, {}, {}
    for w in range(N):
        for k in range(1, T - 1):
            received = att[:, w, :, k + 1 :, k].mean(-1)  # (L, H)
            token = int(ids[w, k])
            n[token] = n.get(token, 0) + 1
            total[token] = total.get(token, 0.0) + received.sum().item()
            over_lo[token] = over_lo.get(token, 0) + (received > epsilon + tol).sum().item()
            over_hi[token] = over_hi.get(token, 0) + (received > epsilon - tol).sum().item()
    assert sorted(table.index) == sorted(n)
    for token in n:
        row = table.loc[token]
        assert row["n"] == n[token]
        assert row["received_mean"] == pytest.approx(total[token] / (n[token] * L * H), abs=1e-5)
        over = row["sink_frac"] * n[token] * L * H
        assert over_lo[token] - 1e-6 <= over <= over_hi[token] + 1e-6
    assert table["sink_frac"].max() > 0
