"""Draw 56's survivors in the KV plans (`pipelines.kv_plan`, `pipelines.kv_plan_eval`), closed against hand values.

- `compare` with the model replaced by a known loss: every streamed KV head i adds c_i to each window's loss, so
  every row (policy, draw, n_full, share, memory), the oracle's table and the progress bar's count follow by hand.
- `summarize` of one window (no interval), `figure` read back from its Axes (lines, the random band, labels).
- The plan folder: written twice into one place, `config.json` as indented JSON, extra tables without their index;
  read back clipped to [0, 1] and as UTF-8 whatever the platform's encoding.
"""

from __future__ import annotations

import io
import json

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines import kv_plan_eval
from sinkscope.pipelines.kv_plan import PlanConfig, read_plan, write_plan
from sinkscope.pipelines.kv_plan_eval import EvalConfig, compare, figure, summarize
from sinkscope.reproduction.kv_plan_claims import kv_plan_table, kv_plan_verdict
from sinkscope.reproduction.verdicts import PARTLY

L, KV, GROUP, T, SINK, RECENT = 2, 2, 2, 12, 1, 3
# the loss each streamed KV head (flat index l · KV + kv) adds to every window
COST = np.array([0.1, 0.2, 0.4, 0.8])


def _known_scores(lm, probes, masks, span, recent_size):
    """Stands in for the model: window w's loss is w + Σ COST over the streamed KV heads, its accuracy 1 − that sum /
    2; a KV head counts as full when its query heads see every causal key, and the masks must be (L, H, T, T)."""
    streamed = np.zeros(L * KV, dtype=bool)
    if masks is not None:
        assert masks.shape == (L, KV * GROUP, T, T)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        first = masks[:, ::GROUP]  # (L, KV, T, T): the first query head of each KV head
        streamed = np.array([not torch.equal(m, causal) for m in first.reshape(L * KV, T, T)])
    lost = float(COST[streamed].sum())
    windows = sum(p.shape[0] for p in probes)
    return np.array([[w + lost, 1 - lost / 2] for w in range(windows)])


def test_compare_rows_oracle_and_progress_against_a_known_loss(monkeypatch, capsys):
    monkeypatch.setattr(kv_plan_eval, "window_scores", _known_scores)
    probes = [torch.zeros(2, T, dtype=torch.long)]
    plan = np.array([[True, False], [False, False]])  # flat head 0 full
    config = EvalConfig(shares=(0.5,), draws=2, span=4)
    rows, oracle = compare(None, probes, {"sinkscope": np.array([0, 1, 2, 3])}, (L, KV, GROUP), SINK, RECENT, config,
                           plan=plan, progress=True)  # fmt: skip
    assert oracle.to_dict("list") == {"layer": [0, 0, 1, 1], "kv_head": [0, 1, 0, 1],
                                      "loss_increase": pytest.approx(list(COST))}  # fmt: skip
    streaming_memory = (SINK + RECENT) / T
    half_memory = (2 * T + 2 * (SINK + RECENT)) / (4 * T)
    expected = {  # policy → (draw, n_full, share, memory, Σ COST of the streamed heads)
        "full": (0, 4, 1.0, 1.0, 0.0),
        "streaming": (0, 0, 0.0, streaming_memory, 1.5),
        "sinkscope": (0, 2, 0.5, half_memory, 1.2),  # heads 0, 1 full
        "oracle": (0, 2, 0.5, half_memory, 0.3),  # the two costliest (3, 2) full
        "plan": (0, 1, 0.25, (T + 3 * (SINK + RECENT)) / (4 * T), 1.4),
    }
    for policy, (draw, n, share, memory, lost) in expected.items():
        got = rows[rows["policy"] == policy]
        assert got["window"].tolist() == [0, 1], policy
        assert (got["draw"] == draw).all() and (got["n_full"] == n).all(), policy
        assert got["share"].tolist() == pytest.approx([share] * 2), policy
        assert got["memory"].tolist() == pytest.approx([memory] * 2), policy
        assert got["loss"].tolist() == pytest.approx([lost, 1 + lost]), policy
        assert got["accuracy"].tolist() == pytest.approx([1 - lost / 2] * 2), policy
    random = rows[rows["policy"] == "random"]
    assert sorted(set(random["draw"])) == [0, 1] and (random["share"] == 0.5).all()
    # the bar: 4 oracle runs, then per count the sinkscope and oracle orders, 2 draws, and the plan
    final = capsys.readouterr().err.replace("\r", "\n").strip().splitlines()[-1]
    assert "9/9" in final, final


def test_summarize_of_one_window_has_no_interval():
    rows = pd.DataFrame([{"policy": p, "draw": 0, "n_full": n, "share": n / 4, "memory": m, "window": 0,
                          "loss": loss, "accuracy": 0.5}
                         for p, n, m, loss in [("full", 4, 1.0, 2.0), ("sinkscope", 1, 0.4, 2.5)]])  # fmt: skip
    summary = summarize(rows).set_index("policy")
    assert summary.loc["sinkscope", "share"] == 0.25 and summary.loc["full", "share"] == 1.0
    assert summary.loc["sinkscope", "delta_full"] == pytest.approx(0.5)
    assert np.isnan(summary.loc["sinkscope", ["delta_lo", "delta_hi"]].astype(float)).all()


def test_figure_lines_band_and_labels_from_a_hand_summary():
    summary = pd.DataFrame([
        {"policy": "streaming", "memory": 0.2, "loss": 3.0, "accuracy": 0.1, "delta_full": 1.0},
        {"policy": "full", "memory": 1.0, "loss": 2.0, "accuracy": 0.9, "delta_full": 0.0},
        {"policy": "plan", "memory": 0.6, "loss": 2.4, "accuracy": 0.7, "delta_full": 0.4},
        {"policy": "random", "memory": 0.6, "loss": 2.7, "accuracy": 0.5, "delta_full": 0.7, "delta_lo": 0.5,
         "delta_hi": 0.9, "accuracy_lo": 0.4, "accuracy_hi": 0.6},
    ])  # fmt: skip
    fig = figure(summary, "tiny: sink 1 + recent 3")
    loss_ax, acc_ax = fig.axes
    plan = next(line for line in loss_ax.get_lines() if line.get_label() == "plan")
    assert plan.get_color() == "#1e8449"
    assert list(plan.get_xdata()) == [0.2, 0.6, 1.0] and list(plan.get_ydata()) == [3.0, 2.4, 2.0]
    (band,) = loss_ax.collections  # the random draws' Δ range, shifted to the loss: 2.7 − 0.7 + (0.5, 0.9)
    edges = {round(float(y), 9) for x, y in band.get_paths()[0].vertices if x == pytest.approx(0.6)}
    assert edges == {2.5, 2.9}
    assert band.get_alpha() == 0.5  # half transparent: the lines show through
    assert acc_ax.get_ylabel() == "copy accuracy" and loss_ax.get_ylabel() == "loss beyond the window (nats)"
    assert fig._suptitle.get_text() == "tiny: sink 1 + recent 3" and fig._suptitle.get_fontsize() == 10


@pytest.mark.parametrize(("draws", "span"), [(0, 16), (20, 1)])
def test_eval_config_refuses_each_bad_count(draws, span):
    with pytest.raises(SinkscopeError, match=f"--draws {draws} must be ≥ 1 and --span {span} ≥ 2"):
        EvalConfig(draws=draws, span=span)


def _scores() -> pd.DataFrame:
    return pd.DataFrame({"layer": [0, 0], "kv_head": [0, 1], "kept": [0.9, 0.2], "sink_score": [0.5, 0.1],
                         "diag_score": [0.3, 0.05], "prev_score": [0.1, 0.05], "far_mass": [0.05, 0.6],
                         "classes": ["sink×2", "mixed×2"]})  # fmt: skip


def test_plan_folder_rewritten_in_place_with_indented_config_and_no_index(tmp_path):
    folder, config = tmp_path / "plan", PlanConfig(share=0.5, sink_size=2, recent_size=8)
    write_plan(folder, np.array([[0.2, 0.9]]), _scores(), config, {"model": {"name": "tiny"}})
    extra = pd.DataFrame({"a": [1, 2, 3]}, index=[7, 5, 6]).iloc[[2, 0]]  # a filtered table, index not 0..n−1
    meta = {"model": {"name": "tiny"}}
    write_plan(folder, np.array([[0.9, 0.2]]), _scores(), config, meta, extra={"x.parquet": extra})
    assert (folder / "full_attention_heads.tsv").read_text() == "0.900000\t0.200000\n"
    expected = {"sink_size": 2, "recent_size": 8, "sinkscope": {"plan": {"share": 0.5, "sink_size": 2, "recent_size": 8,
                                                                          "rule": "measures"}, "model": {"name": "tiny"}}}  # fmt: skip
    assert (folder / "config.json").read_text() == json.dumps(expected, indent=2)
    assert pq.read_schema(folder / "x.parquet").names == ["a"]
    assert pd.read_parquet(folder / "x.parquet").to_dict("list") == {"a": [3, 1]}


def _hand_plan(folder, values: str, config: bytes) -> None:
    folder.mkdir()
    (folder / "full_attention_heads.tsv").write_text(values)
    (folder / "config.json").write_bytes(config)


def test_read_plan_clips_to_the_unit_interval(tmp_path):
    _hand_plan(tmp_path / "p", "1.5\t-0.5\n0.25\t1.0\n", b'{"sink_size": 4, "recent_size": 8}')
    values, sink, recent = read_plan(tmp_path / "p", 2, 2)
    assert values.tolist() == [[1.0, 0.0], [0.25, 1.0]] and (sink, recent) == (4, 8)


def test_read_plan_reads_utf8_config_whatever_the_platform_encoding(tmp_path, monkeypatch):
    note = '{"sink_size": 4, "recent_size": 8, "note": "K\u00f6ln \u2014 plan"}'.encode()
    _hand_plan(tmp_path / "p", "0.9\t0.1\n", note)
    # a C locale without UTF-8 mode: files opened without an encoding decode as ASCII
    monkeypatch.setattr(io, "text_encoding", lambda encoding, stacklevel=2: encoding or "ascii")
    assert read_plan(tmp_path / "p", 1, 2)[1:] == (4, 8)


def _claim_losses(noise: float) -> dict[str, np.ndarray]:
    """8 windows × 20 draws: the plan adds 0.9 nats to the full cache, each random plan 1.0 (± `noise`)."""
    rng = np.random.default_rng(5)
    full = np.linspace(2.0, 3.0, 8)
    random = full[:, None] + 1.0 + noise * rng.standard_normal((8, 20))
    return {"full": full, "plan": full + 0.9, "random": random}


def test_kv_plan_verdict_partly_between_the_two_savings_thresholds():
    verdict = kv_plan_verdict("tiny", _claim_losses(0.0))
    # saved 1 − 0.9 / 1.0 = 0.1: above partly_min 0.05, below saved_min 0.25; every resample the same
    assert verdict.evidence["saved_share"] == pytest.approx(0.1) and verdict.evidence["beats_random"] == 1.0
    assert verdict.verdict == PARTLY


def test_kv_plan_verdict_resamples_with_its_seed_default_0():
    losses = _claim_losses(0.5)
    default, zero, one = (kv_plan_verdict("tiny", losses, **seed) for seed in ({}, {"seed": 0}, {"seed": 1}))
    assert default.interval == zero.interval
    assert one.interval["low"] != zero.interval["low"]  # the seed reaches the bootstrap


def test_kv_plan_table_counts_only_draws_strictly_worse_than_the_plan():
    # a random draw can pick the plan's own heads: the same forward pass, the same loss, not beaten
    losses = {"full": np.array([1.0, 0.4]), "plan": np.array([2.0, 0.5]),
              "random": np.array([[1.0, 2.0, 3.0], [0.5, 0.5, 0.6]])}  # fmt: skip
    table = kv_plan_table(losses)
    assert table.to_dict("list") == {
        "window": [0, 1], "loss_full": [1.0, 0.4], "loss_plan": [2.0, 0.5],
        "loss_random_mean": pytest.approx([2.0, 1.6 / 3]), "loss_random_min": [1.0, 0.5],
        "loss_random_max": [3.0, 0.6], "plan_beats_share": pytest.approx([1 / 3, 1 / 3]),
    }  # fmt: skip
