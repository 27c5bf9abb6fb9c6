"""KV-cache plans: the per-head masks against masks built by hand, the evaluated loss and copy accuracy against a
hand-written eager attention that applies those masks head by head, far mass against a loop, and the bad inputs
(tiny random Llama models, GQA and multi-head)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from transformers import AttentionInterface, GPT2Config, LlamaConfig, LlamaForCausalLM

from sinkscope.cli.main import main
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.kv_plan import PlanConfig, far_mass, kv_head_count, read_plan
from sinkscope.pipelines.kv_plan_eval import EvalConfig, compare, plan_masks, probe, summarize, window_scores

VOCAB, BOS = 64, 0


def _llama(kv_heads: int, layers: int = 2) -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                         bos_token_id=BOS, eos_token_id=1, attn_implementation="sdpa")  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={"name": "tiny"})


def _visible(full: np.ndarray, group: int, sink: int, recent: int, layer: int, head: int, t: int, j: int) -> bool:
    """Written out from the definition: causal, and a streamed KV head keeps the first `sink` keys and the window."""
    return j <= t and (bool(full[layer, head // group]) or j < sink or t - j < recent)


def test_plan_masks_against_hand_built():
    full = np.array([[True, False], [False, True], [False, False]])
    masks = plan_masks(full, group=2, seq_len=9, sink_size=2, recent_size=3)
    assert masks.shape == (3, 4, 9, 9)
    for index in np.ndindex(*masks.shape):
        assert bool(masks[index]) == _visible(full, 2, 2, 3, *index), index


def _hand_attention(plan: np.ndarray, group: int, sink: int, recent: int):
    """Eager attention, one head at a time, with every hidden key set to −inf by the loop of `_visible`."""

    def attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
        B, H, T, _ = query.shape
        out = torch.empty_like(query)
        for h in range(H):
            k, v = key[:, h // group], value[:, h // group]  # the KV head this query head reads
            logits = query[:, h] @ k.transpose(-1, -2) * scaling  # (B, T, T)
            for t in range(T):
                for j in range(T):
                    if not _visible(plan, group, sink, recent, module.layer_idx, h, t, j):
                        logits[:, t, j] = -torch.inf
            out[:, h] = logits.softmax(-1) @ v
        return out.transpose(1, 2).contiguous(), None

    return attention


@pytest.mark.parametrize("kv_heads", [2, 4], ids=["gqa", "multi-head"])
def test_loss_and_accuracy_against_hand_written_attention(kv_heads):
    lm = _llama(kv_heads)
    group, sink, recent, span, T = 4 // kv_heads, 1, 4, 4, 16
    ids = torch.randint(3, VOCAB, (2, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    ids = probe(ids, span, sink)
    assert torch.equal(ids[:, -span:], ids[:, 1:1 + span])  # the opening span, copied at the end
    plan = np.zeros((2, kv_heads), dtype=bool)
    plan[0, 1] = True  # one full KV head in layer 0, the rest streamed
    got = window_scores(lm, [ids], plan_masks(plan, group, T, sink, recent), span, recent)

    AttentionInterface.register("hand_plan", _hand_attention(plan, group, sink, recent))
    lm.model.set_attn_implementation("hand_plan")
    try:
        logits = lm.model(input_ids=ids).logits.double()
    finally:
        lm.model.set_attn_implementation("sdpa")
    P = T - span
    natural = [F.cross_entropy(logits[:, t], ids[:, t + 1], reduction="none") for t in range(recent, P - 1)]
    copy = [(logits[:, t].argmax(-1) == ids[:, t + 1]).double() for t in range(P, T - 1)]
    expected = np.stack([torch.stack(natural, 1).mean(1).numpy(), torch.stack(copy, 1).mean(1).numpy()], 1)
    np.testing.assert_allclose(got, expected, atol=2e-5, rtol=1e-5)
    unrestricted = window_scores(lm, [ids], None, span, recent)
    assert np.abs(unrestricted[:, 0] - got[:, 0]).max() > 1e-4  # the plan changed the losses


def test_far_mass_against_a_loop():
    attn = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(3)).tril()
    attn = attn / attn.sum(-1, keepdim=True)
    sink, recent = 1, 3
    expected = np.zeros(3)
    for h in range(3):
        per_query = [sum(float(attn[b, h, t, j]) for j in range(sink, t - recent + 1))
                     for b in range(2) for t in range(sink + recent, 8)]  # fmt: skip
        expected[h] = np.mean(per_query)
    np.testing.assert_allclose(far_mass(attn, sink, recent).numpy(), expected, rtol=1e-12)


def test_oracle_and_summary_against_single_head_runs():
    lm = _llama(2)
    sink, recent, span, T = 1, 4, 4, 16
    ids = torch.randint(3, VOCAB, (3, T), generator=torch.Generator().manual_seed(2))
    ids[:, 0] = BOS
    probes = [probe(ids, span, sink)]
    config = EvalConfig(shares=(0.5,), draws=3, span=span)
    order = np.array([3, 2, 1, 0])
    rows, oracle = compare(lm, probes, {"sinkscope": order}, (2, 2, 2), sink, recent, config)
    full = window_scores(lm, probes, None, span, recent)[:, 0]
    one = np.ones((2, 2), dtype=bool)
    one[1, 0] = False  # flat index 2 streamed alone
    alone = window_scores(lm, probes, plan_masks(one, 2, T, sink, recent), span, recent)[:, 0]
    assert oracle.loc[2, "loss_increase"] == pytest.approx((alone - full).mean(), abs=1e-9)
    assert set(rows["policy"]) == {"full", "streaming", "sinkscope", "oracle", "random"}
    summary = summarize(rows).set_index(["policy", "n_full"])
    mine = rows[rows["policy"] == "sinkscope"].groupby("window")["loss"].mean().to_numpy()
    assert summary.loc[("sinkscope", 2), "delta_full"] == pytest.approx((mine - full).mean())
    random = rows[rows["policy"] == "random"].groupby("draw")["loss"].mean()
    assert summary.loc[("sinkscope", 2), "beats_random"] == pytest.approx((random > mine.mean()).mean())
    assert summary.loc[("streaming", 0), "memory"] == pytest.approx((sink + recent) / T)


def test_beats_random_counts_the_draws_with_a_higher_loss():
    rows = pd.DataFrame([{"policy": p, "draw": d, "n_full": n, "share": n / 4, "memory": 0.5, "window": w,
                          "loss": loss + w, "accuracy": 0.5}
                         for p, d, n, loss in [("full", 0, 4, 0.0), ("sinkscope", 0, 2, 1.0), ("random", 0, 2, 0.5),
                                               ("random", 1, 2, 1.5), ("random", 2, 2, 2.0)]
                         for w in range(2)])  # fmt: skip
    summary = summarize(rows).set_index("policy")
    assert summary.loc["sinkscope", "beats_random"] == pytest.approx(2 / 3)  # 1.5 and 2.0 lose to 1.0
    assert summary.loc["random", "delta_full"] == pytest.approx((0.5 + 1.5 + 2.0) / 3 + 0.0)


def test_bad_inputs_are_one_clear_line(tmp_path, capsys):
    with pytest.raises(SinkscopeError, match="--share -0.1 must lie in"):
        PlanConfig(share=-0.1)
    assert main(["kv-plan", "--share", "1.5", "--out", str(tmp_path / "plan")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--share 1.5" in err[0] and not (tmp_path / "plan").exists()
    with pytest.raises(SinkscopeError, match="names no num_key_value_heads"):
        kv_head_count(GPT2Config(n_layer=2, n_head=2, n_embd=8))
    folder = tmp_path / "other"
    folder.mkdir()
    np.savetxt(folder / "full_attention_heads.tsv", np.ones((3, 2)), delimiter="\t")
    pd.Series({"sink_size": 4, "recent_size": 8}).to_json(folder / "config.json")
    with pytest.raises(SinkscopeError, match="3 layers × 2 KV heads but the model has 2 × 2: it is the plan of another"):
        read_plan(folder, 2, 2)
    assert read_plan(folder, 3, 2)[1:] == (4, 8)
    with pytest.raises(SinkscopeError, match="3 layers × 2 KV heads but the model has 2 × 3"):
        read_plan(folder, 2, 3)  # as many values, in another layout
    assert kv_head_count(_llama(2, layers=3).config) == (3, 2, 2)
