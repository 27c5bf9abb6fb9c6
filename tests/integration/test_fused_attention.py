"""The rows and fused attention paths (no T×T map) give the statistics of eager attention maps, as the block path does.

First the kernel-level identities of `row_attention` and `fused_attention` against float64 softmax maps (GQA,
sharp and flat logits), then whole analyses of tiny random models of every family through each of the three
paths — the default routing (rows where eligible), the fused path forced, the block path forced — all against
`output_attentions=True` of the same model.
"""

import pandas as pd
import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import sinkscope.capture.attention as attention
import sinkscope.capture.blocks as blocks
from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import COMMON, T, build, census_reference, reference, token_windows


def softmax_maps(q: torch.Tensor, k: torch.Tensor, scale: float, window: int | None = None) -> torch.Tensor:
    """Causal softmax maps (B, H, T, T) in float64, GQA keys repeated per group; with `window`, query t sees only
    keys t − window < j ≤ t."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    logits = scale * q.double() @ k.double().transpose(-1, -2)
    n = q.shape[2]
    hidden = torch.ones(n, n, dtype=torch.bool).triu(1)
    if window is not None:
        hidden |= torch.ones(n, n, dtype=torch.bool).tril(-window)
    return logits.masked_fill(hidden, float("-inf")).softmax(-1)


@pytest.mark.parametrize("path", ["row_attention", "fused_attention"])
@pytest.mark.parametrize("kv", [4, 2, 1])
@pytest.mark.parametrize("sharpness", [1.0, 12.0])
def test_layer_rows_equal_softmax_maps(path, kv, sharpness):
    g = torch.Generator().manual_seed(kv)
    B, H, n, D = 2, 4, 37, 16
    q = torch.randn(B, H, n, D, generator=g) * sharpness
    k = torch.randn(B, kv, n, D, generator=g)
    k[:, :, 0] *= 3  # a key that draws attention, as BOS does
    v = torch.randn(B, kv, n, D, generator=g)
    scale = D**-0.5
    out, rows = getattr(attention, path)(q, k, v, scale)
    A = softmax_maps(q, k, scale)
    t = torch.arange(n)
    expected_out = A @ v.double().repeat_interleave(H // kv, dim=1)
    torch.testing.assert_close(out.double(), expected_out.transpose(1, 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.out_norms.double(), expected_out.norm(dim=-1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.sink.double(), A[..., 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.diag.double(), A[..., t, t], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.prev.double()[..., 1:], A[..., t[1:], t[:-1]], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.columns, A.sum(-2), atol=1e-5, rtol=1e-5)
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    entropy = -plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()
    torch.testing.assert_close(rows.entropy, entropy.sum(-1), atol=1e-5 * n, rtol=1e-5)
    if sharpness > 1:
        assert (A[..., 1:, :].amax(-1) > 0.99).any(), "no near-one-hot row: the cancellation case was not exercised"


def test_the_rows_path_takes_at_least_56_queries_per_block_on_the_cpu_within_4x_its_budget(monkeypatch):
    """Long windows on the CPU: 56 query rows per block where the element budget gives fewer (SmolLM2's 9 heads:
    28 at T = 4096, 14 at 8192), the budget's own count where it gives more, within 4× the budget (a batch of 64 at
    T = 1024: 7 rows) and a quarter of the window; the device's budget alone on an accelerator. Blocks so cut give
    the float64 maps' rows."""
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert [blocks.row_block_rows(B, 9, n, cpu) for B, n in ((1, 4096), (1, 8192), (2, 1024), (8, 256))] == [56] * 4
    assert blocks.row_block_rows(1, 9, 1024, cpu) == 113 and blocks.row_block_rows(64, 9, 1024, cpu) == 7
    assert blocks.row_block_rows(1, 9, 4096, cuda) == 1820
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", 2 * 3 * 60 * 10)  # 10 rows per block; at least min(56, 15, 40)
    assert blocks.row_block_rows(2, 3, 60, cpu) == 15
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(2, 3, 60, 8, generator=g) * 3, torch.randn(2, 1, 60, 8, generator=g), torch.randn(2, 1, 60, 8, generator=g)
    out, rows = attention.row_attention(q, k, v, 0.5)
    A, t = softmax_maps(q, k, 0.5), torch.arange(60)
    torch.testing.assert_close(out.double(), (A @ v.double().expand(2, 3, 60, 8)).transpose(1, 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.columns, A.sum(-2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rows.prev.double()[..., 1:], A[..., t[1:], t[:-1]], atol=1e-5, rtol=1e-5)
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    entropy = (-plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()).sum(-1)
    torch.testing.assert_close(rows.entropy, entropy, atol=1e-5 * 60, rtol=1e-5)


def test_row_attention_takes_logsumexp_where_neither_candidate_key_holds_mass(monkeypatch):
    """Rows whose mass sits on a middle key (A[t,0] and A[t,t] below 1e-30) need lse from logsumexp, not from
    `S[t,j] − log P[t,j]`; the entropy is still exact, and the branch is taken."""
    g = torch.Generator().manual_seed(5)
    B, H, n, D = 1, 2, 24, 8
    k = torch.randn(B, 1, n, D, generator=g)
    k[:, :, 7] *= 3
    q = torch.randn(B, H, n, D, generator=g) * 0.1
    q[:, :, 8:] += 60 * k[:, :, 7:8] / k[:, :, 7:8].norm(dim=-1, keepdim=True)  # rows t ≥ 8 attend to key 7
    v = torch.randn(B, 1, n, D, generator=g)
    calls = []
    logsumexp = torch.logsumexp
    monkeypatch.setattr(torch, "logsumexp", lambda *a, **kw: calls.append(1) or logsumexp(*a, **kw))
    out, rows = blocks.row_attention(q, k, v, D**-0.5)
    A = softmax_maps(q, k, D**-0.5)
    t = torch.arange(n)
    assert calls and (A[..., 8:, 0].amax() < 1e-30) and (A[..., t[8:], t[8:]].amax() < 1e-30)
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    entropy = -plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()
    torch.testing.assert_close(rows.entropy, entropy.sum(-1), atol=1e-5 * n, rtol=1e-5)
    torch.testing.assert_close(rows.columns, A.sum(-2), atol=1e-5, rtol=1e-5)


def gemma3_wide() -> LoadedModel:
    """Gemma-3 with a sliding window longer than the windows analysed and no softcap: every layer is fused."""
    torch.manual_seed(0)
    config = Gemma3TextConfig(**COMMON, num_key_value_heads=1, head_dim=16, sliding_window=64,
                              layer_types=["sliding_attention", "full_attention", "sliding_attention"])
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():
        for module in model.modules():
            for attr in ("q_proj", "k_proj"):
                if hasattr(module, attr):
                    getattr(module, attr).weight.mul_(6.0)
    model.set_attn_implementation("sdpa")
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("gemma3_text"), identity={"name": "gemma3-wide"})


FAMILIES = {  # name -> layers expected on the rows path by default and on the fused path when forced (of 3)
    "llama": 3, "mistral": 3, "qwen2": 3, "gpt2": 3,
    "gemma3": 1,  # its two sliding-window layers (window 5 < T) take the block path (HF Gemma-3 never softcaps)
    "gemma3-wide": 3,
}  # fmt: skip


def run_three_paths(lm: LoadedModel, ids: torch.Tensor, config: AnalyzeConfig, monkeypatch):
    """The analysis by the default routing (the compiled kernel wherever it is exact), then without the compiled kernel
    (these short windows take the rows path), with the fused path forced (`ROWS_UP_TO_SEQ_LEN` 0), with CUDA's flex
    path forced (eager flex_attention on the CPU) and with the block path forced; layer calls of each path counted."""
    calls = {"compiled_attention": 0, "row_attention": 0, "fused_attention": 0, "flex_parts": 0}
    runs = {}
    with monkeypatch.context() as patch:
        compiled = attention.fused_cpu.compiled_attention
        patch.setattr(attention.fused_cpu, "compiled_attention",
                      lambda *a: calls.__setitem__("compiled_attention", calls["compiled_attention"] + 1) or compiled(*a))
        runs["compiled"] = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    for path, limit in (("default", attention.ROWS_UP_TO_SEQ_LEN), ("fused", 0)):
        with monkeypatch.context() as patch:
            patch.setattr(attention.fused_cpu, "available", lambda: False)
            patch.setattr(attention, "ROWS_UP_TO_SEQ_LEN", limit)
            for name in ("row_attention", "fused_attention"):
                original = getattr(attention, name)
                patch.setattr(attention, name, lambda *a, _n=name, _f=original: calls.__setitem__(_n, calls[_n] + 1)
                              or _f(*a))
            runs[path] = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(attention, "_flex_here", lambda query: True)  # CUDA's routing
        flex_parts = attention.flex.flex_parts
        patch.setattr(attention.flex, "flex_parts",
                      lambda *a, **kw: calls.__setitem__("flex_parts", calls["flex_parts"] + 1) or flex_parts(*a, **kw))
        runs["flex"] = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(attention, "attention_path", lambda *a: "blocks")
        runs["blocked"] = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    return runs, calls


@pytest.mark.parametrize("name", list(FAMILIES))
def test_rows_fused_and_block_paths_equal_eager_maps(name, monkeypatch):
    lm = gemma3_wide() if name == "gemma3-wide" else build(name, attn="sdpa")
    ids = token_windows()
    epsilon = 0.25
    config = AnalyzeConfig(epsilon=epsilon, delta=0.5, geometry_cap=0)
    runs, calls = run_three_paths(lm, ids, config, monkeypatch)
    # layers × batches (10 windows in batches of 4), once by default (rows) and once forced (fused, flex)
    flex_layers = 3 if name == "gemma3" else FAMILIES[name]  # the flex path takes Gemma-3's sliding layers too
    compiled_layers = FAMILIES[name] if attention.fused_cpu.available() else 0
    assert calls == {"compiled_attention": compiled_layers * 3, "row_attention": FAMILIES[name] * 3,
                     "fused_attention": FAMILIES[name] * 3, "flex_parts": flex_layers * 3}
    ref, _ = reference(lm, ids, config.delta, config.tau)
    att = torch.stack(lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions).double()
    L, N, H = att.shape[:3]
    head_rate, position_rate, tokens = census_reference(att, ids, epsilon)
    ref["sink_rate"] = head_rate
    ref["mlp_like"] = ((att[..., 1:, 0] >= 1 - config.delta) | (att.diagonal(dim1=-2, dim2=-1)[..., 1:]
                                                                 >= 1 - config.delta)).all(2).double().mean((1, 2))
    key_scores = torch.stack([att[..., k:, k].sum(-1) / (T - k) for k in range(T)], -1).mean((1, 2))  # (L, T)
    for path, run in runs.items():
        heads = run.heads.sort_values(["layer", "head"])
        for column, expected in ref.items():
            if column == "mlp_like":
                got = torch.tensor(run.layers["mlp_like_frac"].to_numpy())
            else:
                got = torch.tensor(heads[column].to_numpy()).view_as(expected)
            torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=f"{name} {path}: {column}")
        positions = run.positions.sort_values(["layer", "position"])
        torch.testing.assert_close(torch.tensor(positions["sink_rate"].to_numpy()).view(L, T), position_rate)
        torch.testing.assert_close(torch.tensor(positions["mean_key_score"].to_numpy()).view(L, T),
                                   key_scores, atol=1e-5, rtol=1e-5)
        table = run.extra["tokens"].set_index("token_id")
        for token_id, entry in tokens.items():
            row = table.loc[token_id]
            assert row["received_mean"] == pytest.approx(entry["sum"].sum().item() / (entry["n"] * L * H), abs=1e-5)
            assert row["sink_frac"] == pytest.approx(entry["over"].sum().item() / (entry["n"] * L * H), abs=1e-12)
    assert ref["hard_sink_frac"].max() > 0  # the thresholds were exercised (ε on tokens too, but by Gemma's QK-norm)
    assert table["sink_frac"].max() > 0 or name == "gemma3-wide"
    numeric = runs["default"].heads.select_dtypes("number").columns
    for path in ("compiled", "fused", "flex", "blocked"):
        pd.testing.assert_frame_equal(runs["default"].heads[numeric], runs[path].heads[numeric], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("path", ["flex", "rows", "blocks"])
def test_cuda_paths_equal_the_cpu_run(path, monkeypatch):
    """On CUDA the compiled flex path (the default there), the rows path and the block path (device-sized blocks)
    each give the CPU run's tables; geometry included, whose sample is gathered on the device."""
    ids = token_windows(4)
    config = AnalyzeConfig(geometry_cap=16)
    cpu = analyze(build("llama", attn="sdpa"), TokenWindows(ids), config, progress=False)
    lm = build("llama", attn="sdpa")
    lm.model.to("cuda")
    taken = []
    route = attention.attention_path
    monkeypatch.setattr(attention, "attention_path", lambda *a: taken.append(route(*a)) or path)
    gpu = analyze(lm, TokenWindows(ids), config, progress=False)
    assert set(taken) == {"flex"} and not attention._flex_failed
    for table in ("heads", "layers"):
        numeric = getattr(cpu, table).select_dtypes("number").columns
        pd.testing.assert_frame_equal(getattr(cpu, table)[numeric], getattr(gpu, table)[numeric], atol=1e-5,
                                      rtol=1e-4)


def test_routing_rows_up_to_the_threshold_then_fused_where_exact(monkeypatch):
    """Without the compiled kernel, plain causal windows take the rows path up to ROWS_UP_TO_SEQ_LEN tokens, then the
    fused path where the flash kernel is exact (equal q/v head sizes); masks and softcaps take the block path."""
    monkeypatch.setattr(attention.fused_cpu, "available", lambda: False)
    limit = attention.ROWS_UP_TO_SEQ_LEN
    route = attention.attention_path
    for length, expected in ((limit, "rows"), (limit + 1, "fused")):
        q = torch.zeros(1, 1, length, 8)
        assert route(q, q, None, None) == expected
    q = torch.zeros(1, 1, limit + 1, 8)
    assert route(q, torch.zeros(1, 1, limit + 1, 4), None, None) == "rows"  # unequal head sizes: no flash kernel
    assert route(q[..., :16, :], q[..., :16, :], torch.ones(1, 1, 16, 16, dtype=torch.bool), None) == "blocks"
    assert route(q[..., :16, :], q[..., :16, :], None, 30.0) == "blocks"


def test_routing_on_cuda_takes_the_flex_path_for_plain_causal_attention(monkeypatch):
    """On CUDA the flex path takes plain causal attention at every length, sliding windows, softcaps, boolean
    (padding) masks and additive masks (ALiBi); after a failed flex compilation the CPU's rule (device tensors
    stood in for by objects with a CUDA device)."""
    from types import SimpleNamespace

    def cuda(length: int) -> SimpleNamespace:
        return SimpleNamespace(shape=(1, 1, length, 8), device=torch.device("cuda", 0))

    route = attention.attention_path
    for length in (16, 1024, attention.ROWS_UP_TO_SEQ_LEN + 1, 32768):
        assert route(cuda(length), cuda(length), None, None) == "flex"
    boolean_mask = torch.ones(1, 1, 16, 16, dtype=torch.bool)
    assert route(cuda(16), cuda(16), boolean_mask, None) == "flex"
    assert route(cuda(16), cuda(16), None, 50.0) == "flex"
    assert route(cuda(16), cuda(16), boolean_mask, 50.0, 5) == "flex"
    assert route(cuda(16), cuda(16), boolean_mask, None, 5) == "flex"
    assert route(cuda(16), cuda(16), torch.zeros(1, 1, 16, 16), None) == "flex"  # additive: ALiBi
    monkeypatch.setattr(attention, "_flex_failed", True)
    assert route(cuda(16), cuda(16), torch.zeros(1, 1, 16, 16), None) == "blocks"
    assert route(cuda(32768), cuda(32768), None, None) == "rows"
    assert route(cuda(16), cuda(16), boolean_mask, None, 5) == "blocks"
    assert route(cuda(16), cuda(16), None, 50.0) == "blocks"


def test_padding_free_forwards_notes_whether_a_forward_pass_had_a_mask():
    lm = build("llama", attn="sdpa")
    ids = token_windows(2)
    seen = []
    lm.layers[0].register_forward_pre_hook(lambda *a: seen.append(attention._padding_free))
    with attention.padding_free_forwards(lm.base):
        lm.base(input_ids=ids, use_cache=False)
        lm.base(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
        lm.base(ids, torch.ones_like(ids), use_cache=False)
        lm.base(input_ids=ids, use_cache=False)
    assert seen == [True, False, False, True] and attention._padding_free is False

