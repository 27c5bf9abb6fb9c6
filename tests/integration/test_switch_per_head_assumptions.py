"""`switch_assumptions` can fail: on tiny real `transformers` models the context values' independence per (window,
layer, KV head) equals numpy's rank of the values hooked from a float64 eager copy; a value map of rank 2 reads
"not supported", a random one "supported", and T − 1 > head_dim "not measurable here" (dependent by dimension count).
"""

import copy

import numpy as np
import pytest
import torch

from sinkscope.pipelines.switch_assumptions import SwitchConfig, run_switch_assumptions
from sinkscope.reproduction.experiment_sections import assumption_evidence
from sinkscope.reproduction.switch_assumption_claims import ASSUMPTIONS, assumptions_verdict, independent
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, SUPPORTED

from .test_capture_families import V, build

W = 8


def distinct_windows(T: int) -> torch.Tensor:
    """W windows of BOS and T − 1 distinct token ids (a repeated token would repeat a layer-0 value)."""
    g = torch.Generator().manual_seed(2)
    ids = torch.stack([torch.randperm(V - 1, generator=g)[: T - 1] + 1 for _ in range(W)])
    return torch.cat([torch.zeros(W, 1, dtype=ids.dtype), ids], 1)


def eager_independent(lm, ids: torch.Tensor) -> np.ndarray:
    """(W, L, KV): rank of v_1..v_{T−1} per KV head (numpy, float64 eager copy, hooked v_proj) == T − 1."""
    model = copy.deepcopy(lm.model).double()
    model.set_attn_implementation("eager")
    values = {}
    handles = [block.self_attn.v_proj.register_forward_hook(lambda m, i, o, layer=layer: values.__setitem__(layer, o))
               for layer, block in enumerate(model.model.layers)]  # fmt: skip
    try:
        model.model(input_ids=ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    N, T = ids.shape
    kv, dh = lm.layout.n_kv_heads, lm.layout.head_dim
    out = np.zeros((N, len(values), kv), bool)
    for layer, v in values.items():
        v = v.view(N, T, kv, dh).numpy()
        for n in range(N):
            for k in range(kv):
                s = np.linalg.svd(v[n, 1:, k], compute_uv=False)
                out[n, layer, k] = int((s > ASSUMPTIONS["rank_rtol"] * s[0]).sum()) == T - 1
    return out


@pytest.mark.parametrize("rank_two,word", [(False, SUPPORTED), (True, NOT_SUPPORTED)])
def test_value_space_independence_against_numpy(rank_two, word):
    lm = build("llama")  # head_dim 16, T = 12: 11 context values can be independent
    if rank_two:
        g = torch.Generator().manual_seed(4)
        with torch.no_grad():
            for block in lm.layers:
                w = block.self_attn.v_proj.weight
                w.copy_(torch.randn(w.shape[0], 2, generator=g) @ torch.randn(2, w.shape[1], generator=g))
    ids = distinct_windows(12)
    got = assumption_evidence(lm, [ids[:4], ids[4:]])
    expected = eager_independent(lm, ids)
    np.testing.assert_array_equal(independent(got["value_sv"], 11, ASSUMPTIONS["rank_rtol"]), expected)
    verdict = assumptions_verdict("m", got)
    assert verdict.verdict == word
    assert verdict.interval["estimate"] == pytest.approx(expected.mean())
    assert expected.mean() == (0.0 if rank_two else 1.0)
    assert {r["threshold"] for r in verdict.sensitivity} >= {"rank_rtol", "miss_tol", "partly_min"}


def test_more_contexts_than_value_dimensions_is_not_measurable():
    lm = build("llama")
    ids = distinct_windows(20)  # 19 context values in 16 dimensions
    got = assumption_evidence(lm, [ids[:4], ids[4:]])
    assert not eager_independent(lm, ids).any()
    verdict = assumptions_verdict("m", got)
    assert verdict.verdict == NOT_MEASURABLE and "dimension count" in verdict.reason


def test_the_switch_assumptions_command_fails_the_cells_of_a_rank_two_value_map():
    """`sinkscope switch-assumptions`' cells: `value_rank_min` equals numpy's rank, and a rank-2 W_V fails every
    (window, layer) cell however the input-space quantities come out."""
    lm = build("llama")
    ids = distinct_windows(12)
    full = run_switch_assumptions(lm, [ids[:4], ids[4:]], SwitchConfig(bootstrap=10))["cells"]
    assert (full["value_rank_min"] == 11).all() and full["holds"].any()
    with torch.no_grad():
        for block in lm.layers:
            w = block.self_attn.v_proj.weight
            w.copy_(w[:, :2] @ torch.randn(2, w.shape[1], generator=torch.Generator().manual_seed(6)))
    assert not eager_independent(lm, ids).any()
    low = run_switch_assumptions(lm, [ids[:4], ids[4:]], SwitchConfig(bootstrap=10))["cells"]
    assert (low["value_rank_min"] == 2).all() and not low["holds"].any() and not low["values_independent"].any()
