"""The switch theorem's assumptions and the conditioned switch counts: span quantities on constructed embeddings
of known rank and distance, and the per-(layer, window) counts and exception list against loops over plain
`transformers` eager maps and value vectors."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.switch_assumptions import SwitchConfig, categorize, run_switch_assumptions
from sinkscope.theory.halfspace import span_assumptions

VOCAB, BOS, T = 64, 0, 10


def test_span_quantities_of_constructed_embeddings():
    rng = np.random.default_rng(0)
    basis = np.linalg.qr(rng.normal(size=(12, 12)))[0]  # orthonormal columns
    contexts = rng.normal(size=(7, 4)) @ basis[:, :4].T  # 7 contexts of rank 4 in R^12
    inside, outside = 0.6, 0.8  # z_0 = 0.6·(unit vector in the span) + 0.8·(unit vector orthogonal to it)
    sink = inside * basis[:, 1] + outside * basis[:, 7]
    rank, distance = span_assumptions(contexts, sink)
    assert rank == 4 and distance == pytest.approx(outside)
    assert span_assumptions(contexts, contexts[:3].sum(0))[1] == pytest.approx(0.0, abs=1e-9)


def test_categories():
    assert categorize(0.7, 0.1, 0.1) == "near sink"
    assert categorize(0.2, 0.6, 0.1) == "self, small value"
    assert categorize(0.2, 0.1, 0.55) == "other small-value key"
    assert categorize(0.3, 0.3, 0.3) == "spread"


def test_counts_against_loops():
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64,
                         initializer_range=0.5, bos_token_id=BOS, eos_token_id=1)  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    lm = LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})
    ids = torch.randint(3, VOCAB, (3, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    cfg = SwitchConfig(tau=0.5, delta=0.6, min_distance=0.05, bootstrap=200)
    result = run_switch_assumptions(lm, [ids[:2], ids[2:]], cfg)
    values = {}
    hooks = [model.model.layers[i].self_attn.v_proj.register_forward_hook(
        lambda _m, _a, out, i=i: values.__setitem__(i, out)) for i in range(2)]  # fmt: skip
    norms_in = {}
    hooks += [model.model.layers[i].input_layernorm.register_forward_hook(
        lambda _m, _a, out, i=i: norms_in.__setitem__(i, out)) for i in range(2)]  # fmt: skip
    model.set_attn_implementation("eager")
    maps = model(input_ids=ids, output_attentions=True).attentions
    for h in hooks:
        h.remove()
    cells = result["cells"].set_index(["window", "layer"])
    listed = set(map(tuple, result["offenders"][["window", "layer", "head", "t"]].to_numpy().tolist()))
    expected_listed = set()
    for layer in range(2):
        v = values[layer].double().view(3, T, 2, 16)
        for b in range(3):
            switched = both = 0
            for head in range(4):
                vv = v[b, :, head // 2]  # GQA: heads 0, 1 read kv head 0
                for t in range(1, T):
                    a = maps[layer][b, head, t].double()
                    out = sum(a[j] * vv[j] for j in range(t + 1))
                    off = out.norm() <= 0.5 * sum(vv[j].norm() for j in range(t + 1)) / (t + 1)
                    sink = a[0] >= 0.4
                    switched += int(off)
                    both += int(off and sink)
                    if off and not sink:
                        expected_listed.add((b, layer, head, t))
            assert cells.loc[(b, layer), "switched"] == switched
            assert cells.loc[(b, layer), "switched_sink"] == both
            z = norms_in[layer][b].double().numpy()
            rank, distance = span_assumptions(z[1:], z[0])
            assert cells.loc[(b, layer), "span_distance"] == pytest.approx(distance)
            value_ranks = [np.linalg.matrix_rank(v[b, 1:, k].numpy(), tol=1e-4 * np.linalg.norm(v[b, 1:, k].numpy(), 2))
                           for k in range(2)]  # fmt: skip
            assert cells.loc[(b, layer), "value_rank_min"] == min(value_ranks)
            assert bool(cells.loc[(b, layer), "holds"]) == (rank == T - 1 and distance >= 0.05
                                                           and min(value_ranks) == T - 1)  # fmt: skip
    assert listed == expected_listed and expected_listed
    total = result["conditioned"].set_index("cells").loc["all"]
    assert total["switched"] == result["cells"]["switched"].sum() > 0
    assert total["agreement_lo"] <= total["agreement"] <= total["agreement_hi"]
