"""The view page's packed maps and key scores, against brute force on hand-made causal maps."""

import numpy as np
import pytest
import torch

from sinkscope.explorer.page import received_scores
from sinkscope.explorer.quantise import dequantise_maps, levels, quant_error, quantise_maps


def causal_maps(L: int, H: int, T: int, sharpness: float, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    logits = sharpness * torch.randn(L, H, T, T, generator=generator)
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf"))
    return logits.softmax(-1)


@pytest.mark.parametrize("bits", [8, 12, 16])
@pytest.mark.parametrize("sharpness", [0.1, 3.0, 30.0])
def test_quantised_maps_are_within_the_stated_bound(sharpness, bits):
    attn = causal_maps(3, 2, 17, sharpness)
    payload, offsets = quantise_maps(attn, bits)
    assert len(offsets) == 3 * 2 + 1
    back = dequantise_maps(payload, offsets, 3, 2, 17, bits)
    error = np.abs(back - attn.double().numpy()).max()
    assert error <= quant_error(bits) + 1e-7  # float32 inputs round too
    assert error > quant_error(bits) / 4  # and the bound is not loose by orders of magnitude
    assert (back[..., np.triu_indices(17, 1)[0], np.triu_indices(17, 1)[1]] == 0).all()


@pytest.mark.parametrize("bits, step", [(8, 255), (12, 4095), (16, 65535)])
def test_codes_hit_the_ends_exactly(bits, step):
    attn = torch.zeros(1, 1, 3, 3)
    attn[0, 0, :, 0] = 1.0  # all mass on BOS
    back = dequantise_maps(*quantise_maps(attn, bits), 1, 1, 3, bits)
    assert back[0, 0, :, 0].tolist() == [1.0, 1.0, 1.0] and back[0, 0, :, 1:].sum() == 0
    assert levels(bits) == step and quant_error(bits) == 0.5 / step


def test_received_scores_match_a_loop():
    attn = causal_maps(2, 3, 9, 2.0).double()
    got = received_scores(attn)
    T = 9
    for l in range(2):
        for h in range(3):
            for k in range(1, T - 1):
                expected = sum(attn[l, h, t, k] for t in range(k + 1, T)) / (T - 1 - k)
                assert got[l, h, k - 1] == pytest.approx(float(expected), abs=1e-12)


def test_sinkscope_view_is_the_function_after_its_modules_are_imported():
    import importlib

    import sinkscope

    importlib.import_module("sinkscope.explorer.page")
    assert sinkscope.view is importlib.import_module("sinkscope.explorer.page").view


def test_cli_lists_view_with_an_example():
    from sinkscope.cli.main import build_parser

    help_text = build_parser()._subparsers._group_actions[0].choices["view"].format_help()
    assert "--text" in help_text and "--file" in help_text and "sinkscope view --model" in help_text


def test_marked_keys_are_the_strongest_with_enough_readers():
    from sinkscope.explorer.page import MIN_READERS, head_table

    T = 40
    attn = torch.zeros(1, 1, T, T)
    attn[0, 0, :, 0] = 1.0  # BOS takes everything ...
    attn[0, 0, 10:, 0], attn[0, 0, 10:, 5] = 0.4, 0.6  # ... except that later tokens read key 5
    attn[0, 0, T - 1, 0], attn[0, 0, T - 1, 5], attn[0, 0, T - 1, T - 2] = 0.0, 0.0, 1.0  # key T-2: one reader
    cell = head_table(attn, torch.ones(1, 1, T), epsilon=0.3, delta=0.1)[0][0]
    assert cell["cls"] == "sink" and cell["sinks"][0][0] == 5
    assert cell["sinks"][0][1] == pytest.approx(0.6 * (T - 11) / (T - 6), abs=1e-4)
    assert all(k < T - 1 - MIN_READERS for k, _ in cell["sinks"])


def test_colour_scale_and_opening_head_follow_their_stated_rules():
    """`colour_scales` against numpy over the causal entries of rows t ≥ 1; `opening_head` is the argmax of
    α = mean_t A[t,0], computed here by a loop."""
    from sinkscope.explorer.page import LOG_WHEN_MEDIAN_BELOW, colour_scales, opening_head

    attn = torch.cat([causal_maps(2, 3, 12, 0.1), causal_maps(1, 3, 12, 30.0, seed=1)])  # dense, then peaked
    scales = colour_scales(attn)
    a = attn.double().numpy()
    for layer in range(3):
        for head in range(3):
            entries = np.array([a[layer, head, t, k] for t in range(1, 12) for k in range(t + 1)])
            hi, median = entries.max(), np.median(entries)
            scale = scales[layer][head]
            assert scale["hi"] == pytest.approx(hi, abs=1e-6) and scale["median"] == pytest.approx(median, abs=1e-6)
            assert scale["log"] == (median < LOG_WHEN_MEDIAN_BELOW * hi)
            assert scale["lo"] == pytest.approx(hi * 1e-3, rel=1e-4)
    assert not scales[0][0]["log"] and all(s["log"] for s in scales[2])  # near-uniform: linear; peaked: log
    alpha = [[sum(a[l, h, t, 0] for t in range(12)) / 12 for h in range(3)] for l in range(3)]
    best = max(((l, h) for l in range(3) for h in range(3)), key=lambda lh: alpha[lh[0]][lh[1]])
    assert opening_head(attn) == best
    # A pure sink (every query ≥ 0.9 on BOS) is passed over for the strongest sink that shows more than one column.
    pure = attn.clone()
    pure[0, 1] = 0.0
    pure[0, 1, :, 0] = 1.0
    assert opening_head(pure) == best != (0, 1)
    everything = torch.zeros_like(attn)
    everything[..., 0] = 1.0
    everything[2, 2, 1:, 0], everything[2, 2, 1:, 1] = 0.95, 0.05
    assert opening_head(everything) == (0, 0)  # every head a pure sink: the largest α, first of the ties
