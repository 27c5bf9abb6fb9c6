"""Gaps of issue 34 in the resume identity (`analyze(..., resume=True)`): every input that a checkpoint's numbers
depend on — each threshold and field of `AnalyzeConfig`, the model identity, the corpus identity, the world size,
the smoothing layers, the token ids of the analysed windows — refuses a resume when it changes, naming what
changed; what the numbers do not depend on (more windows after those analysed, another batch size) resumes, and
gives the uninterrupted run's tables."""

from __future__ import annotations

import dataclasses
import shutil

import pandas as pd
import pytest

import sinkscope.pipelines.analysis as analysis
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import build, token_windows

CONFIG = AnalyzeConfig(epsilon=0.3, delta=0.2, tau=0.4, geometry_cap=0, seed=3, epsilons=(0.2,))
FIRST = 4  # windows analysed before the "interruption"
# One changed value per field of AnalyzeConfig (a new field without one fails test_every_config_field_is_listed).
CHANGED = dict(epsilon=0.31, delta=0.21, tau=0.41, geometry_cap=8, seed=4, epsilons=(0.25,), diagonal=0.55,
               previous=0.45, dense=0.75, learned_sink=0.2, attention_precision="model")  # fmt: skip


@pytest.fixture(scope="module")
def interrupted(tmp_path_factory):
    """A checkpoint of the first FIRST windows (kept: only the caller removes a checkpoint)."""
    lm, ids = build("llama"), token_windows(8)
    checkpoint = tmp_path_factory.mktemp("resume") / "checkpoint"
    analyze(lm, TokenWindows(ids[:FIRST], batch_size=2), CONFIG, progress=False, checkpoint_dir=checkpoint,
            checkpoint_every=2)  # fmt: skip
    assert (checkpoint / "rank0.safetensors").is_file()
    return lm, ids, checkpoint


def resume(tmp_path, interrupted, ids=None, config=CONFIG, lm=None, batch_size=2, source="tensor", **kwargs):
    base_lm, base_ids, checkpoint = interrupted
    copy = tmp_path / "checkpoint"
    shutil.copytree(checkpoint, copy)
    windows = TokenWindows(base_ids if ids is None else ids, batch_size=batch_size, source=source)
    return analyze(lm or base_lm, windows, config, progress=False, checkpoint_dir=copy, checkpoint_every=2,
                   resume=True, **kwargs)  # fmt: skip


def refused(tmp_path, interrupted, **kwargs) -> str:
    with pytest.raises(SinkscopeError) as err:
        resume(tmp_path, interrupted, **kwargs)
    return str(err.value)


def test_every_config_field_is_listed():
    assert set(CHANGED) == {f.name for f in dataclasses.fields(AnalyzeConfig)}


@pytest.mark.parametrize("field", sorted(CHANGED))
def test_a_changed_config_field_is_refused(field, tmp_path, interrupted):
    line = refused(tmp_path, interrupted, config=dataclasses.replace(CONFIG, **{field: CHANGED[field]}))
    assert "belongs to a different analysis" in line and f"config.{field}:" in line, line


def test_changed_model_corpus_world_or_smoothing_is_refused(tmp_path, interrupted, monkeypatch):
    lm, ids, _ = interrupted
    other = LoadedModel(model=lm.model, tokenizer=None, family=lm.family, identity={"name": "llama-2"})
    assert "model.name: llama in the checkpoint, llama-2 now" in refused(tmp_path / "m", interrupted, lm=other)
    line = refused(tmp_path / "s", interrupted, source="other")
    assert "corpus.source: " in line and "other now" in line, line
    bos = ids.clone()
    bos[:, 0] = 5
    assert "corpus.bos_id: 0 in the checkpoint, 5 now" in refused(tmp_path / "b", interrupted, ids=bos)
    shorter = ids[:, :-1]
    assert "corpus.seq_len" in refused(tmp_path / "t", interrupted, ids=shorter)
    assert "smoothing" in refused(tmp_path / "sm", interrupted, smoothing=[1])
    monkeypatch.setattr(analysis, "distributed_shard", lambda: (0, 2))
    assert "world: 1 in the checkpoint, 2 now" in refused(tmp_path / "w", interrupted)


def test_other_or_fewer_token_ids_are_refused(tmp_path, interrupted):
    _, ids, _ = interrupted
    edited = ids.clone()
    edited[FIRST - 1, 5] = (edited[FIRST - 1, 5] % 90) + 1  # one token of the last analysed window
    for line in (refused(tmp_path / "e", interrupted, ids=edited), refused(tmp_path / "f", interrupted,
                                                                          ids=ids[: FIRST - 1])):  # fmt: skip
        assert line.startswith("checkpoint ") and line.endswith("since); rerun without --resume"), line
    assert "now have other token ids" in refused(tmp_path / "e2", interrupted, ids=edited)
    assert "now have fewer windows" in refused(tmp_path / "f2", interrupted, ids=ids[: FIRST - 1])


def test_more_windows_and_another_batch_size_resume_to_the_uninterrupted_result(tmp_path, interrupted):
    lm, ids, _ = interrupted
    resumed = resume(tmp_path, interrupted, batch_size=3)
    fresh = analyze(lm, TokenWindows(ids, batch_size=2), CONFIG, progress=False)
    assert resumed.meta["corpus"]["windows"] == fresh.meta["corpus"]["windows"] == len(ids)
    for name in ("heads", "layers", "positions"):
        pd.testing.assert_frame_equal(getattr(resumed, name), getattr(fresh, name), rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("field", ["epsilon", "delta", "tau", "epsilons"])
@pytest.mark.parametrize("value", [0.0, 1.0])
def test_thresholds_at_zero_or_one_are_refused(field, value):
    """ε, δ and τ lie strictly between 0 and 1 (each end on its own: 1 − δ = 0 or τ = 1 are not thresholds)."""
    with pytest.raises(SinkscopeError, match=f"--{field} {value} must lie strictly between 0 and 1"):
        AnalyzeConfig(**{field: (value,) if field == "epsilons" else value})
    AnalyzeConfig(**{field: (0.999,) if field == "epsilons" else 0.001})


def test_a_reordered_epsilons_resumes_each_count_under_its_own_epsilon(tmp_path):
    """Issue 32, item 16: `epsilons` given in another order on resume is the same analysis. The checkpoint keeps a
    count per ε in the order first given; the resumed run counts in that order and lists the result in the order
    asked for, so every ε's sink rate equals that of an uninterrupted run (in either order). Another set of ε is
    still refused."""
    lm, ids = build("llama"), token_windows(8)
    first = dataclasses.replace(CONFIG, epsilons=(0.2, 0.35, 0.25))
    checkpoint = tmp_path / "checkpoint"
    analyze(lm, TokenWindows(ids[:FIRST], batch_size=2), first, progress=False, checkpoint_dir=checkpoint,
            checkpoint_every=2)  # fmt: skip
    reordered = dataclasses.replace(CONFIG, epsilons=(0.35, 0.25, 0.2))
    kept = tmp_path / "kept"
    shutil.copytree(checkpoint, kept)
    resumed = analyze(lm, TokenWindows(ids, batch_size=2), reordered, progress=False, checkpoint_dir=checkpoint,
                      checkpoint_every=2, resume=True)  # fmt: skip
    fresh = analyze(lm, TokenWindows(ids, batch_size=2), first, progress=False)
    fresh_reordered = analyze(lm, TokenWindows(ids, batch_size=2), reordered, progress=False)
    rates = resumed.meta["summary"]["sink_rates"]
    assert len(set(rates.values())) == 4  # ε = 0.3, 0.35, 0.25, 0.2 give four rates: a swap would show
    assert rates == fresh.meta["summary"]["sink_rates"]
    assert resumed.meta["summary"] == fresh_reordered.meta["summary"] and list(rates) == ["0.3", "0.35", "0.25", "0.2"]
    assert resumed.meta["config"] == fresh_reordered.meta["config"]
    for name in ("heads", "layers", "positions"):
        pd.testing.assert_frame_equal(getattr(resumed, name), getattr(fresh, name), rtol=1e-6, atol=1e-9)
    with pytest.raises(SinkscopeError, match="config.epsilons"):
        analyze(lm, TokenWindows(ids, batch_size=2), dataclasses.replace(CONFIG, epsilons=(0.35, 0.2)),
                progress=False, checkpoint_dir=kept, checkpoint_every=2, resume=True)  # fmt: skip
