"""Head-class prevalence checked whole: the per-window and per-head tables against scores written as loops over
plain `transformers` eager maps, the shares of a hand-made table by hand (one window: no interval), `run_prevalence`'s
meta and `save_prevalence`'s files read back (mutmut draw 54)."""

from __future__ import annotations

import json
import math
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from tests.integration.test_mutants_round5_eviction import page_parts, page_settings
from tests.integration.test_prevalence import BOS, VOCAB, _lm, brute_class

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.prevalence import run_prevalence, save_prevalence, shares

T = 10
CLASSES = ("sink", "diagonal", "previous-token", "dense", "mixed")


class Batches(list):
    def identity(self) -> dict:
        return {"source": "hand-made ids"}


def _scores(A: np.ndarray) -> tuple[float, float, float, float]:
    n = A.shape[0]
    ent = sum(-sum(p * math.log(p) for p in A[t, : t + 1] if p > 0) / math.log(t + 1) for t in range(1, n)) / (n - 1)
    return (sum(A[t, 0] for t in range(n)) / n, sum(A[t, t] for t in range(1, n)) / (n - 1),
            sum(A[t, t - 1] for t in range(1, n)) / (n - 1), ent)  # fmt: skip


def _class_of(scores, epsilon: float) -> str:
    for name, value, threshold in zip(CLASSES, scores, (epsilon, 0.5, 0.5, 0.7)):
        if value > threshold:
            return name
    return "mixed"


def test_window_and_head_tables_against_loops(tmp_path):
    lm = _lm()
    lm = type(lm)(model=lm.model, tokenizer=None, family=lm.family, identity={"name": "tiny-llama"})
    ids = torch.randint(3, VOCAB, (5, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    epsilon = 0.15
    before = time.perf_counter()
    result = run_prevalence(lm, Batches([ids[:3], ids[3:]]), epsilon)
    elapsed = time.perf_counter() - before
    lm.model.set_attn_implementation("eager")
    maps = lm.model(input_ids=ids, output_attentions=True).attentions
    windows = result["windows"].set_index(["window", "layer", "head"])
    heads = result["heads"].set_index(["layer", "head"])
    assert len(windows) == 5 * 2 * 4 and len(heads) == 2 * 4
    seen = set()
    for layer, attn in enumerate(maps):
        for h in range(4):
            per_window = [_scores(attn[b, h].double().numpy()) for b in range(5)]
            classes = [brute_class(attn[b, h].double().numpy(), epsilon) for b in range(5)]
            for b in range(5):
                row = windows.loc[(b, layer, h)]
                assert tuple(row[["sink_score", "diag_score", "prev_score", "entropy"]]) == pytest.approx(
                    per_window[b], abs=1e-9)
                assert row["class"] == classes[b]
            mean = np.mean(per_window, axis=0)
            assert tuple(heads.loc[(layer, h), ["sink_score", "diag_score", "prev_score", "entropy"]]) == \
                pytest.approx(tuple(mean), abs=1e-9)
            assert heads.loc[(layer, h), "class_of_mean"] == _class_of(mean, epsilon)
            for name in CLASSES:  # a class no window of the head took is a 0 share, not missing
                column = f"frac_{name}"
                assert heads.loc[(layer, h)].get(column, 0.0) == pytest.approx(classes.count(name) / 5)
            seen |= set(classes)
    assert len(seen) >= 2
    meta = result["meta"]
    assert meta["epsilon"] == epsilon and meta["model"] == {"name": "tiny-llama"}
    assert meta["corpus"] == {"source": "hand-made ids"} and meta["n_windows"] == 5
    assert 0 < meta["timings"]["seconds"] <= elapsed
    out = save_prevalence(tmp_path / "prev", result)
    for name, key in (("prevalence.parquet", "layers"), ("prevalence_heads.parquet", "heads"),
                      ("prevalence_windows.parquet", "windows")):  # fmt: skip
        pd.testing.assert_frame_equal(pd.read_parquet(out / name), result[key])
    assert json.loads((out / "prevalence.json").read_text()) == json.loads(json.dumps(meta))
    assert (out / "figures" / "prevalence.png").read_bytes()[:4] == b"\x89PNG"
    assert page_settings(out / "report.html") == {"model": "tiny-llama", "corpus": "hand-made ids", "windows": "5",
                                                  "ε": "0.15", "seconds": f"{meta['timings']['seconds']:.1f}"}
    page = (out / "report.html").read_text()
    parts = page_parts(out / "report.html")
    assert parts["title"] == "sinkscope prevalence: tiny-llama" and parts["captions"] == ["Head classes by layer"]
    assert parts["intro"] == ("Share of heads in each class, each head classified in each window; mean over windows "
                              "with a 95 % interval. Definitions in docs/experiments.md.")
    assert parts["headings"][:2] == ["Whole model (prevalence.parquet, layer −1)", "Per layer (prevalence.parquet)"]
    whole = page.split("<h2>Whole model (prevalence.parquet, layer −1)</h2>")[1].split("</table>")[0]
    per_layer = page.split("<h2>Per layer (prevalence.parquet)</h2>")[1].split("</table>")[0]
    assert whole.count("<tr>") == 1 + 5 and per_layer.count("<tr>") == 1 + 2 * 5  # header + rows
    assert ">layer<" not in whole and ">-1<" not in per_layer
    with pytest.raises(SinkscopeError):
        save_prevalence(out, result)
    save_prevalence(out, result, overwrite=True)
    unnamed = page_settings(save_prevalence(tmp_path / "u", {**result, "meta": {**meta, "model": None,
                                                                                "corpus": {}}}) / "report.html")
    assert (unnamed["model"], unnamed["corpus"]) == ("unnamed model", "–")


def test_shares_by_hand():
    rows = [(0, 0, 0, "sink"), (0, 0, 1, "sink"), (0, 1, 0, "dense"), (0, 1, 1, "sink"),
            (1, 0, 0, "sink"), (1, 0, 1, "mixed"), (1, 1, 0, "dense"), (1, 1, 1, "dense"),
            (2, 0, 0, "diagonal"), (2, 0, 1, "sink"), (2, 1, 0, "sink"), (2, 1, 1, "sink")]  # fmt: skip
    table = shares(pd.DataFrame(rows, columns=["window", "layer", "head", "class"])).set_index(["layer", "class"])
    z = 1.959963984540054
    for layer, per_window in ((0, [1, 0.5, 0.5]), (1, [0.5, 0, 1]), (-1, [0.75, 0.25, 0.75])):  # sink shares
        values = np.array(per_window)
        half = z * values.std(ddof=1) / math.sqrt(3)
        got = table.loc[(layer, "sink")]
        assert (got["share"], got["share_lo"], got["share_hi"]) == pytest.approx((values.mean(), values.mean() - half,
                                                                                  values.mean() + half))
        assert got["n_windows"] == 3
    assert table.loc[(0, "previous-token"), ["share", "share_lo", "share_hi"]].tolist() == [0, 0, 0]
    assert table.loc[(-1, "dense"), "share"] == pytest.approx((0.25 + 0.5 + 0) / 3)
    assert list(table.index.get_level_values(0).unique()) == [-1, 0, 1]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one window: no interval, and no sd of one value computed (a warning)
        one = shares(pd.DataFrame(rows[:4], columns=["window", "layer", "head", "class"]))
    one = one.set_index(["layer", "class"])
    assert one.loc[(1, "sink"), "share"] == 0.5
    assert np.isnan(one.loc[(1, "sink"), "share_lo"]) and np.isnan(one.loc[(1, "sink"), "share_hi"])
