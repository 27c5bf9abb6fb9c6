"""Switch attribution (pipelines/switch_attribution.py) on a tiny Qwen3-Next against a per-query loop over the
model's own eager attention map, its value vectors and its gates, with the routes' rules written out here; and on
a tiny llama, where only the attention routes exist."""

from __future__ import annotations

import numpy as np
import torch

from sinkscope.corpus.windows import TokenWindows
from sinkscope.pipelines.switch_attribution import switch_attribution

from .test_qwen3_next import DH, H, N, T, tiny, windows
from .test_statistics_merge import tiny as tiny_llama

TAU, DELTA = 0.3, 0.5
ORDER = ("gate", "bos_sink", "cancellation", "bos_partial", "self_small_value", "low_norm_keys")


@torch.no_grad()
def reference(ids: torch.Tensor) -> np.ndarray:
    """Counts (H, routes) of switched-off queries t ≥ 1 of the full-attention layer, one query at a time."""
    lm = tiny("eager")
    attn = lm.model.model.layers[1].self_attn
    kept = {}
    handles = [
        attn.register_forward_hook(lambda _m, _a, out: kept.__setitem__("map", out[1])),
        attn.register_forward_pre_hook(lambda _m, _a, kw: kept.__setitem__("z", kw["hidden_states"]), with_kwargs=True),
        attn.v_proj.register_forward_hook(lambda _m, _a, out: kept.__setitem__("v", out)),
    ]  # fmt: skip
    lm.model(input_ids=ids)
    for handle in handles:
        handle.remove()
    A = kept["map"].double()  # (N, H, T, T)
    v = kept["v"].double().view(N, T, 2, DH).repeat_interleave(H // 2, dim=2)  # (N, T, H, DH): GQA groups repeated
    projected = kept["z"].double() @ attn.q_proj.weight.double().T + attn.q_proj.bias.double()
    gate = torch.sigmoid(projected.view(N, T, H, 2 * DH)[..., DH:])  # (N, T, H, DH)
    counts = np.zeros((H, len(ORDER)), dtype=int)
    for w in range(N):
        for h in range(H):
            norms = v[w, :, h].norm(dim=-1)
            for t in range(1, T):
                row = A[w, h, t, : t + 1]
                ungated = (row[:, None] * v[w, : t + 1, h]).sum(0)
                limit = TAU * norms[: t + 1].mean()
                if (gate[w, t, h] * ungated).norm() > limit:
                    continue  # on
                bos, own, other = row[0], row[t], row[1:t].sum()
                weighted = (row * norms[: t + 1]).sum()
                if ungated.norm() > limit:
                    route = "gate"
                elif bos >= 1 - DELTA:
                    route = "bos_sink"
                elif weighted > limit:
                    route = "cancellation"
                elif bos >= own and bos >= other:
                    route = "bos_partial"
                elif own >= other:
                    route = "self_small_value"
                else:
                    route = "low_norm_keys"
                counts[h, ORDER.index(route)] += 1
    return counts


def test_qwen3_next_routes_match_a_per_query_loop():
    ids = windows()
    table = switch_attribution(tiny(), TokenWindows(ids, batch_size=4), tau=TAU, delta=DELTA)
    assert list(table["layer"].unique()) == [1]  # the linear-attention layer has no softmax map
    expected = reference(ids)
    got = table[[f"n_{name}" for name in ORDER]].to_numpy()
    np.testing.assert_array_equal(got, expected)
    assert (table["n_queries"] == N * (T - 1)).all() and (table["unexplained"] == 0).all()
    assert table.loc[0, "share_gate"] > 0.5 and table.loc[3, "n_gate"] == 0  # closed gate / open gate
    shares = table[[f"share_{name}" for name in ORDER]].sum(axis=1)
    np.testing.assert_allclose(shares[table["n_off"] > 0], 1.0)


def test_llama_has_only_attention_routes():
    lm = tiny_llama("llama")
    ids = torch.randint(3, 101, (4, 12), generator=torch.Generator().manual_seed(1))
    table = switch_attribution(lm, TokenWindows(ids), tau=0.5, delta=0.5)
    assert "n_gate" not in table and "n_learned_sink" not in table and "n_bos_sink" in table
    assert len(table) == 2 * 4 and (table["n_off"] == table.filter(like="n_").drop(
        columns=["n_queries", "n_off"]).sum(axis=1)).all()  # fmt: skip
