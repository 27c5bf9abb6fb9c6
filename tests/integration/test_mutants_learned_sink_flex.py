"""Survivor of the third sampled mutmut run over `capture/` (docs/testing.md, "Mutation tool"): on the flex path a
layer with a learned sink (gpt-oss) is one block, so `on_learned_sink` receives query start 0 and the sink's mass
of every query, as `watch_attention` documents; a sliding layer in a forward pass without padding takes the
window's own form."""

from __future__ import annotations

import pytest
import torch

import sinkscope.capture.attention as attention
from sinkscope.capture import flex
from sinkscope.models.families import attention_module

from .test_capture_more_families import tiny


def test_the_flex_path_reports_each_layers_learned_sink_mass_from_query_zero(monkeypatch):
    """gpt-oss through CUDA's routing (forced here): per layer one `on_learned_sink(layer, 0, m)` with m (B, H, T)
    = 1 − Σ_k A[t, k] of the eager maps (eager attention drops the sink column from its probabilities)."""
    lm = tiny("gpt_oss")
    ids = torch.randint(3, lm.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    ids[:, 0] = 1
    lm.model.set_attn_implementation("eager")
    eager = lm.model(input_ids=ids, output_attentions=True, use_cache=False).attentions
    modules = {i: attention_module(lm.family, layer) for i, layer in enumerate(lm.layers)}
    reported, forms = [], []
    flex_parts = flex.flex_parts
    monkeypatch.setattr(attention, "_flex_here", lambda query: True)
    monkeypatch.setattr(flex, "flex_parts", lambda *a, **kw: forms.append((a[4], kw["mask"] is None))
                        or flex_parts(*a, **kw))  # fmt: skip
    with attention.watch_attention(lm.model, modules, lambda *a: pytest.fail("a block left the flex path"),
                                   lambda *a: None, lambda *a: None,
                                   lambda layer, start, mass: reported.append((layer, start, mass))):  # fmt: skip
        with attention.padding_free_forwards(lm.base):
            lm.model(input_ids=ids, use_cache=False)
    assert [(layer, start) for layer, start, _ in reported] == [(i, 0) for i in range(len(lm.layers))]
    # no padding: the sliding layer (window 5 < T = 9) takes the window's own form, the full layer plain causal
    windows = [getattr(lm.config, "sliding_window", None) if kind == "sliding_attention" else None
               for kind in lm.config.layer_types]  # fmt: skip
    assert 5 in windows and forms == [(window, True) for window in windows]
    for (_, _, mass), maps in zip(reported, eager):
        torch.testing.assert_close(mass.double(), 1 - maps.double().sum(-1), rtol=1e-4, atol=1e-5)
