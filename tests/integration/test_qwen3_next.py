"""Qwen3-Next (output-gated full attention beside linear-attention layers) on a tiny random model: `analyze` runs,
names its linear-attention layer as having no softmax map (NaN rows), measures the full-attention layer as the
model's own eager attention computes it, and the gate statistics equal σ of the gate half of the query
projection, counted by hand against the eager map's hard sinks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers as tf

from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import family_for, softmax_layers
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze
from sinkscope.statistics.output_gate import GATE_TAU

V, T, N, H, DH = 96, 11, 6, 4, 16
CONFIG = AnalyzeConfig(epsilon=0.25, delta=0.5, tau=0.3, geometry_cap=0)
GATE_BIAS = (-6.0, 0.0, 2.0, 6.0)  # per head: a gate closed everywhere, half open, mostly open, open


def tiny(attention: str = "sdpa") -> LoadedModel:
    torch.manual_seed(0)
    config = tf.Qwen3NextConfig(
        vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=H, num_key_value_heads=2, head_dim=DH,
        intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=32, num_experts=2,
        num_experts_per_tok=1, linear_num_value_heads=2, linear_num_key_heads=2, linear_key_head_dim=16,
        linear_value_head_dim=16, max_position_embeddings=64, pad_token_id=None, attention_bias=True,
        layer_types=["linear_attention", "full_attention"],
    )  # fmt: skip
    model = tf.Qwen3NextForCausalLM(config)
    with torch.no_grad():
        model.get_input_embeddings().weight[0].mul_(1e-3)
        attn = model.model.layers[1].self_attn
        attn.q_norm.weight.add_(3.0)  # sharper logits: some queries become hard sinks
        attn.k_norm.weight.add_(3.0)
        bias = attn.q_proj.bias.view(H, 2 * DH)
        bias[:, DH:] = torch.tensor(GATE_BIAS)[:, None]
    model.set_attn_implementation(attention)
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("qwen3_next", config), identity={"name": "q3n"})


def windows() -> torch.Tensor:
    ids = torch.randint(1, V, (N, T), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = 0
    return ids


@torch.no_grad()
def eager_reference(ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The full-attention layer's map (N, H, T, T) from the model's own eager attention, and its gates σ(g)
    (N, H, T, DH) from the attention input and the projection's weights."""
    lm = tiny("eager")
    attn = lm.model.model.layers[1].self_attn
    kept = {}
    handles = [attn.register_forward_hook(lambda _m, _a, out: kept.__setitem__("map", out[1])),
               attn.register_forward_pre_hook(lambda _m, _a, kw: kept.__setitem__("z", kw["hidden_states"]),
                                              with_kwargs=True)]  # fmt: skip
    lm.model(input_ids=ids)
    for handle in handles:
        handle.remove()
    projected = kept["z"].double() @ attn.q_proj.weight.double().T + attn.q_proj.bias.double()
    gates = torch.sigmoid(projected.view(N, T, H, 2 * DH)[..., DH:]).transpose(1, 2)
    return kept["map"].double(), gates


def test_qwen3_next_gate_and_linear_layers():
    lm = tiny()
    assert softmax_layers(lm.family, lm.layers) == [1]
    ids = windows()
    run = analyze(lm, TokenWindows(ids, batch_size=4), CONFIG, progress=False)
    assert list(run.layers["attention"]) == ["linear", "softmax"]
    linear, full = run.heads[run.heads["layer"] == 0], run.heads[run.heads["layer"] == 1].reset_index(drop=True)
    assert linear["sink_score"].isna().all() and linear["gate_mean"].isna().all()
    assert np.isfinite(run.layers.loc[0, ["bos_norm_ratio_h", "massive_max"]].astype(float)).all()  # residual: kept
    attn, gates = eager_reference(ids)
    np.testing.assert_allclose(full["sink_score"], attn[..., 0].mean((0, 2)).numpy(), atol=1e-5)
    gate = gates.mean(-1)[..., 1:]  # (N, H, T-1): queries t ≥ 1
    sink = attn[..., 1:, 0] >= 1 - CONFIG.delta
    off = gate <= GATE_TAU
    np.testing.assert_allclose(full["gate_mean"], gate.mean((0, 2)).numpy(), atol=1e-5)
    np.testing.assert_allclose(full["gate_off_frac"], off.double().mean((0, 2)).numpy())
    assert full["gate_off_frac"][0] == 1.0 and full["gate_off_frac"][3] == 0.0
    agreement = (off & sink).sum((0, 2)).double() / off.sum((0, 2)).double()
    np.testing.assert_allclose(full["gate_sink_agreement"], agreement.numpy(), equal_nan=True)
    assert 0 < sink.double().mean() < 1  # the map has hard sinks and queries that are not
    given_sink = (off & sink).sum((0, 2)).double() / sink.sum((0, 2)).double()
    np.testing.assert_allclose(full["gate_off_given_sink"], given_sink.numpy(), equal_nan=True)
    assert run.meta["summary"]["sink_rate"] == pytest.approx(float(full["sink_rate"].mean()))
