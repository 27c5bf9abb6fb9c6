"""Keep-the-sink on the embedded SmolLM2: with a short recent window, keeping BOS lowers the loss (the model needs
its sink), and the full-cache row equals the plain `transformers` loss of the same windows."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from sinkscope.corpus.windows import windows
from sinkscope.models.load import embedded_installed, load_model
from sinkscope.pipelines.eviction import EvictConfig, run_eviction

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not embedded_installed("smollm2-135m"), reason="embedded smollm2-135m not installed"),
]


def test_smollm2_needs_its_sink():
    lm = load_model("smollm2-135m")
    stream = windows("builtin:prose", lm.tokenizer, 40, 3, batch_size=3)
    losses, summary, _ = run_eviction(lm, stream, EvictConfig(window=8, ks=(0, 1)))
    rows = summary.set_index(["policy", "k"])
    assert rows.loc[("first", 1), "delta_recent_hi"] < -0.5  # keeping BOS recovers more than 0.5 nats/token
    ids = next(iter(stream))
    with torch.no_grad():
        logits = lm.model(input_ids=ids).logits
    ce = F.cross_entropy(logits[:, :-1].transpose(1, 2), ids[:, 1:], reduction="none")[:, 8:].double().mean(1)
    full = losses[losses["policy"] == "full"].sort_values("window")["loss"].to_numpy()
    torch.testing.assert_close(torch.tensor(full), ce, atol=1e-4, rtol=1e-4)
