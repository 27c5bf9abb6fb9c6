"""Head ablations on tiny random Llama (GQA, with biases) and GPT-2 models, against edited weight copies."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.pytorch_utils import Conv1D

from sinkscope.capture.head_ablation import head_ablation
from sinkscope.capture.layer_inputs import layer_inputs
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.ablate import ablate, ablation_curve
from sinkscope.pipelines.head_selection import (
    count_for_fraction,
    head_scores,
    heads_by_score,
    parse_heads,
    random_heads,
)

VOCAB, BOS = 64, 0


def _wrap(model) -> LoadedModel:
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for(model.config.model_type), identity={})


def _llama() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=32, attention_bias=True, bos_token_id=BOS, eos_token_id=1,
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    with torch.no_grad():  # random init leaves biases at 0; make them matter
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.normal_(0, 0.5)
    return _wrap(model)


def _gpt2() -> LoadedModel:
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=3, n_head=4, n_positions=32, bos_token_id=BOS, eos_token_id=1)
    return _wrap(GPT2LMHeadModel(config))


MODELS = {"llama": _llama, "gpt2": _gpt2}


def _ids(batch: int = 3, T: int = 12, seed: int = 0) -> torch.Tensor:
    ids = torch.randint(2, VOCAB, (batch, T), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = BOS
    return ids


def _proj(lm: LoadedModel, layer: int, name: str):
    return getattr(getattr(lm.layers[layer], lm.family.attention), name)


def _edited_copy(lm: LoadedModel, heads, mode: str) -> LoadedModel:
    """An independent ablation: edit a copy's output-projection weights (and bias, for `bos`)."""
    edited = _wrap(copy.deepcopy(lm.model))
    dh, group, H, kv = lm.layout.head_dim, lm.layout.group, lm.layout.n_heads, lm.layout.n_kv_heads
    # z_0 is the same in every window (position 0 sees only BOS), and `bos` never changes position 0.
    z0 = {layer: z[0, 0] for layer, (_, z) in layer_inputs(lm, _ids(1, 2)).items()}
    with torch.no_grad():
        for layer, head in heads:
            out_proj = _proj(edited, layer, lm.family.output_proj)
            conv = isinstance(out_proj, Conv1D)  # GPT-2 stores (in, out); nn.Linear (out, in)
            w_o = out_proj.weight.T if conv else out_proj.weight  # (d, H*dh)
            cols = slice(head * dh, (head + 1) * dh)
            if mode == "bos":
                value_proj = _proj(lm, layer, lm.family.value_proj)
                if conv:
                    start = (H + kv) * dh
                    w_v, b_v = value_proj.weight[:, start:], value_proj.bias[start:]  # (d, kv*dh)
                else:
                    w_v, b_v = value_proj.weight.T, value_proj.bias
                g = slice((head // group) * dh, (head // group + 1) * dh)
                v0 = z0[layer] @ w_v[:, g] + b_v[g]  # (dh,)
                out_proj.bias += w_o[:, cols] @ v0
            w_o[:, cols] = 0.0
    return edited


@pytest.mark.parametrize("family", MODELS)
@pytest.mark.parametrize("mode", ["zero", "bos"])
def test_ablation_equals_edited_weights_and_leaves_model_unchanged(family, mode):
    lm = MODELS[family]()
    heads = [(0, 1), (2, 3), (2, 0)]  # llama: heads 1, 0 read kv head 0, head 3 reads kv head 1
    ids = _ids()
    before = lm.model(ids).logits
    with head_ablation(lm, heads, mode):
        ablated = lm.model(ids).logits
    after = lm.model(ids).logits
    expected = _edited_copy(lm, heads, mode).model(ids).logits
    torch.testing.assert_close(ablated, expected, atol=1e-5, rtol=1e-5)
    assert (ablated - before).abs().max() > 1e-3  # the ablation does something
    assert torch.equal(before, after)


def test_bos_mode_differs_from_zero_mode():
    lm = _llama()
    with head_ablation(lm, [(1, 2)], "zero"):
        zero = lm.model(_ids()).logits
    with head_ablation(lm, [(1, 2)], "bos"):
        bos = lm.model(_ids()).logits
    assert (zero - bos).abs().max() > 1e-3


def test_ablate_loss_matches_edited_model_cross_entropy():
    lm = _gpt2()
    batches = [_ids(2, 10, seed) for seed in range(3)]
    frame = ablate(lm, batches, {"two": [(1, 0), (0, 2)], "none": []}, mode="zero")

    def mean_ce(model) -> float:
        ids = torch.cat(batches)
        logits = model(ids).logits
        return F.cross_entropy(logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1)).item()

    rows = frame.set_index("set")
    assert rows.loc["two", "base_loss"] == pytest.approx(mean_ce(lm.model), abs=1e-5)
    assert rows.loc["two", "loss"] == pytest.approx(mean_ce(_edited_copy(lm, [(1, 0), (0, 2)], "zero").model), abs=1e-5)
    assert rows.loc["none", "delta_loss"] == 0.0
    assert rows.loc["two", "heads"] == "0.2,1.0" and rows.loc["two", "n_windows"] == 6

    def window_ce(model) -> np.ndarray:  # each window's mean cross-entropy, in window order
        ids = torch.cat(batches)
        ce = F.cross_entropy(model(ids).logits[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1), reduction="none")
        return ce.view(len(ids), -1).mean(1).detach().numpy()

    edited = window_ce(_edited_copy(lm, [(1, 0), (0, 2)], "zero").model) - window_ce(lm.model)
    np.testing.assert_allclose(rows.loc["two", "window_delta"], edited, atol=1e-5)
    assert rows.loc["none", "window_delta"] == [0.0] * 6


@pytest.mark.parametrize("family", MODELS)
def test_head_scores_against_manual_attention(family):
    lm = MODELS[family]()
    ids = _ids(2, 10)
    scores = head_scores(lm, [ids[:1], ids[1:]]).set_index(["layer", "head"])
    assert lm.model.config._attn_implementation == "sdpa"  # restored
    lm.model.set_attn_implementation("eager")
    attentions = lm.model(ids, output_attentions=True).attentions
    lm.model.set_attn_implementation("sdpa")
    dh, group, H, kv = lm.layout.head_dim, lm.layout.group, lm.layout.n_heads, lm.layout.n_kv_heads
    for layer, (_, z) in layer_inputs(lm, ids).items():
        value_proj = _proj(lm, layer, lm.family.value_proj)
        values = value_proj(z)[..., (H + kv) * dh :] if lm.family.fused_qkv else value_proj(z)  # (B, T, kv*dh)
        ahon = []
        for head in range(H):
            v = values[..., (head // group) * dh : (head // group + 1) * dh]  # (B, T, dh)
            o = attentions[layer][:, head] @ v  # (B, T, dh): o_t = Σ_j A[t,j] v_j
            ahon.append(o.norm(dim=-1).mean().item())
            hard = (attentions[layer][:, head, 1:, 0] >= 0.9).float().mean().item()
            assert scores.loc[(layer, head), "hard_sink_frac"] == pytest.approx(hard, abs=1e-12)
        ahon = np.array(ahon)
        np.testing.assert_allclose(scores.loc[layer, "ahon"].to_numpy(), ahon, rtol=1e-5)
        np.testing.assert_allclose(scores.loc[layer, "ahon_ln"].to_numpy(), ahon / ahon.mean(), rtol=1e-5)


def test_selection_helpers():
    scores = pd.DataFrame(
        {"layer": [0, 0, 1, 1], "head": [0, 1, 0, 1], "ahon_ln": [1.2, 0.3, 0.3, 2.2], "hard_sink_frac": [0.1, 0.9, 0.5, 0.0]}
    )
    assert heads_by_score(scores, "lowest-ahon-ln", 2) == [(0, 1), (1, 0)]
    assert heads_by_score(scores, "highest-hard-sink", 1) == [(0, 1)]
    assert parse_heads("3.1, 4.2") == [(3, 1), (4, 2)]
    with pytest.raises(SinkscopeError, match="LAYER.HEAD"):
        parse_heads("3")
    assert count_for_fraction(270, 0.1) == 27 and count_for_fraction(4, 0.01) == 1
    draw = random_heads(3, 4, 5, seed=7)
    assert draw == random_heads(3, 4, 5, seed=7) and len(set(draw)) == 5
    assert all(0 <= layer < 3 and 0 <= head < 4 for layer, head in draw)
    lm = _llama()
    with pytest.raises(SinkscopeError, match="does not exist"):
        with head_ablation(lm, [(3, 0)]):
            pass


def test_ablation_curve_has_random_baseline():
    lm = _llama()
    scores = head_scores(lm, [_ids(2, 8)])
    curve = ablation_curve(lm, [_ids(2, 8, 1)], scores, fractions=[0.1, 0.5], n_random=2)
    assert sorted(curve["selection"].unique()) == ["highest-hard-sink", "lowest-ahon-ln", "random"]
    assert list(curve.groupby("fraction")["n_heads"].max()) == [1, 6]
    assert (curve[curve.selection == "random"].groupby("fraction").size() == 2).all()


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"selections": ("bogus",)}, "is not one of"),
        ({"selections": ("class:sink",)}, "--from-run"),
        ({"selections": ("heads:1-2",)}, "LAYER.HEAD"),
        ({"fractions": (0.0,)}, "must be in"),
        ({"mode": "mean"}, "--mode"),
        ({"n_random": 0}, "baseline"),
    ],
)
def test_config_rejects_bad_input_before_model_work(kwargs, message):
    from sinkscope.pipelines.ablate import AblateConfig

    with pytest.raises(SinkscopeError, match=message):
        AblateConfig(**kwargs)


def test_scores_from_run_reads_heads_parquet(tmp_path):
    from sinkscope.pipelines.head_selection import scores_from_run

    with pytest.raises(SinkscopeError, match="no heads.parquet"):
        scores_from_run(tmp_path)
    frame = pd.DataFrame({"layer": [0, 1], "head": [0, 0], "ahon_ln": [0.5, 1.5], "head_class": ["sink", "dense"]})
    frame.to_parquet(tmp_path / "heads.parquet")
    pd.testing.assert_frame_equal(scores_from_run(tmp_path), frame)
