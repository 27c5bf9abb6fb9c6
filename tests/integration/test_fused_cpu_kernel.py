"""The compiled rows kernel (`capture.fused_cpu`) against float64 softmax maps, its fallback, and the path it names.

The kernel computes each block of query rows' logits, softmax, column sums, entropy and output in one pass; here every
field it returns is compared with a float64 map built by plain torch operations (GQA, the transformers layout's
strides, sharp rows, head sizes that differ between q and v, lengths that are not multiples of the block). Without a
compiler it must fall back to the rows path with the same numbers, and an analysis names the path that ran.
"""

import pytest
import torch

import sinkscope.capture.attention as attention
import sinkscope.capture.fused_cpu as fused_cpu
from sinkscope.corpus.windows import TokenWindows
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import build, token_windows

pytestmark = pytest.mark.skipif(not fused_cpu.available(), reason=f"no compiled kernel: {fused_cpu.why_unavailable()}")


def float64_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> dict[str, torch.Tensor]:
    """Causal attention in float64 from the whole map: output (B, T, H, Dv), lse, entropy sum, columns, the three
    entries and the output norms (B, H, T); query head h reads kv head h // (H // KV)."""
    group = q.shape[1] // k.shape[1]
    logits = scale * q.double() @ k.double().repeat_interleave(group, 1).transpose(-1, -2)
    n = q.shape[2]
    logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    A = logits.softmax(-1)
    out = A @ v.double().repeat_interleave(group, 1)
    t = torch.arange(n)
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    prev = torch.zeros_like(A[..., 0])
    prev[..., 1:] = A[..., t[1:], t[:-1]]
    return {
        "out": out.transpose(1, 2),
        "lse": logits.logsumexp(-1),
        "entropy": (-plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()).sum(-1),
        "columns": A.sum(-2),
        "sink": A[..., 0],
        "diag": A[..., t, t],
        "prev": prev,
        "out_norms": out.norm(dim=-1),
        "row_max": A.amax(-1),
    }


@pytest.mark.parametrize("T", [1, 31, 77, 200])
@pytest.mark.parametrize("kv", [6, 2, 1])
@pytest.mark.parametrize("sharpness", [1.0, 15.0])
def test_kernel_equals_float64_maps(T, kv, sharpness):
    g = torch.Generator().manual_seed(T * 10 + kv)
    B, H, D, Dv = 2, 6, 24, 20
    # transformers' layout: (B, T, heads, d) viewed as (B, heads, T, d), so the rows are strided
    q = torch.randn(B, T, H, D, generator=g).transpose(1, 2) * sharpness
    k = torch.randn(B, T, kv, D, generator=g).transpose(1, 2)
    k[:, :, 0] *= 3  # a key that draws attention, as BOS does
    v = torch.randn(B, T, kv, Dv, generator=g).transpose(1, 2)
    scale = D**-0.5
    out, rows, lse = fused_cpu.compiled_parts(q, k, v, scale)
    expected = float64_reference(q, k, v, scale)
    close = dict(atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out.double(), expected["out"], **close)
    torch.testing.assert_close(lse.double(), expected["lse"], **close)
    torch.testing.assert_close(rows.columns, expected["columns"], **close)
    torch.testing.assert_close(rows.entropy, expected["entropy"], atol=1e-5 * T, rtol=1e-5)
    for name in ("sink", "diag", "prev", "out_norms"):  # row_max is the test's own
        torch.testing.assert_close(getattr(rows, name).double(), expected[name], **close)
    assert rows.columns.dtype == rows.entropy.dtype == torch.float64
    if sharpness > 1 and T > 1:
        assert (expected["row_max"][..., 1:] > 0.99).any(), "no near-one-hot row: the cancellation case was not run"


def test_kernel_block_edges_and_a_long_window():
    """T = 3·ROWS_PER_BLOCK + 5: the last block is short, and a query's keys span every earlier block."""
    g = torch.Generator().manual_seed(7)
    T = 3 * fused_cpu.ROWS_PER_BLOCK + 5
    q, k, v = (torch.randn(1, h, T, 64, generator=g) for h in (9, 3, 3))
    out, rows, lse = fused_cpu.compiled_parts(q, k, v, 0.125)
    expected = float64_reference(q, k, v, 0.125)
    torch.testing.assert_close(rows.columns, expected["columns"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.entropy, expected["entropy"], atol=1e-5 * T, rtol=1e-5)
    torch.testing.assert_close(out.double(), expected["out"], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), expected["lse"], atol=1e-5, rtol=1e-5)


def test_a_nan_logit_reaches_the_output_and_the_readout():
    """A NaN key (say from NaN weights) must not turn into a finite probability in the rows that see it: the feed's
    non-finite check reads the output norms and the entropy. One NaN logit per row, inside the 8-lane sweeps."""
    g = torch.Generator().manual_seed(3)
    q, k, v = torch.randn(1, 2, 40, 16, generator=g), torch.randn(1, 2, 40, 16, generator=g), torch.randn(1, 2, 40, 16, generator=g)
    k[0, 1, 5, 3] = float("nan")  # key 5 of head 1: one NaN logit in each of its rows t ≥ 5
    out, rows, _ = fused_cpu.compiled_parts(q, k, v, 0.25)
    assert out[0, 5:, 1].isnan().all() and rows.out_norms[0, 1, 5:].isnan().all() and rows.entropy[0, 1].isnan()
    assert not out[0, :5, 1].isnan().any() and not out[0, :, 0].isnan().any()  # the rows before it, the other head


def test_routing_takes_the_compiled_kernel_for_plain_causal_cpu_attention_only():
    q, v = torch.zeros(1, 2, 8, 4), torch.zeros(1, 1, 8, 4)
    assert attention.attention_path(q, v, None, None) == "compiled"
    assert attention.attention_path(q, v, torch.ones(1, 1, 8, 8, dtype=torch.bool), None) == "blocks"
    assert attention.attention_path(q, v, None, 30.0) == "blocks"


def test_without_a_compiler_the_rows_path_runs_and_the_run_says_so(monkeypatch, tmp_path):
    lm = build("llama", attn="sdpa")
    ids = token_windows()
    config = AnalyzeConfig(epsilon=0.25, delta=0.5, geometry_cap=0)
    compiled = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    layers = len(lm.layers)
    assert compiled.meta["timings"]["attention_paths"] == {"compiled": layers * 3}  # 10 windows in batches of 4
    assert compiled.meta["timings"]["compiled_kernel"] == "available"
    monkeypatch.setenv("CXX", "no-such-compiler")
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path))  # no library built before
    fused_cpu._kernel.cache_clear()
    try:
        assert not fused_cpu.available()
        assert attention.attention_path(torch.zeros(1, 2, 8, 4), torch.zeros(1, 1, 8, 4), None, None) == "rows"
        fallback = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    finally:
        fused_cpu._kernel.cache_clear()
    assert fallback.meta["timings"]["attention_paths"] == {"rows": layers * 3}
    assert "no-such-compiler" in fallback.meta["timings"]["compiled_kernel"]
    numeric = compiled.heads.select_dtypes("number").columns
    torch.testing.assert_close(torch.tensor(fallback.heads[numeric].to_numpy(dtype=float)),
                               torch.tensor(compiled.heads[numeric].to_numpy(dtype=float)), atol=1e-5, rtol=1e-5,
                               equal_nan=True)  # undefined head statistics are NaN in both
