"""Draw 51, pre-emptive: `cost_section.real_layer_costs` on a tiny random Llama checkpoint, its rows against the
exact programs on inputs taken from plain `transformers` (hidden states through each layer's input norm)."""

from __future__ import annotations

import math

import pytest
import torch

from sinkscope.corpus.windows import windows
from sinkscope.models.load import load_model
from sinkscope.reproduction.cost_section import real_layer_costs
from sinkscope.theory.cost import InfeasiblePatternError, pattern_cost

from .tiny_checkpoint import save_tiny_llama, write_corpus


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return load_model(str(save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")))


@pytest.mark.parametrize("words", [False, True])
def test_real_layer_costs_rows_against_plain_transformers(lm, tmp_path, words):
    # builtin:prose is all <unk> to the tiny vocabulary (repeated inputs: the diagonal is infeasible); a corpus of
    # its own words gives distinct inputs (a diagonal of rank > 1, where nuclear and Frobenius costs differ)
    corpus = str(write_corpus(tmp_path / "corpus.txt", documents=8, words=20)) if words else "builtin:prose"
    T, W = 3, 2
    frame = real_layer_costs(lm, corpus, T, W, 1, 0)
    assert list(frame.columns) == ["layer", "window", "pattern", "cost", "rank", "status", "T"]
    assert list(frame["layer"]) == [0] * 4 + [1] * 4
    assert list(frame["window"]) == [0, 0, 1, 1] * 2 and list(frame["pattern"]) == ["sink", "diagonal"] * 4
    assert set(frame["T"]) == {T}
    ids = torch.cat(list(windows(corpus, lm.tokenizer, T + 1, W, seed=0)))
    with torch.no_grad():
        hidden = lm.model(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states
    for row in frame.itertuples():
        z = lm.model.model.layers[row.layer].input_layernorm(hidden[row.layer][row.window]).double().numpy()
        try:
            result = pattern_cost(z[0], z[1:], row.pattern, "nuclear", True, 1.0, "auto")
            want = (result.value, result.rank, result.status)
        except InfeasiblePatternError:  # repeated tokens (the tiny vocabulary's <unk>): no diagonal solution
            want = (math.inf, 0, "infeasible")
        assert (row.cost, row.rank, row.status) == (pytest.approx(want[0], rel=1e-4), *want[1:]), row
    if not words:
        assert set(frame["status"]) > {"infeasible"}  # both branches taken
    else:
        assert (frame["rank"] > 1).any()
    stride2 = real_layer_costs(lm, corpus, T, 1, 2, 0)  # every 2nd layer of 2: layer 0 only
    assert list(stride2["layer"]) == [0, 0] and list(stride2["window"]) == [0, 0]
