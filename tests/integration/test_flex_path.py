"""The flex path (what CUDA runs, compiled) on the CPU, where flex_attention runs eagerly: its `AttentionReadout` against
float64 softmax maps (GQA, sharp rows, keys with a large common part, a value head wider than the key head,
bfloat16 inputs), the fallback to the rows path when its kernels cannot run, the device block budget, and no
host read inside a forward pass on the accelerator paths. Whole analyses through the flex path against eager
maps, for every family, are in `test_fused_attention.py`.
"""

import inspect
from pathlib import Path

import pytest
import torch

import sinkscope
import sinkscope.capture.attention as attention
import sinkscope.capture.blocks as blocks
from sinkscope.capture import flex, flex_masks
from sinkscope.corpus.windows import TokenWindows
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import build, token_windows
from .test_fused_attention import softmax_maps


def expected_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
                  window: int | None = None) -> dict[str, torch.Tensor]:  # fmt: skip
    """Every `AttentionReadout` field from float64 maps of the same q, k, v (within a sliding window where given)."""
    A = softmax_maps(q, k, scale, window)
    n = q.shape[2]
    t = torch.arange(n)
    out = A @ v.double().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    entropy = (-plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()).sum(-1)
    prev = torch.cat([torch.zeros_like(A[..., :1, 0]), A[..., t[1:], t[:-1]]], -1)
    return dict(out=out, sink=A[..., 0], diag=A[..., t, t], prev=prev, columns=A.sum(-2), entropy=entropy,
                out_norms=out.norm(dim=-1), A=A)  # fmt: skip


@pytest.mark.parametrize("kv", [4, 2, 1])
@pytest.mark.parametrize("sharpness", [1.0, 12.0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_flex_rows_equal_float64_maps(kv, sharpness, dtype):
    g = torch.Generator().manual_seed(kv)
    B, H, n, D, Dv = 2, 4, 41, 16, 24
    q = (torch.randn(B, H, n, D, generator=g) * sharpness).to(dtype)
    k = torch.randn(B, kv, n, D, generator=g)
    k[:, :, 0] *= 3  # a key that draws attention, as BOS does
    k = (k + 10 / sharpness * torch.randn(D, generator=g)).to(dtype)  # a part common to every key (massive activations)
    v = torch.randn(B, kv, n, Dv, generator=g).to(dtype)
    scale = D**-0.5
    out, rows = flex.flex_rows(q, k, v, scale)
    ref = expected_rows(q, k, v, scale)  # from the same (possibly bfloat16) values, in float64
    assert out.dtype == dtype and out.shape == (B, n, H, Dv)
    out_tol = dict(atol=1e-4, rtol=1e-4) if dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)  # output rounding
    torch.testing.assert_close(out.double(), ref["out"].transpose(1, 2), **out_tol)
    for name in ("sink", "diag", "prev", "columns", "out_norms"):
        torch.testing.assert_close(getattr(rows, name).double(), ref[name], atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(rows.entropy, ref["entropy"], atol=1e-5 * n, rtol=1e-5)
    assert rows.columns.dtype == torch.float64 and rows.entropy.dtype == torch.float64
    if sharpness > 1:
        assert (ref["A"][..., 1:, :].amax(-1) > 0.99).any(), "no near-one-hot row: the cancellation case was not run"


def test_the_cuda_kernels_trace_into_whole_graphs_and_equal_eager_flex(monkeypatch):
    """What CUDA compiles: `_kernels("cuda")` with fullgraph=True (a graph break would fail), traced here with the
    "aot_eager" backend (the inductor CPU backend cannot return lse), over two shapes (the second compiles with
    dynamic shapes, as a run's smaller last batch does); results equal the eager calls."""
    monkeypatch.setattr(flex, "COMPILE_BACKEND", "aot_eager")
    forward, log_column_sums, _ = flex._kernels.__wrapped__("cuda")
    for B, n in ((1, 40), (2, 57)):
        g = torch.Generator().manual_seed(n)
        q = torch.randn(B, 4, n, 16, generator=g)
        k, v = torch.randn(B, 2, n, 16, generator=g), torch.randn(B, 2, n, 8, generator=g)
        causal, anti_causal = flex_masks._block_masks(n, "cpu")
        values = torch.cat([v, k], -1)
        out, lse = forward(q, k, values, 0.25, causal)
        expected_out, expected_lse = flex._forward(q, k, values, 0.25, causal)
        torch.testing.assert_close(out, expected_out)
        torch.testing.assert_close(lse, expected_lse)
        keys = k.repeat_interleave(2, 1)
        torch.testing.assert_close(log_column_sums(keys, q, lse, 0.25, anti_causal),
                                   flex._log_column_sums(keys, q, lse, 0.25, anti_causal))
    assert torch._dynamo.config.recompile_limit >= 64


def test_a_failed_flex_kernel_falls_back_to_the_rows_path_once_with_a_warning(monkeypatch):
    calls = []

    def broken(*args, **kwargs):
        calls.append(1)
        raise RuntimeError("no Triton here")

    monkeypatch.setattr(flex, "flex_parts", broken)
    monkeypatch.setattr(attention, "_flex_failed", False)
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 9, 8, generator=g) for _ in range(3))
    with pytest.warns(RuntimeWarning, match="flex_attention kernels unavailable .*no Triton here.*rows path"):
        out, rows = attention._layer_rows("flex", q, k, v, 8**-0.5)
    expected_out, expected_rows_ = blocks.row_attention(q, k, v, 8**-0.5)
    torch.testing.assert_close(out, expected_out)
    torch.testing.assert_close(rows.columns, expected_rows_.columns)
    assert attention._flex_failed and calls == [1]


def test_device_blocks_are_hundreds_of_rows_where_the_cpu_takes_one():
    """Issue 23's case: B = 64, H = 9, T = 1024 gave one query row per block on CUDA (1024 blocks per layer)."""
    assert blocks.block_rows(64, 9, 1024, blocks.block_elements(torch.device("cpu"))) == 1
    assert blocks.block_rows(64, 9, 1024, blocks.block_elements(torch.device("cuda", 0))) == 113
    assert blocks.block_rows(2, 9, 4096, blocks.block_elements(torch.device("cuda", 0))) == 910
    assert blocks.block_rows(1, 1, 64, blocks.block_elements(torch.device("cuda", 0))) == 64


SOURCE = Path(sinkscope.__file__).parent


@pytest.mark.parametrize("path", ["flex", "rows", "blocks"])
def test_no_host_read_inside_a_forward_pass_on_the_device_paths(path, monkeypatch):
    """A host read of a device value stalls an accelerator; none may happen in sinkscope's code during a forward
    pass (only in `end_batch`). The CPU stands in for the device: host reads are declared expensive, every
    `Tensor.__bool__`/`item`/`tolist`/`cpu`/`numpy` called from sinkscope's sources inside the forward is recorded,
    and the analysis must still equal the CPU's."""
    lm = build("llama", attn="sdpa")
    ids = token_windows(4)
    config = AnalyzeConfig(geometry_cap=8)
    expected = analyze(lm, TokenWindows(ids, batch_size=2), config, progress=False)
    reads, inside = [], []
    for name in ("__bool__", "item", "tolist", "cpu", "numpy"):
        original = getattr(torch.Tensor, name)

        def spy(self, *a, _name=name, _original=original, **kw):
            caller = Path(inspect.stack()[1].filename)
            if inside and SOURCE in caller.parents:
                reads.append(f"{_name} at {caller.name}:{inspect.stack()[1].lineno}")
            return _original(self, *a, **kw)

        monkeypatch.setattr(torch.Tensor, name, spy)
    monkeypatch.setattr(blocks, "host_reads_are_cheap", lambda device: False)
    route = attention.attention_path
    monkeypatch.setattr(attention, "attention_path", lambda *a: "blocks" if path == "blocks" else
                        ("flex" if route(*a) != "blocks" else "blocks"))  # fmt: skip
    lm.base.register_forward_pre_hook(lambda *a: inside.append(1))
    lm.base.register_forward_hook(lambda *a: inside.clear())
    got = analyze(lm, TokenWindows(ids, batch_size=2), config, progress=False)
    assert reads == []
    numeric = expected.heads.select_dtypes("number").columns
    import pandas as pd

    pd.testing.assert_frame_equal(expected.heads[numeric], got.heads[numeric], atol=1e-5, rtol=1e-5)
    pd.testing.assert_frame_equal(expected.layers, got.layers, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(("B", "H", "kv", "n", "D", "Dv", "window"),
                         [(2, 4, 2, 41, 16, 24, 5), (1, 3, 1, 37, 8, 8, 1), (3, 2, 2, 23, 16, 16, 2),
                          (2, 4, 1, 19, 16, 8, 18), (1, 2, 2, 13, 8, 8, 40)])  # fmt: skip
def test_flex_rows_with_a_sliding_window_equal_float64_maps(B, H, kv, n, D, Dv, window):
    """Gemma-2/3's local layers on the flex path: every `AttentionReadout` field and the output against float64 maps
    masked to the window, on uneven shapes (window 1: only the diagonal; a window as long as T: plain causal)."""
    g = torch.Generator().manual_seed(n)
    q = torch.randn(B, H, n, D, generator=g) * 4
    k = torch.randn(B, kv, n, D, generator=g) + torch.randn(D, generator=g)
    v = torch.randn(B, kv, n, Dv, generator=g)
    scale = D**-0.5
    out, rows = flex.flex_rows(q, k, v, scale, window)
    ref = expected_rows(q, k, v, scale, window)
    torch.testing.assert_close(out.double(), ref["out"].transpose(1, 2), atol=1e-4, rtol=1e-4)
    for name in ("sink", "diag", "prev", "columns", "out_norms"):
        torch.testing.assert_close(getattr(rows, name).double(), ref[name], atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(rows.entropy, ref["entropy"], atol=1e-5 * n, rtol=1e-5)
    if window < n:
        assert (rows.sink[..., window:] == 0).all() and (ref["A"][..., window:, 0] == 0).all()
