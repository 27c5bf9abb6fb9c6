"""Gaps of issue 34 in the per-block statistics: the reproduction's per-window evidence over several uneven query
blocks per layer (the block path; the rows path cuts the same blocks inside the attention function), checked against the same float64 eager loops as the one-block test.
A statistic that takes a block's rows as if they started at query 0 passes with one block and fails here."""

from collections import defaultdict

import pytest

import sinkscope.capture.attention as attention
import sinkscope.capture.blocks as block_path
from sinkscope.statistics.window_evidence import WindowEvidence

from . import test_window_evidence as evidence_test

# T = 12, 4 heads, batches of 4 and 2 windows: 5 rows per block (5, 5, 2) in a batch of 4, 10 (10, 2) in one of 2.
BLOCK_ELEMENTS = 4 * 4 * 12 * 5


@pytest.mark.parametrize(("name", "path"), [("llama", "rows"), ("llama", "blocks"), ("gemma3", "blocks")])
def test_window_evidence_over_uneven_blocks_equals_eager_loops(name, path, monkeypatch):
    blocks: dict[int, list[tuple[int, int]]] = defaultdict(list)
    on_query_block = WindowEvidence.on_query_block

    def spy(self, layer, rows):
        blocks[layer].append((rows.start, rows.out_norms.shape[-1]))
        on_query_block(self, layer, rows)

    monkeypatch.setattr(WindowEvidence, "on_query_block", spy)
    monkeypatch.setattr(block_path, "BLOCK_ELEMENTS", BLOCK_ELEMENTS)
    if path == "blocks":
        monkeypatch.setattr(attention, "attention_path", lambda *a, **k: "blocks")
    evidence_test.test_window_evidence_equals_eager_loops(name)
    if path == "rows":  # the rows path cuts blocks inside the attention function and hands on whole layers
        return
    sizes = {q for seen in blocks.values() for _, q in seen}
    starts = {s for seen in blocks.values() for s, _ in seen}
    assert len(sizes) >= 2 and max(starts) > 0, blocks  # several blocks of different sizes, not all at query 0
