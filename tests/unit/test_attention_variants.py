"""The lab's newer attention variants against plain float64 implementations of their formulas, on random logits:
softmax1's rows sum to 1 − 1/(1 + Σ exp), sigmoid attention's to Σ σ(l − log n), softpick's to at most 1 and to 0
when every visible logit is ≤ 0 (also at logits that would overflow exp); Qwen3-Next's output gate equals σ of the
gate half of the query projection; the switch parameters' norms; the SPEC §3 switch with per-channel gates."""

from __future__ import annotations

import math

import pytest
import torch

from sinkscope.synthetic.measures import switch_off_frac
from sinkscope.synthetic.tiny_transformer import CausalSelfAttention, TinyTransformerConfig, attention_weights

T = 7


def logits(seed: int, scale: float = 2.0) -> torch.Tensor:
    return scale * torch.randn(2, 3, T, T, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def plain(kind: str, l: torch.Tensor) -> torch.Tensor:
    """The formula one row at a time over the visible keys j ≤ i, in float64."""
    out = torch.zeros_like(l)
    for b in range(l.shape[0]):
        for h in range(l.shape[1]):
            for i in range(T):
                x = l[b, h, i, : i + 1]
                if kind == "softmax1":
                    row = x.exp() / (1 + x.exp().sum())
                elif kind == "sigmoid":
                    row = 1 / (1 + torch.exp(-(x - math.log(T))))
                else:  # softpick
                    row = torch.relu(x.exp() - 1) / ((x.exp() - 1).abs().sum() + 1e-6)
                out[b, h, i, : i + 1] = row
    return out


@pytest.mark.parametrize("kind", ["softmax1", "sigmoid", "softpick"])
def test_weights_match_the_formula(kind: str) -> None:
    l = logits(0)
    got = attention_weights(l, kind)
    torch.testing.assert_close(got, plain(kind, l), atol=1e-12, rtol=1e-9)
    assert (got.triu(1) == 0).all()


def test_rows_sum_as_each_formula_says() -> None:
    l = logits(1)
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    exp_sum = l.exp().masked_fill(~causal, 0).sum(-1)
    torch.testing.assert_close(attention_weights(l, "softmax1").sum(-1), 1 - 1 / (1 + exp_sum))
    sig = torch.sigmoid(l - math.log(T)).masked_fill(~causal, 0).sum(-1)
    torch.testing.assert_close(attention_weights(l, "sigmoid").sum(-1), sig)
    assert (attention_weights(l, "softpick").sum(-1) <= 1 + 1e-12).all()


def test_softpick_rows_can_be_all_zero_and_do_not_overflow() -> None:
    l = logits(2)
    l[0, 1, 4, :5] = -torch.rand(5, dtype=torch.float64)  # every visible logit of query 4 is ≤ 0
    weights = attention_weights(l, "softpick")
    assert (weights[0, 1, 4] == 0).all() and (weights[0, 0, 4] != 0).any()
    big = logits(3, scale=1.0) + 200.0  # exp(200) overflows float32; the shifted form does not
    got = attention_weights(big.float(), "softpick").double()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, plain("softpick", big), atol=1e-5, rtol=1e-4)


def test_output_gate_is_sigmoid_of_the_gate_half_of_the_query_projection() -> None:
    torch.manual_seed(0)
    attn = CausalSelfAttention(TinyTransformerConfig(d_model=8, n_heads=2, attention="output_gate"))
    z = torch.randn(2, 5, 8)
    out, probs, values, gates = attn(z)
    projected = (z @ attn.q_proj.weight.T).view(2, 5, 2, 8)  # per head: 4 query then 4 gate channels
    torch.testing.assert_close(gates, torch.sigmoid(projected[..., 4:]).transpose(1, 2))
    query = projected[..., :4].transpose(1, 2)
    key = (z @ attn.k_proj.weight.T).view(2, 5, 2, 4).transpose(1, 2)
    manual = torch.softmax((query @ key.transpose(-1, -2) / 2).masked_fill(torch.ones(5, 5).triu(1).bool(), -math.inf), -1)
    torch.testing.assert_close(probs, manual)
    heads = (manual @ values) * gates  # (B, H, T, dh)
    torch.testing.assert_close(out, heads.transpose(1, 2).reshape(2, 5, 8) @ attn.o_proj.weight.T)
    w = attn.w_qk().detach()  # the query half only: l_ij = z_i W_QK z_jᵀ
    torch.testing.assert_close(z[0] @ w[1] @ z[0].T, (query[0, 1] @ key[0, 1].T / 2).detach())


def test_switch_parameter_norms() -> None:
    torch.manual_seed(1)
    make = lambda kind: CausalSelfAttention(TinyTransformerConfig(d_model=8, n_heads=2, attention=kind))  # noqa: E731
    gated = make("sigmoid_gate")
    expected = torch.stack([torch.cat([gated.gate.weight[h], gated.gate.bias[h:h + 1]]).norm() for h in range(2)])
    torch.testing.assert_close(gated.switch_parameter_norm(), expected)
    sink = make("softmax_sink")
    with torch.no_grad():
        sink.sink_logit.copy_(torch.tensor([-1.5, 0.25]))
    torch.testing.assert_close(sink.switch_parameter_norm(), torch.tensor([1.5, 0.25]))
    output = make("output_gate")
    rows = output.q_proj.weight  # (2·8, 8): head 0 rows 0..7 (query 0..3, gate 4..7), head 1 rows 8..15
    torch.testing.assert_close(output.switch_parameter_norm(), torch.stack([rows[4:8].norm(), rows[12:16].norm()]))
    assert make("softpick").switch_parameter_norm().isnan().all()


def test_switch_with_per_channel_gates() -> None:
    probs = torch.eye(4).expand(1, 1, 4, 4)
    values = torch.ones(1, 1, 4, 2)
    gates = torch.ones(1, 1, 4, 2)
    gates[0, 0, 2:] = 0.0  # queries 2 and 3 closed on both channels
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert float(switch_off_frac(probs, values, gates, mask)) == 0.5
    gates[0, 0, 3, 1] = 1.0  # one channel open again: the output is not small
    assert float(switch_off_frac(probs, values, gates, mask)) == 0.25
