"""Pattern costs on the attention inputs of a real SmolLM2 layer (SPEC §6): inputs and costs checked independently."""

import cvxpy as cp
import numpy as np
import pytest
import torch

from sinkscope.corpus.windows import windows
from sinkscope.models.load import embedded_installed, load_model
from sinkscope.pipelines.cost_sweep import CostSweepConfig, model_embeddings
from sinkscope.theory.cost import pattern_cost

pytestmark = pytest.mark.slow


def min_norm_point(points: np.ndarray) -> np.ndarray:
    weights = cp.Variable(points.shape[0], nonneg=True)
    cp.Problem(cp.Minimize(cp.sum_squares(points.T @ weights)), [cp.sum(weights) == 1]).solve(solver="CLARABEL")
    return points.T @ weights.value


@pytest.mark.skipif(not embedded_installed("smollm2-135m"), reason="smollm2-135m is not installed")
def test_smollm2_layer_costs():
    T, layer = 8, 10
    config = CostSweepConfig(families=("model",), Ts=(T,), seeds=1, model="smollm2-135m", layers=(layer,))
    [(got_layer, window, Z)] = list(model_embeddings(config, T))
    assert (got_layer, window, Z.shape) == (layer, 0, (T + 1, 576))

    # the same z from plain transformers: hidden state entering the layer, through its input RMSNorm
    lm = load_model("smollm2-135m")
    ids = next(iter(windows("builtin:prose", lm.tokenizer, T + 1, max_windows=1)))
    assert ids[0, 0] == 1  # BOS is position 0: z_0 is the sink candidate
    with torch.no_grad():
        hidden = lm.base(input_ids=ids, output_hidden_states=True, use_cache=False).hidden_states[layer]
        z = lm.layers[layer].input_layernorm(hidden)[0].double().numpy()
    np.testing.assert_allclose(Z, z / np.linalg.norm(z, axis=1, keepdims=True), atol=1e-5)

    sink = pattern_cost(Z[0], Z[1:], "sink", "nuclear")
    diagonal = pattern_cost(Z[0], Z[1:], "diagonal", "nuclear")
    # the non-causal optimum kappa/(gamma1 gamma2) bounds the causal sink cost from above
    gamma1 = np.linalg.norm(min_norm_point(Z[1:]))
    gamma2 = np.linalg.norm(min_norm_point(Z[1:] - Z[0]))
    assert sink.value <= 1 / (gamma1 * gamma2) * (1 + 1e-6)
    # the solution attains its margins on the real geometry
    margins = [Z[i] @ sink.W @ (Z[0] - Z[j]) for i in range(1, T + 1) for j in range(1, i + 1)]
    assert min(margins) == pytest.approx(1.0, rel=1e-4)
    # the paper's claim 4 on a real middle layer: the sink is much cheaper than the diagonal
    assert sink.value < diagonal.value / 3
