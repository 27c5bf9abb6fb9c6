"""Keep-the-sink evaluation checked whole: every row of `evaluate` against a plain decoding loop over an evicting
cache and a column mass summed by hand from eager `output_attentions`; the summary against hand arithmetic; the
refusals read whole; `run_eviction`'s meta and `save_eviction`'s files read back (mutmut draw 54)."""

from __future__ import annotations

import html
import json
import re
import time
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from tests.integration.test_eviction import BOS, VOCAB, _llama, streamed_losses

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.eviction import (
    EvictConfig,
    evaluate,
    keep_mask,
    kept_sets,
    paired,
    restricted_attention,
    run_eviction,
    save_eviction,
    summarize,
)
from sinkscope.report import eviction_section

T, W = 10, 4


class Batches(list):
    """Windows as `run_eviction` reads them: an iterable of batches with a corpus identity."""

    def identity(self) -> dict:
        return {"source": "hand-made ids", "n_windows": 2}


def page_settings(path) -> dict[str, str]:
    """The settings table of a result page (`report.html`: its first table, rows `<td>key</td><td>value</td>`)."""
    page = html.unescape(path.read_text())
    settings = page.split("<table>")[1].split("</table>")[0]
    return dict(re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td></tr>", settings))


def page_parts(path) -> dict:
    """A result page's title, intro, figure captions and table headings, each whole (`results.html.j2`)."""
    page = html.unescape(path.read_text())
    return {"title": re.search(r"<title>(.*?)</title>", page).group(1),
            "intro": re.search(r"</h1>\n<p>(.*?)</p>", page, re.S).group(1),
            "captions": re.findall(r"<figcaption>(.*?)</figcaption>", page),
            "headings": re.findall(r"<h2>(.*?)</h2>", page)}  # fmt: skip


def _ids() -> torch.Tensor:
    ids = torch.randint(3, VOCAB, (2, T), generator=torch.Generator().manual_seed(5))
    ids[:, 0] = BOS
    return ids


def _column_mass_by_hand(model, ids: torch.Tensor) -> torch.Tensor:
    """Σ_t A[t, j], averaged over heads, then layers, of plain eager attention maps: (B, T)."""
    model.set_attn_implementation("eager")
    try:
        maps = model(input_ids=ids, output_attentions=True).attentions
    finally:
        model.set_attn_implementation("sdpa")
    per_layer = [sum(a[:, h].double().sum(1) for h in range(a.shape[1])) / a.shape[1] for a in maps]
    return sum(per_layer) / len(per_layer)


def test_every_row_equals_a_decoding_loop_over_an_evicting_cache():
    lm = _llama()
    ids = _ids()
    losses = evaluate(lm, [ids], EvictConfig(window=W, ks=(2, 0, 2)))
    mass = _column_mass_by_hand(lm.model, ids)
    assert list(losses.columns) == ["window", "policy", "k", "kept", "loss", "loss_all", "n_targets"]
    assert len(losses) == 2 * 4  # full, recent, first 2, top-mass 2 (k = 2 given twice counts once)
    for _, row in losses.iterrows():
        b = row["window"]
        if row["policy"] == "full":
            kept = list(range(T))  # a window of T keeps every key
        elif row["policy"] == "recent":
            kept = []
        elif row["policy"] == "first":
            kept = [0, 1]
        else:
            kept = sorted(int(j) for j in np.argsort(-mass[b].numpy(), kind="stable")[:2])
        assert row["kept"] == ("" if row["policy"] == "full" else ",".join(map(str, kept))), row
        loop = streamed_losses(lm, ids[b : b + 1], T if row["policy"] == "full" else W, kept).double()
        assert row["loss"] == pytest.approx(float(loop[W:].mean()), abs=3e-5), row
        assert row["loss_all"] == pytest.approx(float(loop.mean()), abs=3e-5), row
        assert row["n_targets"] == T - 1 - W
    assert losses.groupby("policy")["window"].apply(list).to_dict() == {p: [0, 1] for p in
                                                                      ("first", "full", "recent", "top-mass")}
    recent = losses[losses["policy"] == "recent"]["loss"].to_numpy()
    full = losses[losses["policy"] == "full"]["loss"].to_numpy()
    assert np.abs(recent - full).max() > 1e-3  # the recent window really evicted


def test_windows_number_on_across_batches_and_progress_is_quiet_by_default(capsys):
    lm = _llama()
    ids = _ids()
    losses = evaluate(lm, [ids[:1], ids[1:]], EvictConfig(window=W, ks=(0,)))
    assert sorted(losses["window"]) == [0, 0, 1, 1]
    assert capsys.readouterr().err == ""
    evaluate(lm, [ids[:1]], EvictConfig(window=W, ks=(0,)), progress=True)
    err = capsys.readouterr().err
    assert "evict" in err and "batch" in err


def test_summary_by_hand():
    rows = []
    full, recent, first = [2.0, 3.0, 4.5], [2.5, 3.0, 6.0], [2.25, 3.5, 4.5]
    top = ["0,3", "2,3", "3,0"]
    for w in range(3):
        rows += [{"window": w, "policy": "full", "k": 0, "kept": "", "loss": full[w]},
                 {"window": w, "policy": "recent", "k": 0, "kept": "", "loss": recent[w]},
                 {"window": w, "policy": "first", "k": 2, "kept": "0,1", "loss": first[w]},
                 {"window": w, "policy": "top-mass", "k": 2, "kept": top[w], "loss": first[w] + 1}]  # fmt: skip
    summary = summarize(pd.DataFrame(rows)).set_index(["policy", "k"])
    z = 1.959963984540054
    d = np.array(recent) - np.array(full)  # 0.5, 0, 1.5: mean 2/3, sd 0.7637626...
    half = z * np.sqrt(((d - d.mean()) ** 2).sum() / 2) / np.sqrt(3)
    got = summary.loc[("recent", 0)]
    assert got["loss"] == pytest.approx(23 / 6)
    assert (got["delta_full"], got["delta_full_lo"], got["delta_full_hi"]) == pytest.approx((2 / 3, 2 / 3 - half,
                                                                                             2 / 3 + half))
    e = np.array(first) - np.array(recent)  # -0.25, 0.5, -1.5
    half_e = z * np.sqrt(((e - e.mean()) ** 2).sum() / 2) / np.sqrt(3)
    got = summary.loc[("first", 2)]
    assert (got["delta_recent"], got["delta_recent_lo"], got["delta_recent_hi"]) == pytest.approx(
        (-5 / 12, -5 / 12 - half_e, -5 / 12 + half_e))
    assert summary.loc[("top-mass", 2), "bos_kept_frac"] == pytest.approx(2 / 3)
    assert summary.loc[("first", 2), "bos_kept_frac"] == 1.0 and summary.loc[("full", 0), "bos_kept_frac"] == 1.0
    assert summary.loc[("recent", 0), "bos_kept_frac"] == 0.0
    assert set(summary["n_windows"]) == {3}
    assert list(summary.index) == [("full", 0), ("recent", 0), ("first", 2), ("top-mass", 2)]
    no_recent = summarize(pd.DataFrame([r for r in rows if r["policy"] != "recent"])).set_index(["policy", "k"])
    assert no_recent.loc[("first", 2), ["delta_recent", "delta_recent_lo", "delta_recent_hi"]].isna().all()


def test_one_window_has_a_mean_but_no_interval():
    one = pd.DataFrame([{"window": 0, "policy": "full", "k": 0, "loss": 1.0},
                        {"window": 0, "policy": "first", "k": 1, "loss": 1.75}])  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no sd of one value is computed (numpy would warn)
        got = paired(one, "first", 1, ("full", 0))
    assert got["mean"] == 0.75 and np.isnan(got["lo"]) and np.isnan(got["hi"])


def test_refusals_read_whole():
    with pytest.raises(SinkscopeError) as error:
        EvictConfig(ks=(1, -2))
    assert str(error.value) == "--ks 1,-2 must be one or more sizes ≥ 0, e.g. 0,1,2,4"
    with pytest.raises(SinkscopeError, match="^--ks  must be one or more sizes"):
        EvictConfig(ks=())
    EvictConfig(window=1, ks=(0,))  # the smallest window: the query alone
    with pytest.raises(SinkscopeError) as error:
        EvictConfig(window=5).check_seq_len(6)  # T − 1 = w: no query t ≥ w has a target
    assert str(error.value) == ("--window 5 leaves no evicted query in windows of 6 tokens: use --seq-len > 6 or a "
                                "smaller --window")  # fmt: skip
    EvictConfig(window=5, ks=(6,)).check_seq_len(7)  # one evicted query (t = 5 predicts token 6); k = T − 1 fits
    with pytest.raises(SinkscopeError) as error:
        EvictConfig(window=5, ks=(0, 7)).check_seq_len(7)
    assert str(error.value) == "--ks 7 keeps more tokens than a window of 7 has: use sizes below --seq-len 7"


def test_a_keep_mask_of_the_wrong_size_is_refused_and_none_outside_the_block():
    lm = _llama()
    ids = _ids()
    with pytest.raises(SinkscopeError) as error, restricted_attention(lm, keep_mask(T - 1, W, torch.zeros(2, 0,
                                                                                                          dtype=torch.long))):  # fmt: skip
        lm.model(input_ids=ids, use_cache=False)
    assert str(error.value) == (f"keep mask of ({T - 1}, {T - 1}) for attention of {T}×{T}: the restriction is for "
                                "one forward pass over whole windows, without a cache")  # fmt: skip
    assert lm.model.config._attn_implementation == "sdpa"


def test_run_meta_and_saved_files(tmp_path, monkeypatch):
    lm = _llama()
    lm = type(lm)(model=lm.model, tokenizer=None, family=lm.family, identity={"name": "tiny-llama"})
    config = EvictConfig(window=W, ks=(0, 1))
    before = time.perf_counter()
    losses, summary, meta = run_eviction(lm, Batches([_ids()]), config)
    elapsed = time.perf_counter() - before
    assert meta["config"] == {"window": W, "ks": (0, 1)} and meta["model"] == {"name": "tiny-llama"}
    assert meta["corpus"] == {"source": "hand-made ids", "n_windows": 2} and meta["seq_len"] == T
    assert meta["positions"].startswith("absolute (RoPE of the original position kept")
    assert 0 < meta["timings"]["seconds"] <= elapsed
    drawn = []

    def spy(frame, window):
        drawn.append(window)
        return original(frame, window)

    original = eviction_section.eviction_figure
    monkeypatch.setattr(eviction_section, "eviction_figure", spy)
    out = save_eviction(tmp_path / "ev", losses, summary, meta)
    assert drawn == [W]  # the figure marks the recent window w
    pd.testing.assert_frame_equal(pd.read_parquet(out / "eviction.parquet"), losses)
    pd.testing.assert_frame_equal(pd.read_parquet(out / "eviction_summary.parquet"), summary)
    assert json.loads((out / "eviction.json").read_text()) == json.loads(json.dumps(meta, default=str))
    assert (out / "figures" / "eviction.png").read_bytes()[:4] == b"\x89PNG"
    assert page_settings(out / "report.html") == {"model": "tiny-llama", "corpus": "hand-made ids", "windows": "2", "T": str(T),
                        "recent window w": str(W), "positions": meta["positions"],
                        "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    parts = page_parts(out / "report.html")
    assert parts["title"] == "sinkscope evict: tiny-llama" and parts["captions"] == ["Loss change against the full cache"]
    assert parts["intro"].startswith("Next-token loss (nats/token, targets of queries t ≥ w) when each query keeps")
    assert parts["intro"].endswith("paired over windows, with 95 % intervals. Definitions in docs/experiments.md.")
    assert parts["headings"][0] == "Per policy and k (eviction_summary.parquet)"
    with pytest.raises(SinkscopeError):  # an existing result is kept unless overwrite is asked for
        save_eviction(out, losses, summary, meta)
    save_eviction(out, losses, summary, meta, overwrite=True)
    unnamed = save_eviction(tmp_path / "unnamed", losses, summary, {**meta, "model": {}, "corpus": None})
    settings = page_settings(unnamed / "report.html")
    assert (settings["model"], settings["corpus"]) == ("unnamed model", "–")


def test_kept_sets_by_hand():
    mass = torch.tensor([[5.0, 1.0, 3.0, 4.0], [2.0, 6.0, 1.0, 0.5]])
    sets = kept_sets(EvictConfig(window=2, ks=(2, 1)), mass)  # no k = 0: no `recent` row
    assert [(policy, k, kept.tolist()) for policy, k, kept in sets] == [
        ("first", 1, [[0], [0]]), ("top-mass", 1, [[0], [1]]),
        ("first", 2, [[0, 1], [0, 1]]), ("top-mass", 2, [[0, 3], [0, 1]])]  # fmt: skip
    with_recent = kept_sets(EvictConfig(window=2, ks=(0,)), mass)
    assert [(policy, k, tuple(kept.shape)) for policy, k, kept in with_recent] == [("recent", 0, (2, 0))]
