"""Issue 36's `reproduce` sections against independent computations on tiny random models: the keep-the-sink losses
against decoding with a KV cache that really evicts, and the per-(layer, window) switch counts and assumption
quantities against `pipelines.switch_assumptions` (eager float64 maps, its own value hook)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from sinkscope.pipelines.dense_attention import DenseConfig, head_cosines
from sinkscope.pipelines.switch_assumptions import SwitchConfig, measure
from sinkscope.reproduction.experiment_sections import assumption_evidence, eviction_losses
from sinkscope.reproduction.switch_claims import GRID, TAU_CURVE

from .test_eviction import BOS, VOCAB, _llama, streamed_losses


def _windows(n: int, T: int, seed: int) -> torch.Tensor:
    ids = torch.randint(3, VOCAB, (n, T), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = BOS
    return ids


def test_eviction_losses_match_a_loop_over_an_evicting_cache():
    lm, window = _llama(), 4
    ids = _windows(2, 14, 0)
    got = eviction_losses(lm, [ids], window, seed=3)
    assert ((got["position"] >= 1) & (got["position"] < window)).all()
    with torch.no_grad():
        logits = lm.model(input_ids=ids, use_cache=False).logits
    plain = F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten(), reduction="none").view(2, -1)
    np.testing.assert_allclose(got["full"], plain[:, window:].double().mean(1).numpy(), atol=2e-5)
    for b in range(2):
        with torch.no_grad():
            for name, kept in (("recent", []), ("sink", [0]), ("control", [int(got["position"][b])])):
                loop = streamed_losses(lm, ids[b : b + 1], window, kept)
                assert abs(got[name][b] - float(loop[window:].double().mean())) < 2e-5, (name, b)
    assert (got["recent"] != got["sink"]).all()  # the eviction changes something


def test_assumption_evidence_matches_the_eager_switch_counts_per_layer_and_window():
    lm = _llama()
    ids = _windows(3, 12, 1)
    delta = 0.45  # × GRID's 2.0 = 0.9: hard sink A[t,0] ≥ 0.1, common in a random model
    got = assumption_evidence(lm, [ids[:2], ids[2:]], delta=delta)
    cells, _ = measure(lm, [ids], SwitchConfig(tau=0.4, delta=2.0 * delta))
    cells = cells.sort_values(["window", "layer"])
    at = got["curve"][:, :, GRID.index(2.0), TAU_CURVE.index(0.4)].reshape(-1, 4)  # (W·L, 4)
    np.testing.assert_array_equal(at[:, 0], cells["switched_sink"])
    np.testing.assert_array_equal(at[:, 0] + at[:, 1], cells["switched"])
    np.testing.assert_array_equal(at[:, 0] + at[:, 2], cells["sink"])
    np.testing.assert_array_equal(at.sum(1), cells["queries"])
    assert cells["queries"].sum() > cells["sink"].sum() > cells["switched"].sum() > cells["switched_sink"].sum() > 0
    np.testing.assert_array_equal(got["rank"].ravel(), cells["context_rank"])
    np.testing.assert_allclose(got["distance"].ravel(), cells["span_distance"], atol=1e-5)
    assert int(got["n_contexts"]) == 11 and int(got["width"]) == 32


def test_dense_cosines_of_chosen_layers_equal_those_of_the_full_pass():
    """`reproduce --quick` measures every 6th layer: the layers chosen give the rows the full pass gives them."""
    lm = _llama()
    ids = _windows(2, 10, 2)
    full = head_cosines(lm, [ids], DenseConfig(lambdas=(1.0,)))
    part = head_cosines(lm, [ids], DenseConfig(lambdas=(1.0,)), layers=[1])
    assert set(part["layer"]) == {1} and len(part) == 2 * 2 * (4 + 1)  # windows × λ ∈ {0, 1} × (heads + layer)
    pd.testing.assert_frame_equal(part.reset_index(drop=True), full[full["layer"] == 1].reset_index(drop=True))
