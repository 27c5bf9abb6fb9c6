"""Survivors of the sampled mutmut run over `reproduction/` (docs/testing.md, "Mutation tool") that only a whole
`reproduce` shows: the sink-query ablation's windows follow the configured seed, and the last line tells the user
where the report is. One `reproduce` on a tiny random Llama directory with every count at 1 or 2 (~5 s)."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from sinkscope.corpus.windows import windows
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.run import reproduce

from .tiny_checkpoint import save_tiny_llama

SEED = 3  # not the default 0: windows of builtin:random drawn with seed 0 are other tokens
SEQ_LEN = 8


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """`reproduce` with builtin:random as its main corpus (its windows are the only ones a seed draws), the regime
    map off and every count at its smallest; returns the model directory, the output directory and stderr."""
    model = str(save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama"))
    out = tmp_path_factory.mktemp("repro")
    config = ReproduceConfig.preset(
        True, models=(model,), corpora=("builtin:random",), seq_len=SEQ_LEN, geometry_cap=8, regimes=False,
        windows=1, anchor_windows=1, ablation_windows=2, random_draws=1, bos_draws=1, certificate_windows=1,
        certificate_controls=1, cost_contexts=(2,), cost_windows=1, cost_exact_Ts=(2,), seed=SEED,
    )  # fmt: skip
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr):
        reproduce(config, out)
    return model, out, stderr.getvalue()


def plain_losses(model_dir: str, seed: int) -> np.ndarray:
    """Each window's mean next-token cross-entropy from plain `transformers` (`labels=ids`), on the windows of
    builtin:random drawn with `seed`."""
    model = LlamaForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    with torch.no_grad():
        return np.array([
            model(input_ids=ids, labels=ids).loss.item()
            for batch in windows("builtin:random", tokenizer, SEQ_LEN, 2, seed=seed, batch_size=1)
            for ids in batch.split(1)
        ])  # fmt: skip


def test_the_sink_query_ablation_runs_on_the_windows_of_the_configured_seed(run):
    """The clean loss of each window in `sink-queries/` is the plain model's loss on the seed's windows, not on the
    default seed's (windows drawn without `seed=` would give the second)."""
    model, out, _ = run
    (npz,) = out.rglob("sink-queries/sink_queries.npz")
    with np.load(npz) as data:
        base = data["base"]
    expected, default = plain_losses(model, SEED), plain_losses(model, 0)
    assert np.abs(expected - default).min() > 1e-3  # the two seeds' windows differ
    np.testing.assert_allclose(base, expected, rtol=0, atol=1e-5)


def test_the_last_line_names_the_report_that_was_written(run):
    """What the user reads last: `[reproduce HH:MM:SS] done in N s: OUT/report.html`, naming the file just written."""
    _, out, stderr = run
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("[reproduce ") and "] done in " in last
    assert last.endswith(f" s: {out / 'report.html'}")
    assert (out / "report.html").stat().st_size > 0
