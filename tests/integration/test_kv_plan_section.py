"""The `kv_plan_measures` section on a tiny random Llama (GQA): the measures' plan against the rule worked by hand
on a constructed heads table, and the per-window losses of the full cache, the plan and the random plans against a
hand-written eager attention that hides, head by head, the keys a streamed KV head drops (sink 4 + recent 32)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.kv_plan_section import measures_plan, plan_length, plan_losses

VOCAB, BOS, LAYERS, HEADS, KV = 64, 0, 2, 4, 2
SINK, RECENT, SPAN, T = 4, 32, 16, 64


def _llama() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=LAYERS,
                         num_attention_heads=HEADS, num_key_value_heads=KV, max_position_embeddings=128,
                         bos_token_id=BOS, eos_token_id=1, attn_implementation="sdpa")  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={"name": "tiny"})


def test_measures_plan_keeps_the_heads_of_least_kept_mass_full():
    # kept = min over the KV head's two query heads of min(1, sink + diag + prev), worked out by hand:
    # (0, 0): min(0.9, 0.5) = 0.5; (0, 1): min(0.1, 0.2) = 0.1; (1, 0): min(1.0, 0.95) = 0.95; (1, 1): 0.3
    rows = [(0, 0, 0.8, 0.1, 0.0), (0, 1, 0.2, 0.2, 0.1), (0, 2, 0.0, 0.1, 0.0), (0, 3, 0.1, 0.1, 0.0),
            (1, 0, 0.9, 0.3, 0.2), (1, 1, 0.0, 0.9, 0.05), (1, 2, 0.1, 0.1, 0.1), (1, 3, 0.2, 0.1, 0.1)]
    heads = pd.DataFrame(rows, columns=["layer", "head", "sink_score", "diag_score", "prev_score"]).assign(
        entropy=1.0, head_class="mixed")  # fmt: skip
    plan = measures_plan(heads.sample(frac=1, random_state=0), LAYERS, KV, group=2)
    np.testing.assert_array_equal(plan, [[False, True], [False, True]])  # the two lowest: 0.1 and 0.3


def test_plan_length_fits_the_window():
    assert plan_length(ReproduceConfig(seq_len=64)) == 128
    assert plan_length(ReproduceConfig.preset(quick=True, seq_len=64)) == 64
    assert plan_length(ReproduceConfig(seq_len=8)) == SPAN + SINK + 1 + RECENT + 1  # the copy beyond the window


def _visible(full: np.ndarray, layer: int, head: int, t: int, j: int) -> bool:
    """From the definition: causal, and a streamed KV head (head // 2) keeps the first SINK keys and the window."""
    return j <= t and (bool(full[layer, head // 2]) or j < SINK or t - j < RECENT)


def _hand_losses(lm: LoadedModel, ids: torch.Tensor, full: np.ndarray) -> np.ndarray:
    """Per window: eager attention with every hidden key at −inf, the mean cross-entropy of the natural targets
    of queries RECENT … T − SPAN − 2."""
    hidden = torch.tensor([[[[not _visible(full, layer, h, t, j) for j in range(T)] for t in range(T)]
                            for h in range(HEADS)] for layer in range(LAYERS)])  # fmt: skip

    def attention(module, query, key, value, attention_mask, scaling=None, **kwargs):
        out = torch.empty_like(query)
        for h in range(HEADS):
            logits = query[:, h] @ key[:, h // 2].transpose(-1, -2) * scaling
            out[:, h] = logits.masked_fill(hidden[module.layer_idx, h], -torch.inf).softmax(-1) @ value[:, h // 2]
        return out.transpose(1, 2).contiguous(), None

    AttentionInterface.register("hand_kv_plan", attention)
    lm.model.set_attn_implementation("hand_kv_plan")
    try:
        logits = lm.model(input_ids=ids).logits.double()
    finally:
        lm.model.set_attn_implementation("sdpa")
    ce = [F.cross_entropy(logits[:, t], ids[:, t + 1], reduction="none") for t in range(RECENT, T - SPAN - 1)]
    return torch.stack(ce, 1).mean(1).numpy()


def test_plan_losses_against_hand_written_attention():
    lm = _llama()
    ids = torch.randint(3, VOCAB, (3, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    ids[:, T - SPAN:] = ids[:, 4:4 + SPAN]  # a probe window: the opening span (from max(SINK, 1)) copied at the end
    plan = np.array([[True, False], [False, False]])
    got = plan_losses(lm, [ids], plan, group=2, draws=3, seed=5)
    assert got["random"].shape == (3, 3)
    np.testing.assert_allclose(got["full"], _hand_losses(lm, ids, np.ones((LAYERS, KV), bool)), atol=2e-5)
    np.testing.assert_allclose(got["plan"], _hand_losses(lm, ids, plan), atol=2e-5)
    rng = np.random.default_rng(5)  # the documented draws: rng.permutation(L · KV)[:n], n = the plan's full heads
    for d in range(3):
        full = np.isin(np.arange(LAYERS * KV), rng.permutation(LAYERS * KV)[:1]).reshape(LAYERS, KV)
        np.testing.assert_allclose(got["random"][:, d], _hand_losses(lm, ids, full), atol=2e-5)
    assert np.abs(got["plan"] - got["full"]).max() > 1e-4  # streaming changed the loss
