"""Draw 55's open survivors in pipelines/, capture/ and statistics/, each against a hand computation: eviction on
top of a model's own sliding window, dense attention and prevalence with one or two windows, prevalence's class
defaults and whole-model table, the flex masks' devices and per-pass cache, and massive activations' median, clamp,
layer rows and top-channel ratio (mutmut draw 55)."""

from __future__ import annotations

import html
import math
import re
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from tests.integration.test_dense_attention import _llama
from tests.integration.test_eviction import BOS, VOCAB, _wrap
from tests.integration.test_mutants_round5_dense import UNIFORM_LAYER, _losses, uniform_layer_attention
from tests.integration.test_mutants_round5_eviction import page_parts
from transformers import AttentionInterface, Gemma3ForCausalLM, Gemma3TextConfig
from transformers.masking_utils import AttentionMaskInterface, eager_mask

import sinkscope.capture.flex_masks as flex_masks_module
from sinkscope.capture.flex_masks import flex_masks
from sinkscope.pipelines.dense_attention import DenseConfig, head_table, layer_losses, save_dense
from sinkscope.pipelines.eviction import keep_mask, token_losses
from sinkscope.pipelines.prevalence import classify, save_prevalence, shares
from sinkscope.statistics import massive_activations as massive

Z = 1.959963984540054


# --- pipelines/eviction.py -------------------------------------------------------------------------------------


def test_the_models_own_sliding_window_still_applies_under_a_keep_mask():
    """Gemma-3 whose every layer sees only keys t − j < 3: keeping the sink and 5 recent keys adds nothing the model
    does not already hide (the sink and keys 3..4 back lie outside its window), so the losses are the plain model's."""
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                              num_attention_heads=4, num_key_value_heads=1, head_dim=8, max_position_embeddings=64,
                              initializer_range=0.3, sliding_window=3, bos_token_id=BOS, eos_token_id=1,
                              pad_token_id=2, attn_implementation="sdpa")  # fmt: skip
    lm = _wrap(Gemma3ForCausalLM(config))
    assert config.layer_types == ["sliding_attention"] * 2
    ids = torch.randint(3, VOCAB, (1, 9), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = BOS
    logits = lm.model(input_ids=ids).logits
    plain = F.cross_entropy(logits[0, :-1].float(), ids[0, 1:], reduction="none")
    kept = token_losses(lm, ids, keep_mask(9, 5, torch.tensor([[0]])))[0]
    torch.testing.assert_close(kept, plain, atol=2e-5, rtol=1e-4)
    wider = token_losses(lm, ids, torch.ones(1, 9, 9, dtype=torch.bool).tril())[0]  # nothing evicted at all
    torch.testing.assert_close(wider, plain, atol=2e-5, rtol=1e-4)


# --- pipelines/dense_attention.py ------------------------------------------------------------------------------


def test_head_table_of_one_window_has_no_interval_and_computes_no_sd():
    """One window: Δcos at λ = 1 is 0.5 − 0.2, with no interval, and no sd of one value is taken (numpy warns)."""
    rows = [{"window": 0, "layer": 0, "head": 0, "lam": lam, "cos": c} for lam, c in ((0.0, 0.2), (1.0, 0.5))]
    predicted = pd.DataFrame({"layer": [0], "head": [0], "smooth_b": [1.0], "smooth_c": [1.0],
                              "smooth_dense_more": [True], "smooth_lambda_peak": [1.0]})  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = head_table(pd.DataFrame(rows), predicted).iloc[0]
    assert (got["cos_own"], got["dcos"], got["dcos_1"]) == pytest.approx((0.2, 0.3, 0.3))
    assert math.isnan(got["dcos_lo"]) and math.isnan(got["dcos_hi"]) and got["lambda_peak_obs"] == 1.0


def test_layer_losses_of_one_window_against_a_hand_written_uniform_layer():
    """One window: Δ loss of making layer l uniform (a hand-written attention function), with no interval."""
    lm = _llama()
    ids = torch.randint(3, VOCAB, (1, 8), generator=torch.Generator().manual_seed(4))
    ids[:, 0] = BOS
    table = layer_losses(lm, [ids], DenseConfig(loss_lambdas=(1.0,))).set_index("layer")
    plain = _losses(lm.model, ids)
    AttentionInterface.register("test_uniform_layer", uniform_layer_attention)
    AttentionMaskInterface.register("test_uniform_layer", eager_mask)
    for layer in range(3):
        UNIFORM_LAYER["layer"] = layer
        lm.model.set_attn_implementation("test_uniform_layer")
        try:
            delta = float((_losses(lm.model, ids) - plain)[0])
        finally:
            lm.model.set_attn_implementation("sdpa")
        row = table.loc[layer]
        assert row["n_windows"] == 1 and row["base_loss"] == pytest.approx(float(plain[0]), abs=1e-5)
        assert row["dloss"] == pytest.approx(delta, abs=2e-5) and abs(delta) > 1e-3
        assert math.isnan(row["dloss_lo"]) and math.isnan(row["dloss_hi"])


def test_dense_page_intro_whole(tmp_path):
    heads = pd.DataFrame({"layer": [0, 0], "head": [0, -1], "smooth_b": [1.0, np.nan], "smooth_c": [2.0, np.nan],
                          "regime": ["smoothing", None], "dcos": [0.1, 0.2]})  # fmt: skip
    layers = pd.DataFrame({"layer": [0], "lam": [1.0], "dloss": [0.5], "dloss_lo": [0.4], "dloss_hi": [0.6]})
    result = {"heads": heads, "layers": layers, "curves": pd.DataFrame({"window": [0, 1]}),
              "regimes": pd.DataFrame({"regime": ["smoothing"], "heads": [1]}),
              "meta": {"model": {"name": "m"}, "corpus": {"source": "c"}, "seq_len": 8, "timings": {"seconds": 1.0},
                       "config": {"lambdas": [1.0], "loss_lambdas": [1.0]}}}  # fmt: skip
    parts = page_parts(save_dense(tmp_path / "d", result) / "report.html")
    assert parts["intro"] == (
        "Each head's (or layer's) attention replaced inside the real forward pass by (1−λ) A + λ U, U causal uniform: "
        "change of the mean pairwise cosine of the residual leaving the layer (context tokens) and of the loss, beside "
        "the regime its traces b, c predict. Definitions in docs/experiments.md."
    )


# --- pipelines/prevalence.py -----------------------------------------------------------------------------------


def test_classify_defaults_to_epsilon_0_3_and_keeps_the_frames_index():
    """Sink score 0.5 > ε = 0.3 (the analyze default): a sink head; a head with diagonal mass 0.6: diagonal. The
    classes come back on the frame's own index, so they can be assigned to a filtered frame."""
    frame = pd.DataFrame({"sink_score": [0.9, 0.5, 0.2], "diag_score": [0.0, 0.1, 0.6], "prev_score": [0.0, 0.1, 0.1],
                          "entropy": [0.0, 0.2, 0.2]}, index=[4, 7, 3])  # fmt: skip
    picked = frame.loc[[7, 3]].copy()
    picked["class"] = classify(picked)
    assert picked["class"].tolist() == ["sink", "diagonal"]
    pd.testing.assert_series_equal(classify(picked[::-1]), pd.Series(["diagonal", "sink"], index=[3, 7]))


def test_shares_of_two_windows_have_an_interval_by_hand():
    """Layer 0's sink share is 1 in window 0 and 1/2 in window 1: mean 3/4, sd (ddof 1) 1/(2√2), half-width
    1.96 · sd / √2 = 1.96 / 4."""
    rows = [(0, 0, 0, "sink"), (0, 0, 1, "sink"), (1, 0, 0, "sink"), (1, 0, 1, "dense")]
    table = shares(pd.DataFrame(rows, columns=["window", "layer", "head", "class"]))
    table = table.set_index(["layer", "class"])[["share", "share_lo", "share_hi", "n_windows"]]
    assert table.loc[(0, "sink")].tolist() == pytest.approx([0.75, 0.75 - Z / 4, 0.75 + Z / 4, 2])
    assert table.loc[(0, "dense")].tolist() == pytest.approx([0.25, 0.25 - Z / 4, 0.25 + Z / 4, 2])


def test_prevalence_page_shows_the_whole_model_as_layer_minus_one(tmp_path):
    """Layers 0 and 1 with different shares; the page's "Whole model" table holds layer −1's rows (the shares over
    every head: sink 3/4, dense 1/4), not layer 1's (sink 1/2, dense 1/2)."""
    rows = [(0, 0, 0, "sink"), (0, 0, 1, "sink"), (0, 1, 0, "sink"), (0, 1, 1, "dense")]
    windows = pd.DataFrame(rows, columns=["window", "layer", "head", "class"])
    result = {"layers": shares(windows), "heads": pd.DataFrame({"layer": [0]}), "windows": windows,
              "meta": {"model": {"name": "m"}, "corpus": {}, "n_windows": 1, "epsilon": 0.3,
                       "timings": {"seconds": 1.0}}}  # fmt: skip
    page = html.unescape((save_prevalence(tmp_path / "p", result) / "report.html").read_text())
    whole = page.split("<h2>Whole model (prevalence.parquet, layer −1)</h2>")[1].split("</table>")[0]
    cells = re.findall(r"<tr><td>([^<]*)</td><td[^>]*>([^<]*)</td>", whole)  # class, share
    assert {name: float(share) for name, share in cells} == {"sink": 0.75, "diagonal": 0.0, "previous-token": 0.0,
                                                        "dense": 0.25, "mixed": 0.0}  # fmt: skip


# --- capture/flex_masks.py -------------------------------------------------------------------------------------


@pytest.fixture
def meta_accelerator(monkeypatch):
    """A machine whose current accelerator (where `create_block_mask` builds without a device) is not where the
    masks' inputs are: the per-shape caches emptied before and after."""

    def clear():
        flex_masks_module._block_masks.cache_clear()
        flex_masks_module._outside_window.cache_clear()
        flex_masks_module._last_tensor_masks = None

    clear()
    meta = torch.device("meta")
    monkeypatch.setattr(torch.accelerator, "current_accelerator", lambda *args, **kwargs: meta)
    yield
    clear()


def _visibility(block_mask, b: int, size: int) -> torch.Tensor:
    """The block mask's element rule at every (query, key) of window b."""
    rows, cols = torch.arange(size)[:, None], torch.arange(size)[None, :]
    return block_mask.mask_mod(torch.tensor(b), torch.tensor(0), rows, cols).expand(size, size)


def test_a_masks_block_masks_are_built_on_its_device_and_kept_per_pass(meta_accelerator):
    """M hides key 0 from window 1's queries t ≥ 2: call 1 sees M ∧ j ≤ t, call 2 its transpose, both built on the
    mask's device (CPU); the same tensor and batch give the same parts back, another batch new ones."""
    mask = torch.ones(2, 1, 4, 4, dtype=torch.bool)
    mask[1, 0, 2:, 0] = False
    call_1, call_2, hidden = flex_masks(4, torch.device("cpu"), None, mask, 2)
    causal = torch.ones(4, 4, dtype=torch.bool).tril()
    for b in range(2):
        assert torch.equal(_visibility(call_1, b, 4), mask[b, 0] & causal), b
        assert torch.equal(_visibility(call_2, b, 4), (mask[b, 0] & causal).T), b
    assert call_1.kv_num_blocks.device.type == call_2.kv_num_blocks.device.type == "cpu"
    assert hidden[:, 0, :, 0].tolist() == [[False] * 4, [False, False, True, True]]
    again = flex_masks(4, torch.device("cpu"), None, mask, 2)
    assert again[0] is call_1 and again[2] is hidden  # the layers of one pass share one build
    shared = torch.ones(1, 1, 4, 4, dtype=torch.bool)  # one mask for every window, as without padding
    assert flex_masks(4, torch.device("cpu"), None, shared, 2)[2].shape == (2, 1, 4, 5)
    three = flex_masks(4, torch.device("cpu"), None, shared, 3)  # the same tensor, another batch: new parts
    assert three[2].shape == (3, 1, 4, 5) and three[0].kv_num_blocks.shape[0] == 3


def test_a_sliding_windows_block_masks_are_built_on_the_device_asked_for(meta_accelerator):
    """Window 2, T = 5: call 1 sees 0 ≤ t − j < 2, call 2 the transpose, on the CPU; the packed `S[t,0]` is outside
    the window from t = 2 on, `S[t,t−1]` never."""
    call_1, call_2, hidden = flex_masks(5, torch.device("cpu"), 2, None, 1)
    t, j = torch.arange(5)[:, None], torch.arange(5)[None, :]
    inside = (t >= j) & (t - j < 2)
    assert torch.equal(_visibility(call_1, 0, 5), inside) and torch.equal(_visibility(call_2, 0, 5), inside.T)
    assert call_1.kv_num_blocks.device.type == call_2.kv_num_blocks.device.type == "cpu"
    assert hidden[:, 0].tolist() == [False, False, True, True, True] and not hidden[:, 1:].any()


def test_plain_causal_attention_has_no_hidden_packed_entries(monkeypatch):
    """Without a window or a mask, every packed logit names a seen key: no hidden entries (None). The block masks
    are stood in for (mutmut's trampoline would hide `_causal`'s four parameters from `create_block_mask`)."""
    asked = []

    def block_masks(*args):
        asked.append(args)
        return "call 1", "call 2"

    monkeypatch.setattr(flex_masks_module, "_block_masks", block_masks)
    assert flex_masks(6, torch.device("cpu"), None, None, 2) == ("call 1", "call 2", None)
    assert asked == [(6, "cpu", None)]


# --- statistics/massive_activations.py ---------------------------------------------------------------------------


def _bin_centre(log2: float) -> float:
    """The geometric centre of the 1/8-octave bin holding 2^log2."""
    return 2.0 ** ((math.floor(log2 * massive.BINS_PER_OCTAVE) + 0.5) / massive.BINS_PER_OCTAVE)


def test_median_of_an_even_count_is_the_lower_middle_bin():
    """Two entries in the bin of 2^0 and two in the bin of 2^3: the cumulative count reaches half (2) at 2^0."""
    counts = np.zeros((2, massive.BINS))
    counts[0, [160, 184]] = 2  # bins of log2 = 0 and 3 (2^-20 + 160/8 octaves)
    median = massive.magnitude_median(counts)
    assert median[0] == pytest.approx(_bin_centre(0.0)) and math.isnan(median[1])


def test_entries_above_the_histogram_range_land_in_its_last_bin():
    """|h| = 2^21 (three entries) lies above 2^20: counted in the last bin, so the median of {2^21 ×3, 1} is that
    bin's centre, 2^(20 − 1/16); an entry 0 lands in the first bin."""
    stat = massive.MassiveActivations(n_layers=1, d_model=2)
    big = 2.0**21
    stat.on_layer_input(0, torch.tensor([[[big, -big], [big, 1.0]]]), None)
    stat.end_batch(1)
    assert stat.histogram.value.sum().item() == 4 and stat.histogram.value[0, -1].item() == 3
    assert stat.compute(1).layers["massive_median"][0] == pytest.approx(2.0 ** (20 - 1 / 16))
    zero = massive.MassiveActivations(n_layers=1, d_model=1)
    zero.on_layer_input(0, torch.zeros(1, 1, 1), None)
    zero.end_batch(1)
    assert zero.histogram.value[0, 0].item() == 1 and zero.histogram.value.sum().item() == 1


def test_layers_in_any_order_land_in_their_own_rows_and_top_channels_have_their_ratio():
    """Layer 1 seen before layer 0; each layer's BOS maxima are its own. h (B = 1, T = 2, d = 3):
    layer 0: BOS |h| = (1, 2, 3), t = 1: (4, 0.5, 0.5); layer 1: BOS (8, 1, 1), t = 1: (1, 1, 16)."""
    stat = massive.MassiveActivations(n_layers=2, d_model=3)
    stat.on_layer_input(1, torch.tensor([[[8.0, -1.0, 1.0], [1.0, 1.0, -16.0]]]), None)
    stat.on_layer_input(0, torch.tensor([[[1.0, 2.0, -3.0], [-4.0, 0.5, 0.5]]]), None)
    stat.end_batch(1)
    assert stat.bos.value.tolist() == [[1.0, 2.0, 3.0], [8.0, 1.0, 1.0]]
    tables = stat.compute(1)
    layers = tables.layers.set_index("layer")
    assert layers["massive_bos_max"].tolist() == [3.0, 8.0]
    assert layers["massive_on_bos"].tolist() == [False, False]
    # medians: layer 0's six |h| (0.5, 0.5, 1, 2, 3, 4) reach half (3) in the bin of 1; layer 1's (1 ×4, 8, 16) too
    median = _bin_centre(0.0)
    assert layers["massive_median"].tolist() == pytest.approx([median, median])
    top = tables.extra["massive_activations"].set_index(["layer", "rank"])
    assert top.loc[(0, 0), ["channel", "value"]].tolist() == [0, 4.0]  # channels by largest |h|: 4, 3, 2
    assert top.loc[(0, 0), "ratio"] == pytest.approx(4.0 / median)
    assert top.loc[(1, 0), "ratio"] == pytest.approx(16.0 / median) and top.loc[(1, 1), "ratio"] == pytest.approx(
        8.0 / median)  # fmt: skip
