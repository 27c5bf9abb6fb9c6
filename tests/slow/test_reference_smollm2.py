"""SmolLM2 at a real run's size (T = 256, 4 windows in one batch): every documented column of the rows, fused and
block paths equals the independent eager reference (tests/integration/eager_reference.py). At this size the
default block budget already cuts each layer into several query blocks, as it does in real runs. The half-space
certificates are left out (their sample of 256 of the 1020 context inputs is random; the tiny-model test checks
them on every input)."""

from __future__ import annotations

import pytest
import torch

from integration.eager_reference import analyze_on_path, compare, eager_reference
from sinkscope.capture import fused_cpu
from sinkscope.corpus.windows import windows
from sinkscope.models.load import load_model
from sinkscope.pipelines.analysis import AnalyzeConfig

pytestmark = pytest.mark.slow

T, N = 256, 4
CONFIG = AnalyzeConfig(epsilon=0.3, delta=0.1, tau=0.1, epsilons=(0.8,), geometry_cap=0)


def test_smollm2_every_column_equals_the_eager_reference_on_every_path(monkeypatch):
    lm = load_model("smollm2-135m")
    stream = windows("builtin:prose", lm.tokenizer, seq_len=T, max_windows=N, batch_size=N)
    ids = torch.cat(list(stream))
    assert ids.shape == (N, T)
    ref = eager_reference(lm.model, ids, CONFIG.epsilon, CONFIG.delta, CONFIG.tau, CONFIG.epsilons, geometry=False,
                          tokenizer=lm.tokenizer)
    assert ref.exercised["hard_sink"] > 0 and ref.exercised["off"] > 0 and ref.exercised["sink_frac"] > 0
    for path in ("default", "fused", "blocks"):
        run, taken, starts = analyze_on_path(lm, stream, CONFIG, path, monkeypatch)
        default = "compiled" if fused_cpu.available() else "rows"  # the CPU's route for plain causal layers
        assert set(taken) == {default if path == "default" else path}, taken
        assert path != "blocks" or len(set(starts)) > 1, "one block per layer"
        tables = {"heads": run.heads, "layers": run.layers, "positions": run.positions, **run.extra}
        compare(tables, run.meta["summary"], ref, f"smollm2 {path}:")
