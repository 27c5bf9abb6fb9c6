"""`real_layer_costs` with its programs solved in spawned worker processes: the same frame, bit for bit, as the
programs solved one after another in the test (`theory.cost.pattern_cost` on the captured layer inputs)."""

from __future__ import annotations

import math
import os

import pandas as pd
import pytest
import torch

from sinkscope.capture.layer_inputs import layer_inputs
from sinkscope.corpus.windows import windows
from sinkscope.models.load import load_model
from sinkscope.reproduction.cost_section import real_layer_costs
from sinkscope.theory.cost import InfeasiblePatternError, pattern_cost
from sinkscope.threads import BLAS_VARIABLES

from .tiny_checkpoint import save_tiny_llama, write_corpus

T, W = 6, 3


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    return load_model(str(save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama")))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return str(write_corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt", documents=8, words=20))


def serial_frame(lm, corpus: str) -> pd.DataFrame:
    """The programs one after another in this process, rows in (layer, window, sink then diagonal) order."""
    ids = torch.cat(list(windows(corpus, lm.tokenizer, T + 1, W, seed=0)))
    captured = layer_inputs(lm, ids, [0, 1])
    rows = []
    for layer in (0, 1):
        z = captured[layer][1].double().numpy()
        for window in range(W):
            for pattern in ("sink", "diagonal"):
                try:
                    result = pattern_cost(z[window, 0], z[window, 1:], pattern, "nuclear", True, 1.0, "auto")
                    cost, rank, status = result.value, result.rank, result.status
                except InfeasiblePatternError:
                    cost, rank, status = math.inf, 0, "infeasible"
                rows.append({"layer": layer, "window": window, "pattern": pattern, "cost": cost, "rank": rank,
                             "status": status, "T": T})  # fmt: skip
    return pd.DataFrame(rows)


@pytest.mark.parametrize("workers", [2, 1])
def test_parallel_layer_costs_equal_the_serial_programs_bit_for_bit(lm, corpus, workers):
    want = serial_frame(lm, corpus)
    assert len(want) == 2 * W * 2 and want["cost"].nunique() > 2  # two layers, W windows, two patterns; distinct
    environment = {name: os.environ.get(name) for name in BLAS_VARIABLES}
    got = real_layer_costs(lm, corpus, T, W, 1, 0, workers)
    assert {name: os.environ.get(name) for name in BLAS_VARIABLES} == environment  # the workers' one thread only
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert list(got["cost"].map(float.hex)) == list(want["cost"].map(float.hex))  # the same bits, not only close
