"""Dense attention checked whole: the per-layer loss change against a hand-written attention function that makes a
whole layer uniform, the head table and regime counts of hand-made cosines by hand, the sliding-window and λ
refusals at their cuts, `run_dense`'s meta and `save_dense`'s files read back (mutmut draw 54)."""

from __future__ import annotations

import json
import math
import time
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from tests.integration.test_dense_attention import BOS, VOCAB, _llama
from tests.integration.test_mutants_round5_eviction import page_parts, page_settings
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.dense_attention import (
    DenseConfig,
    check_uniform_reach,
    head_table,
    layer_losses,
    regime_counts,
    run_dense,
    save_dense,
)

T, Z = 8, 1.959963984540054
UNIFORM_LAYER = {"layer": None}


def uniform_layer_attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Eager attention written out; every head of UNIFORM_LAYER's layer attends uniformly to keys j ≤ t."""
    group = query.shape[1] // key.shape[1]
    key, value = key.repeat_interleave(group, dim=1), value.repeat_interleave(group, dim=1)
    probs = ((query @ key.transpose(2, 3)) * scaling + attention_mask).float().softmax(-1).to(query.dtype)
    if module.layer_idx == UNIFORM_LAYER["layer"]:
        n = probs.shape[-1]
        probs = (torch.tril(torch.ones(n, n)) / torch.arange(1, n + 1)[:, None]).expand_as(probs)
    return (probs @ value).transpose(1, 2).contiguous(), probs


def _ids(n: int, seed: int = 4) -> torch.Tensor:
    ids = torch.randint(3, VOCAB, (n, T), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = BOS
    return ids


def _losses(model, ids) -> torch.Tensor:
    logits = model(input_ids=ids).logits
    return F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none").mean(1).double()


def test_layer_losses_against_a_hand_written_uniform_layer():
    lm = _llama()
    ids = _ids(3)
    table = layer_losses(lm, [ids[:2], ids[2:]], DenseConfig(loss_lambdas=(1.0,))).set_index("layer")
    plain = _losses(lm.model, ids)
    AttentionInterface.register("test_uniform_layer", uniform_layer_attention)
    AttentionMaskInterface.register("test_uniform_layer", eager_mask)
    assert list(table.index) == [0, 1, 2]
    for layer in range(3):
        UNIFORM_LAYER["layer"] = layer
        lm.model.set_attn_implementation("test_uniform_layer")
        try:
            delta = (_losses(lm.model, ids) - plain).numpy()
        finally:
            lm.model.set_attn_implementation("sdpa")
        half = Z * delta.std(ddof=1) / math.sqrt(3)
        row = table.loc[layer]
        assert row["lam"] == 1.0 and row["n_windows"] == 3
        assert row["base_loss"] == pytest.approx(float(plain.mean()), abs=1e-5)
        assert (row["dloss"], row["dloss_lo"], row["dloss_hi"]) == pytest.approx(
            (delta.mean(), delta.mean() - half, delta.mean() + half), abs=2e-5)
        assert abs(delta.mean()) > 1e-3


def test_head_table_and_regimes_by_hand():
    cos = {0: [0.2, 0.4], 0.5: [0.3, 0.6], 1.0: [0.25, 0.9]}  # per λ, windows 0 and 1, layer 0 head 0
    rows = [{"window": w, "layer": 0, "head": 0, "lam": lam, "cos": c[w]} for lam, c in cos.items() for w in (0, 1)]
    rows += [{"window": w, "layer": 0, "head": 1, "lam": lam, "cos": 0.5 - 0.1 * lam + 0.01 * w}
             for lam in cos for w in (0, 1)]  # fmt: skip
    predicted = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "smooth_b": [2.0, float("nan")],
                              "smooth_c": [1.0, 3.0], "smooth_dense_more": [True, False],
                              "smooth_lambda_peak": [0.5, 1.0], "unused": [7, 7]})  # fmt: skip
    table = head_table(pd.DataFrame(rows), predicted).set_index("head")
    got = table.loc[0]
    assert got["cos_own"] == pytest.approx(0.3)
    assert (got["dcos_0.5"], got["dcos_1"]) == pytest.approx((0.45 - 0.3, 0.575 - 0.3))
    delta = np.array([0.05, 0.5])  # λ = 1 minus λ = 0, per window
    half = Z * delta.std(ddof=1) / math.sqrt(2)
    assert (got["dcos"], got["dcos_lo"], got["dcos_hi"]) == pytest.approx((0.275, 0.275 - half, 0.275 + half))
    assert got["lambda_peak_obs"] == 1.0 and table.loc[1, "lambda_peak_obs"] == 0.0
    assert (got["smooth_b"], got["smooth_c"], got["smooth_dense_more"], got["smooth_lambda_peak"]) == (2.0, 1.0, True,
                                                                                                       0.5)
    assert "unused" not in table.columns and pd.isna(table.loc[1, "regime"]) and isinstance(got["regime"], str)
    heads = pd.DataFrame({"head": [0, 1, 2, 3, -1], "regime": ["a", "a", "b", None, "a"],
                          "dcos": [0.1, -0.2, 0.3, 0.4, 0.5], "dcos_lo": [0.05, -0.3, -0.1, 0.1, 0.4],
                          "dcos_hi": [0.2, -0.1, 0.6, 0.7, 0.6]})  # fmt: skip
    import sinkscope.pipelines.dense_attention as dense

    original = dense.REGIMES
    dense.REGIMES = ("a", "b", "c")
    try:
        counts = regime_counts(heads).set_index("regime")
    finally:
        dense.REGIMES = original
    assert counts.loc["a"].tolist() == [2, 0.5, 1, 1, 1]  # heads, share of the 4 single heads, >0, lo>0, hi<0
    assert counts.loc["b"].tolist() == [1, 0.25, 1, 0, 0] and counts.loc["c"].tolist() == [0, 0.0, 0, 0, 0]


def test_refusals_at_their_cuts():
    sliding = SimpleNamespace(config=SimpleNamespace(sliding_window=8))
    check_uniform_reach(sliding, 8)
    check_uniform_reach(SimpleNamespace(config=SimpleNamespace()), 10_000)
    with pytest.raises(SinkscopeError) as error:
        check_uniform_reach(sliding, 9)
    assert str(error.value) == ("--seq-len 9 exceeds the model's sliding window of 8: uniform causal attention would "
                                "differ between layers; use --seq-len ≤ 8")  # fmt: skip
    DenseConfig(lambdas=(1.0, 1e-9), loss_lambdas=(1.0,))
    with pytest.raises(SinkscopeError) as error:
        DenseConfig(lambdas=(0.5,), loss_lambdas=(0.5, 1.0001))
    assert str(error.value) == "--loss-lambdas 0.5,1.0001: each λ must be in (0, 1] (λ = 0 is the model itself, always measured)"
    with pytest.raises(SinkscopeError, match=r"^--lambdas 0.0,1: each λ"):
        DenseConfig(lambdas=(0.0, 1))


class Batches(list):
    def identity(self) -> dict:
        return {"source": "hand-made ids"}


def test_run_meta_and_saved_files(tmp_path):
    lm = _llama()
    lm = type(lm)(model=lm.model, tokenizer=None, family=lm.family, identity={"name": "tiny-llama"})
    config = DenseConfig(lambdas=(0.5, 1.0), loss_lambdas=(1.0,))
    before = time.perf_counter()
    result = run_dense(lm, Batches([_ids(2)]), config)
    elapsed = time.perf_counter() - before
    meta = result["meta"]
    assert meta["config"] == {"lambdas": (0.5, 1.0), "loss_lambdas": (1.0,)} and meta["seq_len"] == T
    assert meta["model"] == {"name": "tiny-llama"} and meta["corpus"] == {"source": "hand-made ids"}
    assert 0 < meta["timings"]["seconds"] <= elapsed
    assert len(result["curves"]) == 2 * 3 * 5 * 3 and len(result["layers"]) == 3 and len(result["heads"]) == 3 * 5
    assert result["regimes"]["heads"].sum() == 3 * 4
    out = save_dense(tmp_path / "d", result)
    for name in ("heads", "curves", "layers", "regimes"):
        pd.testing.assert_frame_equal(pd.read_parquet(out / f"dense_{name}.parquet"), result[name])
    assert json.loads((out / "dense.json").read_text()) == json.loads(json.dumps(meta))
    assert (out / "figures" / "dense.png").read_bytes()[:4] == b"\x89PNG"
    assert page_settings(out / "report.html") == {
        "model": "tiny-llama", "corpus": "hand-made ids", "T": str(T), "windows": "2", "λ (cosine)": "0.5, 1.0",
        "λ (loss)": "1.0", "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    parts = page_parts(out / "report.html")
    assert parts["title"] == "sinkscope dense: tiny-llama" and parts["captions"] == ["Uniform attention inside the model"]
    assert parts["intro"].startswith("Each head's (or layer's) attention replaced inside the real forward pass by")
    assert parts["intro"].endswith("beside the regime its traces b, c predict. Definitions in docs/experiments.md.")
    assert parts["headings"][:3] == ["Heads per predicted regime (dense_regimes.parquet)",
                                     "Per layer, all heads mixed (dense_layers.parquet)",
                                     "Per head; head −1 = the whole layer (dense_heads.parquet)"]  # fmt: skip
    with pytest.raises(SinkscopeError):
        save_dense(out, result)
    save_dense(out, result, overwrite=True)
    with pytest.raises(SinkscopeError, match="^dense got no windows: use a larger corpus or a smaller --seq-len$"):
        run_dense(lm, Batches(), config)
