"""Survivors of the sampled mutmut run over `statistics/` (docs/testing.md, "Mutation tool"): the oversmoothing
columns read back against the λ-curve table they summarise, on a tiny random GQA Llama."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.smoothing import smoothing_analysis

N_HEADS = 4


@pytest.fixture(scope="module")
def tables():
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=N_HEADS,
        num_key_value_heads=2, head_dim=8, vocab_size=101, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    lm = LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})
    ids = torch.randint(2, 101, (4, 12), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 1
    return smoothing_analysis(lm, ids.split(2))


def test_the_whole_layer_curve_is_head_minus_one_and_each_delta_is_its_curve_end_to_end(tables):
    """Curves: heads 0..3 and −1 (the whole layer's W = Σ_h W^h), never head H. Each head's (and the layer's)
    `smooth_dcos_pred_measured` is its measured curve at λ = 1 minus at λ = 0; `smooth_dcos_pred` likewise."""
    heads, layers, curves = tables
    assert sorted(set(curves["head"])) == [-1, 0, 1, 2, 3]
    for (layer, head), curve in curves.groupby(["layer", "head"]):
        curve = curve.set_index("lam")
        if head == -1:
            row = layers[layers["layer"] == layer].iloc[0]
        else:
            row = heads[(heads["layer"] == layer) & (heads["head"] == head)].iloc[0]
        measured = curve.loc[1.0, "cos_pred_measured"] - curve.loc[0.0, "cos_pred_measured"]
        assert row["smooth_dcos_pred_measured"] == pytest.approx(measured, rel=1e-9, abs=1e-12)
        assert row["smooth_dcos_pred"] == pytest.approx(curve.loc[1.0, "cos_pred"] - curve.loc[0.0, "cos_pred"],
                                                        rel=1e-9, abs=1e-12)  # fmt: skip
        assert abs(curve.loc[0.25, "cos_pred_measured"] - curve.loc[0.0, "cos_pred_measured"]) > 1e-9


def test_each_heads_sign_agreement_reads_the_observed_curves_sign_and_the_layer_averages_it(tables):
    """`smooth_sign_agree` = (predicted dense-more) == (observed cos at λ = 1 above λ = 0), the observed change
    read back from the curve table; the layer's `smooth_head_sign_agreement` is its mean over the heads. At least
    one head's observed change lies in (0, 1], where a threshold other than 0 would flip the cell (draw 41)."""
    heads, layers, curves = tables
    rises = []
    for _, row in heads.iterrows():
        curve = curves[(curves["layer"] == row["layer"]) & (curves["head"] == row["head"])].set_index("lam")
        d_obs = curve.loc[1.0, "cos_obs"] - curve.loc[0.0, "cos_obs"]
        rises.append(0 < d_obs <= 1)
        assert bool(row["smooth_sign_agree"]) == (bool(row["smooth_dense_more"]) == bool(d_obs > 0))
    assert any(rises)
    for _, layer in layers.iterrows():
        mine = heads[heads["layer"] == layer["layer"]]["smooth_sign_agree"].astype(float).mean()
        assert layer["smooth_head_sign_agreement"] == pytest.approx(mine)
