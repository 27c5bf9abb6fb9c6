"""`reproduction.switch_evidence` against plain eager `transformers` (float64) and per-query loops: the switch
curves over τ, the switched-off queries by route, and the residual-stream cosines, on tiny random models."""

import copy

import numpy as np
import pytest
import torch

from sinkscope.reproduction.switch_claims import GRID, TAU_CURVE
from sinkscope.reproduction.switch_evidence import switch_evidence
from sinkscope.statistics.window_evidence import control_positions

from .test_capture_families import build, token_windows

TAU, DELTA, SEED = 0.6, 0.45, 5


def route_by_hand(a: list[float], norms: list[float], out: float, t: int, tau: float, delta: float) -> int:
    """The rules of `stats.switch_routes` for one query, written out: -1 when not switched off."""
    limit = tau * sum(norms[: t + 1]) / (t + 1)
    if t == 0 or out > limit:
        return -1
    if a[0] >= 1 - delta:
        return 0  # bos_sink
    if sum(a[j] * norms[j] for j in range(t + 1)) > limit:
        return 1  # cancellation
    others = sum(a[1:t])
    if a[0] >= a[t] and a[0] >= others:
        return 2  # bos_partial
    return 3 if a[t] >= others else 4  # self_small_value, low_norm_keys


def eager_reference(lm, ids: torch.Tensor) -> dict[str, np.ndarray]:
    model = copy.deepcopy(lm.model).double()
    model.set_attn_implementation("eager")
    values = {}
    handles = [block.self_attn.v_proj.register_forward_hook(lambda m, i, o, layer=layer: values.__setitem__(layer, o))
               for layer, block in enumerate(model.model.layers)]  # fmt: skip
    try:
        out = model.model(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    N, T = ids.shape
    layout, L = lm.layout, len(out.attentions)
    control = control_positions(torch.arange(N), T, SEED)
    routes = np.zeros((N, len(GRID), len(GRID), 6))
    bos_mass = np.zeros((N, 6))
    curve = np.zeros((N, len(TAU_CURVE), 4))
    nonpos = np.zeros((N, L, 2))
    for layer in range(L):
        att = out.attentions[layer]  # (N, H, T, T)
        v = values[layer].view(N, T, layout.n_kv_heads, layout.head_dim)
        h = out.hidden_states[layer]
        for n in range(N):
            cos = torch.nn.functional.cosine_similarity(h[n, 1:], h[n, 0][None], dim=-1)
            r = int(control[n])
            others = [t for t in range(1, T) if t != r]
            rcos = torch.nn.functional.cosine_similarity(h[n, others], h[n, r][None], dim=-1)
            nonpos[n, layer] = [int((cos <= 0).sum()), int((rcos <= 0).sum())]
            for head in range(layout.n_heads):
                vh = v[n, :, head // layout.group]  # (T, dh)
                norms = vh.norm(dim=-1).tolist()
                o = (att[n, head] @ vh).norm(dim=-1).tolist()
                for t in range(1, T):
                    a = att[n, head, t].tolist()
                    for i, d in enumerate(GRID):
                        for j, s in enumerate(GRID):
                            label = route_by_hand(a, norms, o[t], t, TAU * s, DELTA * d)
                            if label >= 0:
                                routes[n, i, j, label] += 1
                                if d == s == 1.0:
                                    bos_mass[n, label] += a[0]
                    sink = a[0] >= 1 - DELTA
                    for k, tau in enumerate(TAU_CURVE):
                        off = o[t] <= tau * sum(norms[: t + 1]) / (t + 1)
                        curve[n, k, [0, 1, 2, 3][(0 if off else 2) + (0 if sink else 1)]] += 1
    return {"routes": routes, "route_bos_mass": bos_mass, "curve": curve, "nonpos_h": nonpos[..., 0], "nonpos_h_control": nonpos[..., 1]}


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_switch_evidence_equals_eager_loops(name):
    lm = build(name)
    with torch.no_grad():  # a zero BOS embedding gives layer 0 a zero v_0: sinks on a small value
        lm.model.get_input_embeddings().weight[0] = 0
    ids = token_windows(3)
    got = switch_evidence(lm, [ids[:2], ids[2:]], SEED, tau=TAU, delta=DELTA)
    ref = eager_reference(lm, ids)
    np.testing.assert_array_equal(got["routes"], ref["routes"], err_msg=name)
    np.testing.assert_allclose(got["route_bos_mass"], ref["route_bos_mass"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["curve"][:, GRID.index(1.0)], ref["curve"], err_msg=name)
    np.testing.assert_array_equal(got["nonpos_h"], ref["nonpos_h"])
    np.testing.assert_array_equal(got["nonpos_h_control"], ref["nonpos_h_control"])
    np.testing.assert_array_equal(got["routes_by_layer"].sum(1), got["routes"][:, 1, 1])
    exercised = ref["routes"].sum((0, 1, 2))
    assert (exercised[:5] > 0).sum() >= 3, exercised  # several routes exercised
