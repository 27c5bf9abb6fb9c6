"""Weight forms of `sinkscope reproduce` (section 5) on tiny random HF models built from configs.

`query_key_maps` is checked against the attention the model itself computes: with the rotary embedding's output
replaced by cos = 1, sin = 0, RoPE is the identity (every pair at offset 0), so `log A[i,j] - log A[i,0]` must equal the bilinear form's `z_i W_QK (z_j - z_0)ᵀ` (Gemma 3: with
each token's QK-norm RMS factors, read off the raw projections). The per-head statistics of `weight_table` are
checked against brute-force numpy SVDs of the full d×d products.
"""

from contextlib import contextmanager

import numpy as np
import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
)

from sinkscope.capture.layer_inputs import layer_input_hooks, layer_inputs
from sinkscope.models.families import attention_module, family_for
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import query_key_maps, value_output_maps
from sinkscope.reproduction.weights import weight_table

V, T = 64, 8
COMMON = dict(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
              max_position_embeddings=32)


def build(name: str) -> LoadedModel:
    torch.manual_seed(0)
    if name == "llama":
        model = LlamaForCausalLM(LlamaConfig(**COMMON, num_key_value_heads=2))
    elif name == "gemma3":
        model = Gemma3ForCausalLM(Gemma3TextConfig(**COMMON, num_key_value_heads=1, head_dim=8, sliding_window=64,
                                                   query_pre_attn_scalar=12, attn_logit_softcapping=None))
        with torch.no_grad():  # non-trivial QK-norm gains
            for module in model.modules():
                for attr in ("q_norm", "k_norm"):
                    if hasattr(module, attr):
                        getattr(module, attr).weight.normal_(0, 0.5)
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=32, n_layer=2, n_head=4, n_positions=32))
        with torch.no_grad():
            for module in model.modules():
                if hasattr(module, "c_attn"):
                    module.c_attn.bias.zero_()
    model.set_attn_implementation("eager")
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for(model.config.model_type), identity={"name": name})


@contextmanager
def rope_switched_off(lm: LoadedModel):
    """Every rotary embedding module returns cos = 1, sin = 0: RoPE becomes the identity."""
    def identity(_module, _args, output):
        cos, sin = output
        return torch.ones_like(cos), torch.zeros_like(sin)

    handles = [m.register_forward_hook(identity) for m in lm.model.modules() if "RotaryEmbedding" in type(m).__name__]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def rms_factors(lm: LoadedModel, block, z: torch.Tensor, proj: str, n: int) -> torch.Tensor:
    """1/rms per token and head of a raw projection (Gemma 3's QK-norm), (T, n); ones without a QK-norm."""
    attn = attention_module(lm.family, block)
    if not hasattr(attn, "q_norm"):
        return torch.ones(z.shape[0], n, dtype=torch.float64)
    raw = getattr(attn, proj)(z).double().view(z.shape[0], n, -1)
    return torch.rsqrt(raw.pow(2).mean(-1) + attn.q_norm.eps)


@pytest.mark.parametrize("name", ["llama", "gemma3", "gpt2"])
def test_query_key_form_equals_the_models_logit_differences(name):
    lm = build(name)
    ids = torch.randint(1, V, (1, T), generator=torch.Generator().manual_seed(2))
    inputs = {}
    with rope_switched_off(lm), layer_input_hooks(lm, lambda layer, h, z: inputs.__setitem__(layer, z[0].detach())):
        out = lm.base(input_ids=ids, output_attentions=True, use_cache=False)
    layout = lm.layout
    for layer, block in enumerate(lm.layers):
        z = inputs[layer].double()  # (T, d)
        w_q, w_k = query_key_maps(lm.family, block, layout)
        r_q = rms_factors(lm, block, inputs[layer], "q_proj", layout.n_heads)
        r_k = rms_factors(lm, block, inputs[layer], "k_proj", layout.n_kv_heads).repeat_interleave(layout.group, 1)
        attn = out.attentions[layer][0].double()  # (H, T, T)
        for head in range(layout.n_heads):
            W = w_q[head].double() @ w_k[head].double().T  # (d, d)
            keys = z * r_k[:, head, None]
            logits = (z * r_q[:, head, None]) @ W @ keys.T  # (T, T)
            for i in range(1, T):
                expected = logits[i, : i + 1] - logits[i, 0]
                got = attn[head, i, : i + 1].log() - attn[head, i, 0].log()
                torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4, msg=f"{name} {layer}.{head} q{i}")


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_weight_table_against_numpy_svd(name):
    lm = build(name)
    bos = 3
    table = weight_table(lm, bos)
    z0 = {layer: z[0, 0].double().numpy() for layer, (_, z) in layer_inputs(lm, torch.tensor([[bos]])).items()}
    layout = lm.layout
    assert len(table) == len(lm.layers) * layout.n_heads
    for layer, block in enumerate(lm.layers):
        w_q, w_k = (w.double().numpy() for w in query_key_maps(lm.family, block, layout))
        w_v, w_o = (w.double().numpy() for w in value_output_maps(lm.family, block, layout))
        unit = z0[layer] / np.linalg.norm(z0[layer])
        for head in range(layout.n_heads):
            row = table[(table["layer"] == layer) & (table["head"] == head)].iloc[0]
            qk, vo = w_q[head] @ w_k[head].T, w_v[head] @ w_o[head]
            for prefix, W, gain in (("qk", qk, np.linalg.norm(qk @ unit)), ("vo", vo, np.linalg.norm(unit @ vo))):
                U, s, Vh = np.linalg.svd(W)
                s = s[: layout.head_dim]
                p = s / s.sum()
                assert row[f"{prefix}_sigma1"] == pytest.approx(s[0], rel=1e-6)
                assert row[f"{prefix}_nuclear_over_frobenius"] == pytest.approx(s.sum() / np.sqrt((s**2).sum()), rel=1e-6)
                assert row[f"{prefix}_effective_rank"] == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-6)
                assert row[f"{prefix}_bos_gain"] == pytest.approx(gain / s[0], rel=1e-6)
                top = Vh[0] if prefix == "qk" else U[:, 0]
                assert row[f"{prefix}_bos_alignment"] == pytest.approx(abs(top @ unit), rel=1e-6, abs=1e-9)
