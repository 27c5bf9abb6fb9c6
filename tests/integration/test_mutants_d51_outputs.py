"""Draw 51's survivors on the reproduction's output side that need a (tiny, random) model (issue 34).

- `evidence._rotary_tables`: the model's own rotary tables per layer, against the closed form
  cos/sin(t · base^(−2i/d)) with the base of the layer's type (Gemma 3: sliding layers 10⁴, full layers 10⁶), on
  a model without layer types (Llama) and without RoPE (GPT-2: None).
- `weights.weight_table`: one row per (layer, head) in that order, with a fresh 0 … L·H − 1 index.
"""

import numpy as np
import pandas as pd
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.evidence import _rotary_tables
from sinkscope.reproduction.weights import weight_table

from .test_reproduce_weights import COMMON, build


def closed_form(T: int, head_dim: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """transformers' default RoPE: angle t · base^(−2i/d) for i < d/2, the half repeated (rotate-half layout)."""
    angles = np.outer(np.arange(T), base ** (-np.arange(0, head_dim, 2) / head_dim))
    angles = np.concatenate([angles, angles], axis=1)
    return np.cos(angles), np.sin(angles)


def test_rotary_tables_use_each_layers_own_rope():
    torch.manual_seed(0)
    kinds = ["sliding_attention", "full_attention", "sliding_attention"]
    config = Gemma3TextConfig(**{**COMMON, "num_hidden_layers": 3}, num_key_value_heads=1, head_dim=8,
                              sliding_window=4, layer_types=kinds)  # fmt: skip
    model = Gemma3ForCausalLM(config).eval()
    lm = LoadedModel(
        model=model, tokenizer=None, family=family_for("gemma3_text"), identity={"name": "gemma3"}
    )
    bases = {kind: config.rope_parameters[kind]["rope_theta"] for kind in set(kinds)}
    assert bases == {"sliding_attention": 10_000.0, "full_attention": 1_000_000.0}
    T = 9
    for layer, kind in enumerate(kinds):
        cos, sin = _rotary_tables(lm, T, layer)
        want_cos, want_sin = closed_form(T, 8, bases[kind])
        np.testing.assert_allclose(cos.numpy(), want_cos, atol=2e-6, err_msg=f"layer {layer} ({kind})")
        np.testing.assert_allclose(sin.numpy(), want_sin, atol=2e-6, err_msg=f"layer {layer} ({kind})")
    llama = build("llama")
    cos, sin = _rotary_tables(llama, T, 1)
    want_cos, want_sin = closed_form(
        T, llama.layout.head_dim, llama.model.config.rope_parameters["rope_theta"]
    )
    np.testing.assert_allclose(cos.numpy(), want_cos, atol=2e-6)
    np.testing.assert_allclose(sin.numpy(), want_sin, atol=2e-6)
    assert _rotary_tables(build("gpt2"), T, 0) is None


def test_weight_table_rows_and_index():
    lm = build("llama")
    table = weight_table(lm, 3)
    L, H = len(lm.layers), lm.layout.n_heads
    pd.testing.assert_index_equal(table.index, pd.RangeIndex(L * H))
    assert list(zip(table["layer"], table["head"])) == [
        (layer, head) for layer in range(L) for head in range(H)
    ]


def test_weight_table_every_column_of_both_forms():
    # the columns test_reproduce_weights does not read: σ₁ … σ_r as a list and the Frobenius norm, against numpy
    from sinkscope.models.weight_maps import query_key_maps, value_output_maps

    lm = build("llama")
    table = weight_table(lm, 3)
    stats = ["sigma1", "frobenius", "nuclear_over_frobenius", "effective_rank", "bos_alignment", "bos_gain",
             "singular_values"]  # fmt: skip
    assert list(table.columns) == ["layer", "head", *[f"{p}_{s}" for p in ("qk", "vo") for s in stats]]
    r = lm.layout.head_dim
    for layer, block in enumerate(lm.layers):
        w_q, w_k = (w.double().numpy() for w in query_key_maps(lm.family, block, lm.layout))
        w_v, w_o = (w.double().numpy() for w in value_output_maps(lm.family, block, lm.layout))
        for head in range(lm.layout.n_heads):
            row = table.iloc[layer * lm.layout.n_heads + head]
            for prefix, form in (("qk", w_q[head] @ w_k[head].T), ("vo", w_v[head] @ w_o[head])):
                s = np.linalg.svd(form, compute_uv=False)[:r]
                np.testing.assert_allclose(row[f"{prefix}_singular_values"], s, rtol=1e-5, atol=1e-7)
                np.testing.assert_allclose(row[f"{prefix}_frobenius"], np.linalg.norm(form), rtol=1e-5)
