"""The reproduction's per-window evidence and p̂/q̂ weight score against independent computations.

Per-window sums (`reproduction.evidence.window_evidence`) are recomputed from float64 eager `transformers` maps,
`output_hidden_states` through the layer's input norm, and `v_proj`/`o_proj` hooks, with loops; the p̂/q̂ score
over RoPE offsets is recomputed with the model's own `apply_rotary_pos_emb` on `q_proj`/`k_proj` outputs.
"""

import copy

import numpy as np
import pytest
import torch
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import input_norm_module
from sinkscope.reproduction.config import DELTA_SCALES
from sinkscope.reproduction.evidence import pq_alignment, window_evidence
from sinkscope.statistics.window_evidence import TAU_SCALES, control_positions
from sinkscope.theory.halfspace import control_separations

from .test_capture_families import build, token_windows
from .test_switch_visible_keys import eager_switch_tables

TAU, DELTA, SEED = 0.6, 0.45, 5


def eager_reference(lm, ids: torch.Tensor):
    """Per-window geometry counts, value drain per KV head, hard-sink / MLP-like counts and sink columns by loops."""
    model = copy.deepcopy(lm.model).double()
    model.set_attn_implementation("eager")
    layout, values = lm.layout, {}
    handles = [block.self_attn.v_proj.register_forward_hook(lambda m, i, o, layer=layer: values.__setitem__(layer, o))
               for layer, block in enumerate(model.model.layers)]
    try:
        out = model.model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    N, T = ids.shape
    L, H, KV = len(out.attentions), layout.n_heads, layout.n_kv_heads
    control = control_positions(torch.arange(N), T, SEED)
    ref = {k: np.zeros(s) for k, s in [("nonpos", (N, L)), ("nonpos_control", (N, L)), ("drain", (N, L, KV)),
                                       ("hard_sink", (N, L, H)), ("mlp_like", (N, L)), ("sink_column", (N, L, H))]}
    for layer, block in enumerate(model.model.layers):
        z = input_norm_module(lm.family, block)(out.hidden_states[layer])  # (N, T, d)
        att = out.attentions[layer]
        v = values[layer].view(N, T, KV, layout.head_dim).norm(dim=-1)  # (N, T, KV)
        for n in range(N):
            cos = torch.nn.functional.cosine_similarity(z[n, 1:], z[n, 0][None], dim=-1)
            ref["nonpos"][n, layer] = int((cos <= 0).sum())
            r = int(control[n])
            others = [t for t in range(1, T) if t != r]
            ref["nonpos_control"][n, layer] = int((torch.nn.functional.cosine_similarity(
                z[n, others], z[n, r][None], dim=-1) <= 0).sum())
            ref["drain"][n, layer] = (v[n, 0] / v[n, 1:].mean(0)).numpy()
            sink = att[n, :, 1:, 0] >= 1 - DELTA  # (H, T-1)
            diag = att[n, :, 1:].diagonal(offset=1, dim1=-2, dim2=-1) >= 1 - DELTA
            ref["hard_sink"][n, layer] = sink.sum(-1).numpy()
            ref["mlp_like"][n, layer] = int((sink | diag).all(0).sum())
            ref["sink_column"][n, layer] = att[n, :, :, 0].sum(-1).numpy()
    return ref


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_window_evidence_equals_eager_loops(name):
    lm = build(name)
    ids = token_windows(6)
    got = window_evidence(lm, TokenWindows(ids, batch_size=4), len(ids), SEED, tau=TAU, delta=DELTA)
    ref = eager_reference(lm, ids)
    middle = DELTA_SCALES.index(1.0)
    for key in ("nonpos", "nonpos_control", "mlp_like"):
        pooled = got[key][:, middle] if key == "mlp_like" else got[key]
        np.testing.assert_array_equal(pooled, ref[key], err_msg=f"{name}: {key}")
    np.testing.assert_array_equal(got["hard_sink"][:, middle], ref["hard_sink"])
    np.testing.assert_allclose(got["drain"], ref["drain"], rtol=1e-4)
    np.testing.assert_allclose(got["sink_column"], ref["sink_column"], rtol=1e-5, atol=1e-6)
    assert ref["hard_sink"].sum() > 0 and ref["nonpos"].sum() > 0  # the thresholds were exercised
    # The switch tables per window, at every (δ, τ) scale, pooled over heads, equal the eager 2×2 counts.
    for i, d_scale in enumerate(DELTA_SCALES):
        for j, t_scale in enumerate(TAU_SCALES):
            tables = eager_switch_tables(lm, ids, TAU * t_scale, DELTA * d_scale, visible=True)
            expected = torch.stack([tables[k].sum((1, 2)) for k in ("off_sink", "off_nosink", "on_sink", "on_nosink")],
                                   -1)  # (N, 4)
            np.testing.assert_array_equal(got["switch"][:, i, j], expected.numpy(), err_msg=f"{name} {d_scale} {t_scale}")


def test_pq_score_equals_the_models_rope_logits():
    lm = build("llama")
    rng = np.random.default_rng(0)
    d, T = lm.layout.d_model, 7
    directions = {1: tuple(x / np.linalg.norm(x) for x in rng.normal(size=(2, d)))}
    table = pq_alignment(lm, directions, T)
    attn = lm.layers[1].self_attn
    p, q = (torch.tensor(x, dtype=torch.float32) for x in directions[1])
    hd, H, group = lm.layout.head_dim, lm.layout.n_heads, lm.layout.group
    positions = torch.arange(T)[None]
    cos, sin = lm.base.rotary_emb(torch.zeros(1, T, 1), positions)
    queries = attn.q_proj(p.expand(1, T, d)).view(1, T, H, hd).transpose(1, 2)  # p̂ at every position
    keys = attn.k_proj(q.expand(1, T, d)).view(1, T, -1, hd).transpose(1, 2)  # q̂ at every position
    queries, keys = apply_rotary_pos_emb(queries, keys, cos, sin)
    logits = (queries[0, :, 1:] * keys[0, :, :1].repeat_interleave(group, 0)).sum(-1) * attn.scaling  # (H, T-1)
    w_q = attn.q_proj.weight.view(H, hd, d).transpose(1, 2) * attn.scaling
    w_k = attn.k_proj.weight.view(-1, hd, d).transpose(1, 2).repeat_interleave(group, 0)
    sigma1 = torch.linalg.matrix_norm(w_q @ w_k.transpose(1, 2), ord=2)
    expected = (logits.mean(-1) / sigma1).double().detach().numpy()
    np.testing.assert_allclose(table.sort_values("head")["qk_pq_score"].to_numpy(), expected, rtol=1e-4, atol=1e-6)


def test_control_separations_by_hand():
    # Unit square corners and its centre: the centre lies in the others' hull (γ₂ = 0); each corner is √½ from
    # the hull of the others (the nearest point is the centre or the opposite diagonal's midpoint).
    square = np.array([[0, 0], [1, 0], [0, 1], [1, 1], [0.5, 0.5]], dtype=float)
    np.testing.assert_allclose(np.sort(control_separations(square, 5, seed=1)), [0, *[np.sqrt(0.5)] * 4], atol=1e-9)
