"""Head ablation on the embedded SmolLM2: exactness against an edited copy, model unchanged, end-to-end run."""

from __future__ import annotations

import copy

import pytest
import torch

from sinkscope.capture.head_ablation import head_ablation
from sinkscope.corpus.windows import windows
from sinkscope.models.load import LoadedModel, embedded_installed, load_model
from sinkscope.pipelines.ablate import AblateConfig, run_ablation

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not embedded_installed("smollm2-135m"), reason="embedded smollm2-135m not installed"),
]


@pytest.fixture(scope="module")
def lm() -> LoadedModel:
    return load_model("smollm2-135m")


def test_zero_ablation_matches_edited_weights_and_restores(lm):
    ids = next(iter(windows("builtin:prose", lm.tokenizer, 32, 2, batch_size=2)))
    heads = [(0, 4), (5, 8), (20, 0)]
    before = lm.model(ids).logits
    with head_ablation(lm, heads, "zero"):
        ablated = lm.model(ids).logits
    assert torch.equal(lm.model(ids).logits, before)
    edited = copy.deepcopy(lm.model)
    dh = lm.layout.head_dim
    with torch.no_grad():
        for layer, head in heads:
            edited.model.layers[layer].self_attn.o_proj.weight[:, head * dh : (head + 1) * dh] = 0.0
    torch.testing.assert_close(ablated, edited(ids).logits, atol=1e-4, rtol=1e-4)
    assert (ablated - before).abs().max() > 1e-3


def test_run_ablation_end_to_end(lm):
    stream = windows("builtin:prose", lm.tokenizer, 32, 4, batch_size=4)
    config = AblateConfig(fractions=(0.05,), n_random=1, score_windows=2)
    curve, scores, meta = run_ablation(lm, stream, config)
    ids = torch.cat(list(stream))
    hf_loss = lm.model(ids, labels=ids).loss.item()  # HF's own shifted mean cross-entropy
    assert meta["base_loss"] == pytest.approx(hf_loss, abs=1e-4)
    assert len(scores) == 30 * 9
    assert scores.groupby("layer")["ahon_ln"].mean().to_numpy() == pytest.approx(1.0, abs=1e-9)
    assert set(curve["selection"]) == {"lowest-ahon-ln", "highest-hard-sink", "random"}
    assert (curve["n_heads"] == 14).all()  # round(0.05 · 270)
