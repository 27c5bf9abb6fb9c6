"""Draw 52's survivors in `statistics/`, by kind, on a tiny random GQA Llama:

- a statistic whose state merges across batches, ranks and resumes equals a one-pass float64 computation when the
  windows are split into uneven parts (each part its own shift: the mean of its first batch), and its saved state
  keeps the layout its declaration documents (`ShiftedMoments(mirrored_at=d)`: the block [d:, :d] stays zero);
- every column of every table an analysis writes is named, spelled as written, in the docs
  (docs/statistics.md, docs/theory/*.md), so a renamed or re-cased column fails here."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.feed import Feed
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, joined, statistics_for
from sinkscope.statistics.smoothing_curves import SmoothingCurves

T, WINDOWS = 10, 7
SIZES = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=4, vocab_size=61, max_position_embeddings=32)  # fmt: skip
DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES)).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})


@pytest.fixture(scope="module")
def ids() -> torch.Tensor:
    ids = torch.randint(3, 61, (WINDOWS, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 2
    return ids


def fed(lm: LoadedModel, statistics: list, batches: list[torch.Tensor]) -> Feed:
    feed = Feed(statistics, T, lm.layout.group, AnalyzeConfig().delta)
    with torch.no_grad(), feed.hooks(lm):
        for batch in batches:
            feed.begin_batch(batch)
            lm.base(input_ids=batch, use_cache=False)
            feed.end_batch(len(batch))
    return feed


def test_smoothing_moments_merged_from_uneven_parts_with_their_own_shifts_equal_one_float64_pass(lm, ids):
    """Parts of 1, 2+2 and 2 windows (batches of unequal size, so three different shifts), the last restored from
    its state_dict, merged: each layer's mean and covariance of [h, z] over context tokens (t ≥ 1) equal numpy's
    float64 mean and covariance of the plain transformers forward's hidden states h and their `input_layernorm` z.
    The merged state's stored block [d:, :d] of Σ[h,z]ᵀ[h,z] is zero, as `ShiftedMoments(mirrored_at=d)` documents
    (the mean of the first batch of each part differs, so each merge adds a shift correction there otherwise)."""
    parts = [[ids[0:1]], [ids[1:3], ids[3:5]], [ids[5:7]]]
    feeds = [fed(lm, [SmoothingCurves(lm, T)], batches) for batches in parts]
    restored = Feed([SmoothingCurves(lm, T)], T)
    restored.load_state_dict(feeds[2].state_dict())
    merged = feeds[0].statistics[0]
    shifts = [f.statistics[0].pooled.shift[1] for f in feeds]
    assert all(not torch.equal(a, b) for a, b in itertools.combinations(shifts, 2))
    merged.merge(feeds[1].statistics[0])
    merged.merge(restored.statistics[0])
    with torch.no_grad():
        hidden = lm.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    d = SIZES["hidden_size"]
    state = merged.state_dict()  # after the merges: what a checkpoint of the merged run holds
    for layer in range(SIZES["num_hidden_layers"]):
        h = hidden[layer]
        z = lm.model.model.layers[layer].input_layernorm(h)
        rows = torch.cat([h, z], -1)[:, 1:].reshape(-1, 2 * d).double().numpy()
        mu, cov = merged.moments(layer)
        np.testing.assert_allclose(mu, rows.mean(0), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(cov, np.cov(rows.T, bias=True), rtol=1e-5, atol=1e-6)
        stored = state[f"moments.{layer}.outer"]
        assert torch.equal(stored[d:, :d], torch.zeros(d, d)) and stored[:d, d:].abs().max() > 0


def documented_names() -> set[str]:
    """Every `name` in backticks of docs/statistics.md and docs/theory/*.md, `a_{h,z}` expanded to a_h, a_z, and
    the key columns a table is described by ("one row per layer, head")."""
    text = "\n".join(
        p.read_text(encoding="utf-8") for p in [DOCS / "statistics.md", *(DOCS / "theory").glob("*.md")]
    )
    names = {key for keys in re.findall(r"one row per ([\w, ]+)", text) for key in keys.split(", ")}
    for name in re.findall(r"`([^`\s]+)`", text):
        names.add(name)
        if m := re.fullmatch(r"(\w*)\{([\w,]+)\}(\w*)", name):
            names.update(m[1] + part + m[3] for part in m[2].split(","))
    return names


def test_every_column_of_every_analysis_table_is_documented_as_spelled(lm, ids):
    """An analysis with every statistic (`--smoothing` included) over 3 windows; each column of heads, layers,
    positions and every extra table (windows, massive activations, tokens, token layers, smoothing curves) is a
    backticked name in the docs, character for character."""
    config = AnalyzeConfig(geometry_cap=20, epsilons=(0.5,))
    feed = fed(lm, statistics_for(lm, T, config, smoothing=True), [ids[:3]])
    heads, layers, positions, extra = joined(s.compute(3) for s in feed.statistics)
    tables = {"heads": heads, "layers": layers, "positions": positions, **extra}
    assert {"smoothing_curves", "tokens", "token_layers", "windows"} <= set(tables)
    assert (
        "smooth_head_sign_agreement" in layers and "smooth_b" in heads
    )  # the survivor's column and a head's
    names = documented_names()
    missing = {name: [c for c in table.columns if c not in names] for name, table in tables.items()}
    assert not any(missing.values()), missing


def test_every_statistic_merged_from_three_uneven_ranks_equals_one_pass(lm, ids):
    """Every statistic of an analysis (`--smoothing` included): three "ranks" of 3, 2 and 2 windows (shards of
    world 3), fed in batches of unequal size (each part's own shifts, samples and key rows), the last restored from
    its state_dict, merged in the order 2, 0, 1: the tables equal one feed over all windows."""
    config = AnalyzeConfig(geometry_cap=20, epsilons=(0.5,))

    def sharded(rank: int, world: int, sizes: list[int]) -> Feed:
        mine = ids[rank::world]
        feed = Feed(
            statistics_for(lm, T, config, smoothing=True), T, lm.layout.group, config.delta, (rank, world)
        )
        with torch.no_grad(), feed.hooks(lm):
            for batch in mine.split(sizes):
                feed.begin_batch(batch)
                lm.base(input_ids=batch, use_cache=False)
                feed.end_batch(len(batch))
        return feed

    def tables(feed: Feed) -> list:
        heads, layers, positions, extra = joined(s.compute(WINDOWS) for s in feed.statistics)
        return [heads, layers, positions, *(extra[k] for k in sorted(extra))]

    whole = sharded(0, 1, [4, 3])
    parts = [sharded(0, 3, [1, 2]), sharded(1, 3, [2]), sharded(2, 3, [1, 1])]
    restored = Feed(statistics_for(lm, T, config, smoothing=True), T, lm.layout.group, config.delta, (2, 3))
    restored.load_state_dict(parts[2].state_dict())
    target = restored
    for other in (parts[0], parts[1]):
        for mine, theirs in zip(target.statistics, other.statistics, strict=True):
            mine.merge(theirs)
    for expected, got in zip(tables(whole), tables(target), strict=True):
        pd.testing.assert_frame_equal(expected, got, rtol=1e-5, atol=1e-7)


def test_a_feeds_all_reduce_on_one_rank_keeps_its_window_count_and_tables(lm, ids, tmp_path):
    """`Feed.all_reduce` (the end of a `torch.distributed` run) on a one-rank gloo group: the merge of the one
    rank's state is that state, so the window count stays 3 (the count travels as its own float64 sum) and every
    table equals the one computed before the reduction."""
    import torch.distributed as dist

    config = AnalyzeConfig(geometry_cap=20, epsilons=(0.5,))
    feed = fed(lm, statistics_for(lm, T, config, smoothing=True), [ids[:2], ids[2:3]])
    before = joined(s.compute(3) for s in feed.statistics)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        feed.all_reduce()
    finally:
        dist.destroy_process_group()
    assert feed.windows == 3
    after = joined(s.compute(3) for s in feed.statistics)
    for expected, got in zip(
        [*before[:3], *before[3].values()], [*after[:3], *after[3].values()], strict=True
    ):
        pd.testing.assert_frame_equal(expected, got)
