"""The lab model's attention variants on hand-set weights, against loops written from their definitions."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.tiny_transformer import (
    ATTENTIONS,
    CausalSelfAttention,
    TinyTransformer,
    TinyTransformerConfig,
    rope,
)

# Hand-set 2-d weights, one head: q = z Wq, k = z Wk, v = z Wv, out = y Wo (row vectors).
WQ = np.array([[1.0, 0.5], [-0.5, 2.0]])
WK = np.array([[0.3, -1.0], [1.5, 0.2]])
WV = np.array([[2.0, 0.0], [1.0, -1.0]])
WO = np.array([[0.5, 1.0], [0.0, 1.0]])
Z = np.array([[1.0, 0.0], [0.5, -1.0], [-1.0, 2.0], [0.3, 0.3]])
SINK_LOGIT = 0.7
GATE_W, GATE_B = np.array([1.0, -2.0]), 0.25
WG = np.array([[0.4, -1.2], [2.0, 0.1]])  # output_gate: the gate half of the query projection


def hand_set(kind: str) -> CausalSelfAttention:
    attn = CausalSelfAttention(TinyTransformerConfig(d_model=2, n_heads=1, attention=kind))
    with torch.no_grad():  # nn.Linear stores the transposed (out, in) matrix
        wq = np.concatenate([WQ, WG], axis=1) if kind == "output_gate" else WQ  # per head: [query, gate] columns
        for proj, w in ((attn.q_proj, wq), (attn.k_proj, WK), (attn.v_proj, WV), (attn.o_proj, WO)):
            proj.weight.copy_(torch.tensor(w.T, dtype=torch.float32))
        if attn.sink_logit is not None:
            attn.sink_logit.fill_(SINK_LOGIT)
        if attn.gate is not None:
            attn.gate.weight.copy_(torch.tensor(GATE_W[None], dtype=torch.float32))
            attn.gate.bias.fill_(GATE_B)
    return attn


def expected(kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Attention weights and outputs from the module doc's definitions, one query at a time."""
    t = len(Z)
    q, k, v = Z @ WQ, Z @ WK, Z @ WV
    weights, outputs = np.zeros((t, t)), np.zeros((t, 2))
    for i in range(t):
        logits = np.array([q[i] @ k[j] / math.sqrt(2) for j in range(i + 1)])
        if kind == "relu":
            row = np.maximum(logits, 0) / (i + 1)
        elif kind == "softmax_sink":
            row = np.exp(logits) / (np.exp(SINK_LOGIT) + np.exp(logits).sum())
        elif kind == "softmax1":
            row = np.exp(logits) / (1 + np.exp(logits).sum())
        elif kind == "sigmoid":
            row = 1 / (1 + np.exp(-(logits - math.log(t))))
        elif kind == "softpick":
            row = np.maximum(np.exp(logits) - 1, 0) / (np.abs(np.exp(logits) - 1).sum() + 1e-6)
        else:
            row = np.exp(logits) / np.exp(logits).sum()
        weights[i, : i + 1] = row
        y = row @ v[: i + 1]
        if kind == "sigmoid_gate":
            y = y / (1 + np.exp(-(Z[i] @ GATE_W + GATE_B)))
        if kind == "output_gate":
            y = y / (1 + np.exp(-(Z[i] @ WG)))
        outputs[i] = y @ WO
    return weights, outputs


@pytest.mark.parametrize("kind", ATTENTIONS)
def test_attention_variant_matches_definition(kind: str) -> None:
    out, probs, _, gates = hand_set(kind)(torch.tensor(Z[None], dtype=torch.float32))
    weights, outputs = expected(kind)
    np.testing.assert_allclose(probs[0, 0].detach().numpy(), weights, atol=1e-6)
    np.testing.assert_allclose(out[0].detach().numpy(), outputs, atol=1e-5)
    assert (gates is not None) == (kind in ("sigmoid_gate", "output_gate"))


def test_sink_logit_rows_sum_below_one() -> None:
    _, probs, _, _ = hand_set("softmax_sink")(torch.tensor(Z[None], dtype=torch.float32))
    sums = probs[0, 0].sum(-1).detach()
    assert (sums < 1).all() and (sums > 0).all()


def test_w_qk_reproduces_the_logits_of_every_head() -> None:
    torch.manual_seed(0)
    attn = CausalSelfAttention(TinyTransformerConfig(d_model=8, n_heads=2))
    z = torch.randn(1, 5, 8)
    _, probs, _, _ = attn(z)
    w = attn.w_qk().detach()  # (H, d, d)
    for h in range(2):
        logits = z[0] @ w[h] @ z[0].T  # l_ij = z_i W_QK z_jᵀ
        manual = torch.softmax(logits.masked_fill(torch.ones(5, 5).triu(1).bool(), -math.inf), dim=-1)
        torch.testing.assert_close(probs[0, h].detach(), manual, atol=1e-5, rtol=1e-4)


def test_rope_dot_products_depend_on_offset_only() -> None:
    torch.manual_seed(1)
    q, k = torch.randn(4), torch.randn(4)
    x_q, x_k = q.expand(1, 1, 10, 4), k.expand(1, 1, 10, 4)
    rq, rk = rope(x_q.contiguous())[0, 0], rope(x_k.contiguous())[0, 0]
    assert torch.allclose(rq[5] @ rk[3], rq[7] @ rk[5], atol=1e-5)
    assert torch.allclose(rq[4] @ rk[4], q @ k, atol=1e-5)


@pytest.mark.parametrize("positional", ["learned", "rope", "none"])
@pytest.mark.parametrize("norm_position,norm", [("pre", "layernorm"), ("post", "rmsnorm")])
@pytest.mark.parametrize("kind", ATTENTIONS)
def test_model_is_causal(positional: str, norm_position: str, norm: str, kind: str) -> None:
    torch.manual_seed(2)
    cfg = TinyTransformerConfig(
        n_layers=2, n_heads=2, d_model=16, positional=positional, norm_position=norm_position, norm=norm,
        attention=kind, mlp=kind != "relu",
    )
    model = TinyTransformer(cfg, vocab_in=11, vocab_out=10, max_len=12)
    ids = torch.randint(0, 11, (2, 12))
    changed = ids.clone()
    changed[:, 8:] = (ids[:, 8:] + 1) % 11
    before, traces = model(ids)
    after, _ = model(changed)
    torch.testing.assert_close(before[:, :8], after[:, :8])
    assert not torch.allclose(before[:, 8:], after[:, 8:])
    assert len(traces) == 2 and traces[0].probs.shape == (2, 2, 12, 12)


@pytest.mark.parametrize("bad", [{"attention": "linear"}, {"d_model": 10, "n_heads": 3}, {"norm": "batch"}])
def test_config_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(SinkscopeError):
        TinyTransformerConfig(**bad)


def _weights(model: TinyTransformer, kind: type) -> list[torch.Tensor]:
    return [m.weight.detach().flatten() for m in model.modules() if isinstance(m, kind)]


def _ks(sample: torch.Tensor, dist: str, args: tuple[float, ...]) -> float:
    """KS p-value against scipy's `dist(*args)`, passed as a frozen cdf: `kstest(x, name, args=...)` raises in
    SciPy 1.18 (its array-API path hands `args` to `ndtr`)."""
    from scipy import stats

    return stats.kstest(sample.double().numpy(), getattr(stats, dist)(*args).cdf).pvalue


@pytest.mark.parametrize("init,linear_std,embedding_std", [("gpt2", 0.02, 0.02), ("scaled", 0.3, 1.5)])
def test_normal_inits_draw_the_stated_normals(init: str, linear_std: float, embedding_std: float) -> None:
    extra = {"init_std": linear_std, "embedding_init_std": embedding_std} if init == "scaled" else {}
    torch.manual_seed(0)
    cfg = TinyTransformerConfig(n_layers=2, d_model=32, attention="sigmoid_gate", init=init, **extra)
    model = TinyTransformer(cfg, vocab_in=65, vocab_out=64, max_len=33)
    linear, embedding = torch.cat(_weights(model, torch.nn.Linear)), torch.cat(_weights(model, torch.nn.Embedding))
    # KS against the closed-form normal cdf, and the sample std within 3 standard errors of the stated one
    assert _ks(linear, "norm", (0.0, linear_std)) > 1e-3 and _ks(embedding, "norm", (0.0, embedding_std)) > 1e-3
    for sample, std in ((linear, linear_std), (embedding, embedding_std)):
        assert abs(float(sample.std()) - std) < 3 * std / math.sqrt(2 * sample.numel())
    gate_bias = model.blocks[0].attn.gate.bias
    assert torch.equal(gate_bias, torch.zeros_like(gate_bias))


def test_torch_init_keeps_pytorch_defaults() -> None:
    torch.manual_seed(0)
    cfg = TinyTransformerConfig(n_layers=2, d_model=32, attention="sigmoid_gate", init="torch")
    model = TinyTransformer(cfg, vocab_in=65, vocab_out=64, max_len=33)
    embedding = torch.cat(_weights(model, torch.nn.Embedding))
    assert _ks(embedding, "norm", (0.0, 1.0)) > 1e-3  # Embedding: N(0, 1)
    for module in (m for m in model.modules() if isinstance(m, torch.nn.Linear)):
        bound = 1 / math.sqrt(module.in_features)  # Linear: U(±1/√fan_in), weight and bias
        sample = module.weight.detach().flatten()
        if sample.numel() >= 500:
            assert _ks(sample, "uniform", (-bound, 2 * bound)) > 1e-3
        assert float(sample.abs().max()) <= bound
        if module.bias is not None:
            bias = module.bias.detach().abs()
            assert float(bias.max()) <= bound and float(bias.max()) > 0
    norm = model.blocks[0].norm1.weight
    assert torch.equal(norm, torch.ones_like(norm))


def test_init_stds_need_the_scaled_init() -> None:
    with pytest.raises(SinkscopeError, match="init=scaled"):
        TinyTransformerConfig(init="torch", init_std=0.1)
    with pytest.raises(SinkscopeError, match="positive"):
        TinyTransformerConfig(init="scaled", embedding_init_std=0.0)
    with pytest.raises(SinkscopeError, match="init="):
        TinyTransformerConfig(init="xavier")
