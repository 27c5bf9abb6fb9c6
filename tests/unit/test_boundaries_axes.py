"""Reductions over arrays whose axes all have different lengths and different values, so that reducing over the
wrong axis gives another number (or another shape): column mass of `evict`, per-window scores of `prevalence`, far
mass over batches and KV-head groups of `kv-plan`, the switch masks of `switch-assumptions`, numerical ranks.

Expected values come from loops over indices written here (or by hand), never from sinkscope's vectorised forms.
Each test names in its docstring the one-line bug it was seen to fail on."""

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from sinkscope.functional.switch import context_value_spectrum, numerical_rank
from sinkscope.pipelines.eviction import column_mass
from sinkscope.pipelines.kv_plan import PlanConfig, head_scores, measure_far_mass
from sinkscope.pipelines.prevalence import window_scores
from sinkscope.pipelines.switch_assumptions import switch_masks

L, B, H, T = 2, 3, 4, 5  # layers, windows, heads, positions: four different lengths


def _causal_maps(seed: int, batch: int = B, seq: int = T) -> list[torch.Tensor]:
    """L attention maps (batch, H, seq, seq): distinct random causal rows, each summing to 1."""
    generator = torch.Generator().manual_seed(seed)
    maps = []
    for _ in range(L):
        a = (torch.rand(batch, H, seq, seq, generator=generator, dtype=torch.float64) + 0.1).tril()
        maps.append(a / a.sum(-1, keepdim=True))
    return maps


class _FakeLM:
    """What the eager passes read of a `LoadedModel`: `model.config._attn_implementation`,
    `model.set_attn_implementation` and `base(...).attentions`, here the given maps for each batch in turn."""

    def __init__(self, batches: list[list[torch.Tensor]]) -> None:
        self._batches = iter(batches)
        self.device = torch.device("cpu")
        config = SimpleNamespace(_attn_implementation="sdpa")
        self.model = SimpleNamespace(config=config, set_attn_implementation=lambda name: None)

    def base(self, input_ids, output_attentions, use_cache):
        maps = next(self._batches)
        assert output_attentions and maps[0].shape[0] == input_ids.shape[0]
        return SimpleNamespace(attentions=tuple(maps))


def test_column_mass_sums_over_queries_and_averages_layers_and_heads():
    """(B, T) from L × (B, H, T, T): c[b, j] = (1 / (L·H)) Σ_l Σ_h Σ_t A_l[b, h, t, j], by loop. Killed by
    `a.float().sum(-2).mean(1)` → `a.float().sum(-1).mean(1)` (rows instead of columns: every entry 1) and by `.mean(1)` → `.mean(0)`."""
    maps = _causal_maps(0)
    got = column_mass(_FakeLM([maps]), torch.zeros(B, T, dtype=torch.long))
    expected = torch.zeros(B, T, dtype=torch.float64)
    for b in range(B):
        for j in range(T):
            expected[b, j] = sum(float(maps[l][b, h, t, j]) for l in range(L) for h in range(H) for t in range(T))
    torch.testing.assert_close(got.double(), expected / (L * H), rtol=1e-6, atol=1e-6)


def test_prevalence_window_scores_label_each_window_layer_and_head():
    """One row per (window, layer, head) with sink = mean_t A[t,0], diag = mean_{t≥1} A[t,t], prev =
    mean_{t≥1} A[t,t−1] of that head's own map, windows numbered across batches (B = 3, then 1). Killed by
    `torch.stack(attentions, 1)` → `torch.stack(attentions, 2)` (layers and heads swapped)."""
    first, second = _causal_maps(1), _causal_maps(2, batch=1)
    rows = window_scores(_FakeLM([first, second]), [torch.zeros(B, T, dtype=torch.long),
                                                      torch.zeros(1, T, dtype=torch.long)])  # fmt: skip
    assert len(rows) == (B + 1) * L * H
    table = rows.set_index(["window", "layer", "head"])
    for window, (maps, b) in enumerate([(first, 0), (first, 1), (first, 2), (second, 0)]):
        for layer in range(L):
            for head in range(H):
                a = maps[layer][b, head]
                row = table.loc[(window, layer, head)]
                assert row["sink_score"] == pytest.approx(sum(float(a[t, 0]) for t in range(T)) / T)
                assert row["diag_score"] == pytest.approx(sum(float(a[t, t]) for t in range(1, T)) / (T - 1))
                assert row["prev_score"] == pytest.approx(sum(float(a[t, t - 1]) for t in range(1, T)) / (T - 1))


def test_measure_far_mass_weighs_batches_by_their_windows():
    """Batches of 3 and 1 windows: far mass per (layer, head) is the mean over all 4 windows (not the mean of the two
    batch means), each window's far mass being mean_{t ≥ s+r} Σ_{s ≤ j ≤ t−r} A[t, j] (s = 1, r = 2), by loop.
    Killed by dropping `* ids.shape[0]` (batches weighed alike)."""
    first, second = _causal_maps(3), _causal_maps(4, batch=1)
    got = measure_far_mass(_FakeLM([first, second]), [torch.zeros(B, T, dtype=torch.long),
                                                        torch.zeros(1, T, dtype=torch.long)], 1, 2)  # fmt: skip
    assert got.shape == (L, H)
    windows = [(first, b) for b in range(B)] + [(second, 0)]
    for layer in range(L):
        for head in range(H):
            per_window = []
            for maps, b in windows:
                a = maps[layer][b, head]
                per_window.append(np.mean([sum(float(a[t, j]) for j in range(1, t - 2 + 1)) for t in range(3, T)]))
            assert got[layer, head] == pytest.approx(np.mean(per_window), rel=1e-12)


def _heads() -> pd.DataFrame:
    """analyze's heads table for L = 2 layers of 4 query heads (2 KV heads of a group of 2), all values distinct."""
    rows = [(0, 0, 0.5, 0.2, 0.1, 0.3, "sink"), (0, 1, 0.3, 0.3, 0.2, 0.4, "mixed"),
            (0, 2, 0.1, 0.7, 0.4, 0.2, "diagonal"), (0, 3, 0.0, 0.1, 0.7, 0.5, "previous-token"),
            (1, 0, 0.9, 0.05, 0.0, 0.1, "sink"), (1, 1, 0.8, 0.0, 0.05, 0.15, "sink"),
            (1, 2, 0.6, 0.2, 0.0, 0.25, "sink"), (1, 3, 0.4, 0.0, 0.0, 0.35, "mixed")]  # fmt: skip
    frame = pd.DataFrame(rows, columns=["layer", "head", "sink_score", "diag_score", "prev_score", "entropy",
                                        "head_class"])  # fmt: skip
    return frame.sample(frac=1.0, random_state=0)  # any row order


FAR = np.array([[0.00, 0.01, 0.02, 0.03], [0.10, 0.11, 0.12, 0.13]])  # far mass (layer, query head)


@pytest.mark.parametrize("sink_size, recent_size, kept", [
    # kept = min(1, [s ≥ 1]·sink + diag + [r ≥ 2]·prev) per query head, then the minimum over the KV head's group
    (1, 2, {(0, 0): 0.8, (0, 1): 0.8, (1, 0): 0.85, (1, 1): 0.4}),  # (0,2): 1.2 → 1; (0,3): 0.8
    (0, 2, {(0, 0): 0.3, (0, 1): 0.8, (1, 0): 0.05, (1, 1): 0.0}),  # the sink is not kept
    (1, 1, {(0, 0): 0.6, (0, 1): 0.1, (1, 0): 0.8, (1, 1): 0.4}),  # the previous token is not in the window
])  # fmt: skip
def test_head_scores_gate_each_measure_at_its_window_and_take_the_worst_of_each_group(sink_size, recent_size, kept):
    """Per (layer, KV head): the smallest `kept` and sink/diag/prev of its two query heads, the largest entropy and
    far mass. Killed by `config.sink_size >= 1` → `config.sink_size > 1`, by `config.recent_size >= 2` →
    `config.recent_size > 2`, by `g["kept"].min()` → `g["kept"].max()` and by `h["head"] // group` →
    `h["head"] % group` (query heads 0, 2 sharing a KV head), and by `g["far_mass"].max()` → `.min()`."""
    config = PlanConfig(sink_size=sink_size, recent_size=recent_size)
    table = head_scores(_heads(), FAR, 2, config).set_index(["layer", "kv_head"])
    assert table["kept"].to_dict() == pytest.approx(kept)
    assert table["query_heads"].to_dict() == {(0, 0): "0,1", (0, 1): "2,3", (1, 0): "0,1", (1, 1): "2,3"}
    assert table["sink_score"].to_dict() == pytest.approx({(0, 0): 0.3, (0, 1): 0.0, (1, 0): 0.8, (1, 1): 0.4})
    assert table["entropy"].to_dict() == pytest.approx({(0, 0): 0.4, (0, 1): 0.5, (1, 0): 0.15, (1, 1): 0.35})
    assert table["far_mass"].to_dict() == pytest.approx({(0, 0): 0.01, (0, 1): 0.03, (1, 0): 0.11, (1, 1): 0.13})
    assert table["need"].to_dict() == pytest.approx({key: 1 - value for key, value in kept.items()})
    far = head_scores(_heads(), FAR, 2, PlanConfig(sink_size=sink_size, recent_size=recent_size, rule="far-mass"))
    assert far.set_index(["layer", "kv_head"])["streamable"].to_dict() == pytest.approx(
        {(0, 0): 0.99, (0, 1): 0.97, (1, 0): 0.89, (1, 1): 0.87})


def test_switch_masks_at_tau_and_delta_equality():
    """T = 2, one head, v_0 = (1, 0) and v_1 = (3, 0): the value scale is [1, 2] (mean of the norms a query sees).
    With τ = ½ query 1's limit is 1: output v_0 (norm 1) is switched off (equality counts), 0.75 v_0 + 0.25 v_1
    (norm 1.5) is not; with δ = ¼ a mass of 0.75 on key 0 is a hard sink (equality counts), 0.5 is not. Killed by
    `out_norm <= tau * scale` → `out_norm < tau * scale`, by `attn[..., 0] >= 1 - delta` → `attn[..., 0] > 1 - delta`
    and by `torch.arange(1, norms.shape[-1] + 1` → `torch.arange(2, norms.shape[-1] + 2` (mean over one key more)."""
    attn = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]]], [[[1.0, 0.0], [0.75, 0.25]]], [[[1.0, 0.0], [0.5, 0.5]]]],
                        dtype=torch.float64)  # (B, H, T, T) = (3, 1, 2, 2)  # fmt: skip
    values = torch.tensor([[1.0, 0.0], [3.0, 0.0]], dtype=torch.float64).expand(3, 1, 2, 2)  # (B, KV, T, dh)
    off, sink, scale = switch_masks(attn, values, group=1, tau=0.5, delta=0.25)
    assert scale.tolist() == [[[1.0, 2.0]]] * 3
    assert off.tolist() == [[[False, True]], [[False, False]], [[False, False]]]
    assert sink.tolist() == [[[True, True]], [[True, True]], [[True, False]]]


def test_switch_masks_read_each_query_heads_own_kv_head():
    """GQA with H = 4 query heads over KV = 2 heads (query head h reads KV head h // 2), B = 3, T = 5, dh = 6:
    output norms ||Σ_j A[t,j] v_j|| and value scales mean_{j≤t} ||v_j|| by loop, at τ = 0.5, 1 and 2. Killed by
    `values.repeat_interleave(group, dim=1)` → `values.repeat(1, group, 1, 1)` (head h reading KV head h % 2) and by
    `norms.cumsum(-1)` → `norms.cumsum(-2)`."""
    attn = _causal_maps(5)[0]  # (B, H, T, T)
    values = torch.randn(B, 2, T, 6, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    for tau in (0.5, 1.0, 2.0):
        off, _, scale = switch_masks(attn, values, group=2, tau=tau, delta=0.1)
        for b, h, t in np.ndindex(B, H, T):
            v = values[b, h // 2]
            out = sum(float(attn[b, h, t, j]) * v[j] for j in range(T))
            visible = sum(float(v[j].norm()) for j in range(t + 1)) / (t + 1)
            assert float(scale[b, h, t]) == pytest.approx(visible)
            assert bool(off[b, h, t]) == (float(out.norm()) <= tau * visible), (tau, b, h, t)


def test_numerical_rank_counts_values_above_the_tolerance_of_their_own_largest():
    """(2, 3, 4) spectra, largest first, whose rows have different largest values: a value equal to rtol × the
    largest is not counted, and an all-zero row has rank 0. Killed by `spectrum > rtol * spectrum[..., :1]` →
    `spectrum >= rtol * spectrum[..., :1]` and by `spectrum[..., :1]` → `spectrum.amax()` (one largest for all)."""
    spectrum = torch.tensor([[[4.0, 2.0, 1.0, 0.5], [8.0, 2.0, 1.0, 0.0], [0.0, 0.0, 0.0, 0.0]],
                             [[1.0, 0.5, 0.25, 0.125], [2.0, 1.0, 0.5, 0.5], [16.0, 4.0, 4.0, 1.0]]],
                            dtype=torch.float64)  # fmt: skip
    assert numerical_rank(spectrum, 0.25).tolist() == [[2, 1, 0], [2, 2, 1]]
    assert numerical_rank(spectrum, 0.2).tolist() == [[3, 2, 0], [3, 4, 3]]


def test_context_value_spectrum_leaves_out_the_value_of_bos():
    """Values v_0 = (1, 0), v_1 = (0, 2), v_2 = (0, 4): the context values v_1, v_2 span one direction, singular
    values (√20, 0); with v_0 they would be (√20, 1). Killed by `values[..., 1:, :]` → `values[..., :, :]`."""
    values = torch.tensor([[1.0, 0.0], [0.0, 2.0], [0.0, 4.0]], dtype=torch.float64)
    spectrum = context_value_spectrum(values)
    assert spectrum.tolist() == pytest.approx([20**0.5, 0.0], abs=1e-12)
    assert numerical_rank(spectrum, 1e-4).item() == 1
