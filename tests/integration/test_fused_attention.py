"""The fused attention path (no T×T map) gives the statistics of eager attention maps, as the blocked path does.

First the kernel-level identities of `fused_attention` against float64 softmax maps (GQA, sharp and flat logits),
then whole analyses of tiny random models of every family, each through its default routing (fused where
eligible) and with the fused path switched off, both against `output_attentions=True` of the same model.
"""

import pandas as pd
import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

import sinkscope.capture.attention as attention
from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import COMMON, T, build, census_reference, reference, token_windows


def softmax_maps(q: torch.Tensor, k: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal softmax maps (B, H, T, T) in float64, GQA keys repeated per group."""
    k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    logits = scale * q.double() @ k.double().transpose(-1, -2)
    n = q.shape[2]
    return logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)


@pytest.mark.parametrize("kv", [4, 2, 1])
@pytest.mark.parametrize("sharpness", [1.0, 12.0])
def test_fused_attention_equals_softmax_maps(kv, sharpness):
    g = torch.Generator().manual_seed(kv)
    B, H, n, D = 2, 4, 37, 16
    q = torch.randn(B, H, n, D, generator=g) * sharpness
    k = torch.randn(B, kv, n, D, generator=g)
    k[:, :, 0] *= 3  # a key that draws attention, as BOS does
    v = torch.randn(B, kv, n, D, generator=g)
    scale = D**-0.5
    out, rows = attention.fused_attention(q, k, v, scale)
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


FAMILIES = {  # name -> layers expected on the fused path (of 3)
    "llama": 3, "mistral": 3, "qwen2": 3, "gpt2": 3,
    "gemma3": 1,  # its two sliding-window layers (window 5 < T) take the blocked path (HF Gemma-3 never softcaps)
    "gemma3-wide": 3,
}  # fmt: skip


def run_both_paths(lm: LoadedModel, ids: torch.Tensor, config: AnalyzeConfig, monkeypatch):
    """The analysis by the default routing (with the short-window block-path rule off, so these short windows take
    the fused path wherever it is exact) and with the fused path switched off; fused layer calls counted."""
    calls = []
    fused = attention.fused_attention
    with monkeypatch.context() as patch:
        patch.setattr(attention, "BLOCKED_UP_TO_SEQ_LEN", 0)
        patch.setattr(attention, "fused_attention", lambda *a: calls.append(1) or fused(*a))
        default = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    with monkeypatch.context() as patch:
        patch.setattr(attention, "fused_eligible", lambda *a: False)
        blocked = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    return default, blocked, len(calls)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_fused_and_blocked_paths_equal_eager_maps(name, monkeypatch):
    lm = gemma3_wide() if name == "gemma3-wide" else build(name, attn="sdpa")
    ids = token_windows()
    epsilon = 0.25
    config = AnalyzeConfig(epsilon=epsilon, delta=0.5, geometry_cap=0)
    default, blocked, fused_calls = run_both_paths(lm, ids, config, monkeypatch)
    assert fused_calls == FAMILIES[name] * 3  # layers × batches (10 windows in batches of 4)
    ref, _ = reference(lm, ids, config.delta, config.tau)
    att = torch.stack(lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions).double()
    L, N, H = att.shape[:3]
    head_rate, position_rate, tokens = census_reference(att, ids, epsilon)
    ref["sink_rate"] = head_rate
    ref["mlp_like"] = ((att[..., 1:, 0] >= 1 - config.delta) | (att.diagonal(dim1=-2, dim2=-1)[..., 1:]
                                                                 >= 1 - config.delta)).all(2).double().mean((1, 2))
    key_scores = torch.stack([att[..., k:, k].sum(-1) / (T - k) for k in range(T)], -1).mean((1, 2))  # (L, T)
    for path, run in (("default", default), ("blocked", blocked)):
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
    numeric = default.heads.select_dtypes("number").columns
    pd.testing.assert_frame_equal(default.heads[numeric], blocked.heads[numeric], atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_takes_the_blocked_path_and_equals_the_cpu_run():
    ids = token_windows(4)
    config = AnalyzeConfig(geometry_cap=0)
    cpu = analyze(build("llama", attn="sdpa"), TokenWindows(ids), config, progress=False)
    lm = build("llama", attn="sdpa")
    lm.model.to("cuda")
    gpu = analyze(lm, TokenWindows(ids), config, progress=False)
    numeric = cpu.heads.select_dtypes("number").columns
    pd.testing.assert_frame_equal(cpu.heads[numeric], gpu.heads[numeric], atol=1e-5, rtol=1e-5)


def test_windows_up_to_the_threshold_take_the_block_path():
    """Exact fused attention is taken only for windows longer than BLOCKED_UP_TO_SEQ_LEN tokens."""
    limit = attention.BLOCKED_UP_TO_SEQ_LEN
    for length, expected in ((limit, False), (limit + 1, True)):
        q = torch.zeros(1, 2, length, 8)
        assert attention.fused_eligible(q, q, None, None) is expected
    assert not attention.fused_eligible(torch.zeros(1, 2, limit + 1, 8), torch.zeros(1, 2, limit + 1, 4), None, None)
