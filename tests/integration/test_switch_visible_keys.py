"""SPEC §3's hard switch over the keys a query can see, against an independent float64 eager computation.

The reference runs a float64 copy of a tiny random `transformers` model with `output_attentions=True` (eager) and
reads each head's values from a forward hook on `v_proj` and its outputs `o_t = Σ_j A[t,j] v_j` from a pre-hook on
`o_proj` (the concatenated head outputs before the output projection), then applies
`||o_t|| ≤ τ · mean_{j≤t} ||v_j||` with explicit loops. sinkscope's streamed 2×2 counts and `switch_agreement`
must equal it exactly, and must differ from the whole-window mean this definition replaced.
"""

import copy
import math

import pytest
import torch

from sinkscope.corpus.windows import TokenWindows
from sinkscope.functional.switch import switch_block_sums
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import build, token_windows

TAU, DELTA = 0.6, 0.5  # τ large enough for a tiny random model to switch queries off; δ lenient likewise


def eager_switch_tables(lm, ids: torch.Tensor, tau: float, delta: float, visible: bool) -> dict[str, torch.Tensor]:
    """(N, L, H) 2×2 counts per window over queries t ≥ 1 from float64 eager maps and hooked values/outputs, by
    loops."""
    model = copy.deepcopy(lm.model).double()
    model.set_attn_implementation("eager")
    layout = lm.layout
    values, outputs = {}, {}
    handles = []
    for layer, block in enumerate(model.model.layers):
        attn = block.self_attn
        handles.append(attn.v_proj.register_forward_hook(
            lambda m, i, o, layer=layer: values.__setitem__(layer, o.detach())))
        handles.append(attn.o_proj.register_forward_pre_hook(
            lambda m, i, layer=layer: outputs.__setitem__(layer, i[0].detach())))
    try:
        out = model.model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    N, T = ids.shape
    L, H = len(out.attentions), layout.n_heads
    tables = {k: torch.zeros(N, L, H, dtype=torch.float64) for k in ("off_sink", "off_nosink", "on_sink", "on_nosink")}
    for layer in range(L):
        att = out.attentions[layer]  # (N, H, T, T) float64
        v = values[layer].view(N, T, layout.n_kv_heads, layout.head_dim)
        o = outputs[layer].view(N, T, H, layout.head_dim)
        for head in range(H):
            v_norm = v[:, :, head // layout.group].norm(dim=-1)  # (N, T): GQA-shared values
            o_norm = o[:, :, head].norm(dim=-1)
            for n in range(N):
                for t in range(1, T):
                    keys = v_norm[n, : t + 1] if visible else v_norm[n]
                    off = float(o_norm[n, t]) <= tau * float(keys.mean())
                    sink = float(att[n, head, t, 0]) >= 1 - delta
                    tables[f"{'off' if off else 'on'}_{'sink' if sink else 'nosink'}"][n, layer, head] += 1
    return tables


@pytest.mark.parametrize("name", ["llama", "gemma3"])
def test_switch_counts_follow_visible_keys_like_eager_transformers(name):
    lm = build(name)
    ids = token_windows(8)
    run = analyze(lm, TokenWindows(ids, batch_size=3), AnalyzeConfig(tau=TAU, delta=DELTA, geometry_cap=0),
                  progress=False)
    heads = run.heads.sort_values(["layer", "head"])
    ref = {k: v.sum(0) for k, v in eager_switch_tables(lm, ids, TAU, DELTA, visible=True).items()}
    shape = ref["off_sink"].shape
    for key, expected in ref.items():
        got = torch.tensor(heads[f"switch_n_{key}"].to_numpy(), dtype=torch.float64).view(shape)
        assert torch.equal(got, expected), f"{name}: switch_n_{key}"
    n_off = ref["off_sink"] + ref["off_nosink"]
    assert 0 < n_off.sum() < n_off.numel() * ids.shape[0] * (ids.shape[1] - 1)  # both outcomes occur
    got_frac = torch.tensor(heads["switch_off_frac"].to_numpy()).view(shape)
    torch.testing.assert_close(got_frac, n_off / (ids.shape[0] * (ids.shape[1] - 1)), rtol=0, atol=1e-12)
    agreement = torch.tensor(heads["switch_agreement"].to_numpy()).view(shape)
    for layer in range(shape[0]):
        for head in range(shape[1]):
            expected = ref["off_sink"][layer, head] / n_off[layer, head] if n_off[layer, head] else math.nan
            got = float(agreement[layer, head])
            assert (math.isnan(got) and math.isnan(expected)) or got == pytest.approx(float(expected), abs=1e-12)
    # The whole-window mean (keys a query cannot see included) counts differently on this model: the test
    # tells the two definitions apart.
    whole = eager_switch_tables(lm, ids, TAU, DELTA, visible=False)
    assert not torch.equal((whole["off_sink"] + whole["off_nosink"]).sum(0), n_off)


def test_block_sums_over_query_blocks_equal_one_block():
    """Rows arrive in query blocks (`rows.start`): the visible mean of query t must not depend on the cut."""
    g = torch.Generator().manual_seed(3)
    B, H, T = 2, 3, 11
    out_norms, value_norms = torch.rand(B, H, T, generator=g), torch.rand(B, H, T, generator=g) * 4
    hard_sink = torch.rand(B, H, T, generator=g) < 0.5
    hard_sink[..., 0] = False
    whole = switch_block_sums(out_norms, value_norms, hard_sink, 0, 0.3)
    parts = [switch_block_sums(out_norms[..., a:b], value_norms, hard_sink[..., a:b], a, 0.3)
             for a, b in ((0, 4), (4, 5), (5, 11))]
    for key, value in whole.items():
        torch.testing.assert_close(sum(p[key] for p in parts), value)
