"""Head-class prevalence against a brute-force count: scores written out as loops over plain `transformers`
eager attention maps, classes by the documented first-match rule, shares counted per window by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.prevalence import run_prevalence

VOCAB, BOS, T = 64, 0, 10


def _lm() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         initializer_range=0.5, bos_token_id=BOS, eos_token_id=1)  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})


def brute_class(A: np.ndarray, epsilon: float) -> str:
    n = A.shape[0]
    sink = sum(A[t, 0] for t in range(n)) / n
    diag = sum(A[t, t] for t in range(1, n)) / (n - 1)
    prev = sum(A[t, t - 1] for t in range(1, n)) / (n - 1)
    ent = sum(-sum(p * math.log(p) for p in A[t, : t + 1] if p > 0) / math.log(t + 1) for t in range(1, n)) / (n - 1)
    for name, value, threshold in (("sink", sink, epsilon), ("diagonal", diag, 0.5), ("previous-token", prev, 0.5),
                                   ("dense", ent, 0.7)):  # fmt: skip
        if value > threshold:
            return name
    return "mixed"


@pytest.mark.parametrize("epsilon", [0.3, 0.15])
def test_shares_against_brute_force(epsilon):
    lm = _lm()
    ids = torch.randint(3, VOCAB, (6, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    result = run_prevalence(lm, [ids[:4], ids[4:]], epsilon)
    lm.model.set_attn_implementation("eager")
    maps = lm.model(input_ids=ids, output_attentions=True).attentions  # plain transformers, L × (B, H, T, T)
    expected = {}
    for layer, attn in enumerate(maps):
        per_window = [[brute_class(attn[b, h].double().numpy(), epsilon) for h in range(4)] for b in range(6)]
        for name in ("sink", "diagonal", "previous-token", "dense", "mixed"):
            share = np.array([row.count(name) / 4 for row in per_window])
            expected[(layer, name)] = (share.mean(), share.mean() + 1.959963984540054 * share.std(ddof=1) / 6**0.5)
    table = result["layers"].set_index(["layer", "class"])
    for (layer, name), (mean, hi) in expected.items():
        assert table.loc[(layer, name), "share"] == pytest.approx(mean, abs=1e-12)
        assert table.loc[(layer, name), "share_hi"] == pytest.approx(hi, abs=1e-12)
    assert len({name for (_, name), (mean, _) in expected.items() if mean > 0}) >= 2  # not one class everywhere
    whole = table.xs(-1).loc[list(("sink", "diagonal", "previous-token", "dense", "mixed")), "share"]
    assert whole.sum() == pytest.approx(1.0)
