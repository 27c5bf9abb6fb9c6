"""Tests killing mutmut draw 56 survivors in `synthetic.boundary_runs` (issue 50, item 1); no real training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic import boundary_runs
from sinkscope.synthetic.boundary_runs import BoundarySetting, boundary_row, run_boundary

SUMMARY = {"switch_head_final": {"bos_attn": 0.75, "diag_attn": 0.125, "entropy": 0.5},
           "switch_head": {"pattern": "sink"}, "copy_acc": 0.9, "seconds": 3.0}  # fmt: skip


def test_boundary_row_keys_are_the_documented_columns() -> None:
    """Hand-written row for V = 5, T = 8, d = 16 (r = 15 ≥ T + 1, so the sink is predicted)."""
    row = boundary_row(BoundarySetting(5, 8, 16), 2, SUMMARY, 7)
    assert row["vocab_size"] == 5
    assert row["width"] == 16
    assert row["seed"] == 2
    assert list(row) == ["setting", "vocab_size", "contexts", "width", "rank", "p_h1", "predicted", "seed",
                         "pattern", "matches", "bos_mass", "diag_mass", "entropy", "copy_acc", "steps",
                         "seconds"]  # fmt: skip


def test_boundary_setting_accepts_width_two_and_names_the_limits() -> None:
    """width = 2 is the documented minimum (width ≥ 2); the error message states the limits."""
    assert BoundarySetting(4, 3, 2).rank == 1
    with pytest.raises(SinkscopeError, match="width ≥ 2, contexts ≥ 3, vocab_size ≥ 4"):
        BoundarySetting(4, 3, 1)


def test_train_overwrites_and_keeps_quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """`_train` calls `train_bb(config, run_dir, overwrite=True, log=False)` exactly (identity, not truthiness)."""
    calls = []
    monkeypatch.setattr(boundary_runs, "train_bb", lambda c, d, **kw: calls.append(kw) or SUMMARY)
    boundary_runs._train(None, tmp_path)
    assert calls == [{"overwrite": True, "log": False}]
    assert calls[0]["overwrite"] is True
    assert calls[0]["log"] is False


def test_run_boundary_reused_runs_give_columns_in_documented_order(tmp_path: Path) -> None:
    """Two reused summaries: the frame's columns are the 16 documented names, in order."""
    setting = BoundarySetting(5, 8, 16)
    for seed in (0, 1):
        run_dir = tmp_path / setting.name / f"seed_{seed}"
        run_dir.mkdir(parents=True)
        (run_dir / "summary.json").write_text(json.dumps(SUMMARY))
    frame = run_boundary(tmp_path, settings=(setting,), seeds=(0, 1), steps=7)
    assert list(frame.columns) == ["setting", "vocab_size", "contexts", "width", "rank", "p_h1", "predicted",
                                   "seed", "pattern", "matches", "bos_mass", "diag_mass", "entropy", "copy_acc",
                                   "steps", "seconds"]  # fmt: skip
    assert list(frame["seed"]) == [0, 1]


class _FakePool:
    """Stands in for `ProcessPoolExecutor`: records its arguments and runs each job inline."""

    made: list = []

    def __init__(self, workers: int, mp_context) -> None:
        _FakePool.made.append((workers, mp_context.get_start_method()))

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def submit(self, fn, *args):
        class _Done:
            def result(self_inner):
                return fn(*args)

        return _Done()


def test_run_boundary_uses_a_spawn_pool_for_several_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """workers = 2 and two runs to do: one pool of 2 spawn workers; workers = 1: no pool."""
    import concurrent.futures

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", _FakePool)
    monkeypatch.setattr(boundary_runs, "train_bb", lambda c, d, **kw: SUMMARY)
    _FakePool.made = []
    frame = run_boundary(
        tmp_path / "a", settings=(BoundarySetting(5, 8, 16),), seeds=(0, 1), steps=7, workers=2
    )
    assert _FakePool.made == [(2, "spawn")]
    assert len(frame) == 2
    _FakePool.made = []
    run_boundary(tmp_path / "b", settings=(BoundarySetting(5, 8, 16),), seeds=(0, 1), steps=7, workers=1)
    assert _FakePool.made == []


def test_run_boundary_with_no_runs_still_has_the_columns(tmp_path: Path) -> None:
    """No seeds: an empty table that still carries the 16 documented columns (so callers can select them)."""
    frame = run_boundary(tmp_path, settings=(BoundarySetting(5, 8, 16),), seeds=(), steps=7)
    assert len(frame) == 0
    assert len(frame.columns) == 16
    assert list(frame.columns)[:4] == ["setting", "vocab_size", "contexts", "width"]


def test_bool_mask_is_always_materialised_causal() -> None:
    """Plain causal 3 × 3 (no padding): the lower triangle, as a bool tensor (never None), by keyword or position."""
    import torch

    from sinkscope.pipelines.masked_attention import _bool_mask

    expected = torch.tensor([[True, False, False], [True, True, False], [True, True, True]])
    by_keyword = _bool_mask(batch_size=1, q_length=3, kv_length=3)
    assert by_keyword is not None
    assert torch.equal(by_keyword.reshape(3, 3), expected)
    assert torch.equal(_bool_mask(1, 3, 3).reshape(3, 3), expected)


def test_kv_head_count_names_a_config_without_name_or_type() -> None:
    """A config with neither name_or_path nor model_type is called "the model" in the error, not an AttributeError."""
    from types import SimpleNamespace

    from sinkscope.pipelines.kv_plan import kv_head_count

    with pytest.raises(SinkscopeError, match="the config of the model names no num_key_value_heads"):
        kv_head_count(SimpleNamespace(num_attention_heads=4, num_hidden_layers=2))
