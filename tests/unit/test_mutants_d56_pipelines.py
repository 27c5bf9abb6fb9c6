"""Mutmut draw 56 B's survivors. pipelines/: the routes a model has when a route needs an input no architecture
gives, switch-attribution counts that stay exact past float32's integer limit and a saved table holding only its
own columns, `run_eviction` quiet unless asked for progress (and its bar named `evict`), the eviction page's intro
read whole, prevalence's default ε = 0.3 against brute-force classes, a margin of 0 refused for the regime maps.
reproduction/: a layer without spread left out of the row-wise Spearman ρ, log lines flushed at once, a damaged or
stale stamp's error or change named. statistics/: massive-activation histograms on the layers fed."""

from __future__ import annotations

import html
import io
import re
import sys
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
import torch
from tests.integration.test_eviction import BOS, VOCAB, _llama
from tests.integration.test_prevalence import _lm as _prevalence_llama
from tests.integration.test_prevalence import brute_class

from sinkscope.errors import SinkscopeError
from sinkscope.functional.switch_routes import ALL_ROUTES, Route
from sinkscope.pipelines.cost_regimes import RegimeConfig
from sinkscope.pipelines.eviction import EvictConfig, run_eviction, save_eviction, summarize
from sinkscope.pipelines.prevalence import run_prevalence
from sinkscope.pipelines.switch_attribution import (
    _Counter,
    attribution_table,
    available_routes,
    save_attribution,
)
from sinkscope.reproduction.files import KEY_FILE, _read_stamp, is_fresh, log, write_key
from sinkscope.reproduction.strata import rowwise_spearman
from sinkscope.statistics.massive_activations import BINS_PER_OCTAVE, MassiveActivations

F32_EXACT = 2**24  # float32 holds every integer up to 2^24; 2^24 + 1 rounds to 2^24


def test_a_route_needing_an_input_no_architecture_gives_is_not_available():
    both = SimpleNamespace(family=SimpleNamespace(output_gate="q_proj", learned_sink="sinks"))
    rotary = Route("rotary_route", lambda m, th: torch.ones_like(m.off), needs=("rotary_phase",))
    assert available_routes(both, (rotary,)) == ()
    assert [r.name for r in available_routes(both, (rotary, *ALL_ROUTES))] == [r.name for r in ALL_ROUTES]


def _counter_after_one_off_query(counts_before: int, queries_before: int) -> _Counter:
    """A one-head counter that had counted `counts_before` BOS-sink queries out of `queries_before`, fed one block
    of two queries whose query 1 puts all its mass on BOS and has output norm 0.001 ≤ τ·||v||: one more of each."""
    lm = SimpleNamespace(layout=SimpleNamespace(group=1, n_heads=1), layers=[None])
    routes = tuple(r for r in ALL_ROUTES if r.name in ("bos_sink", "low_norm_keys"))
    counter = _Counter(lm, routes, tau=0.1, delta=0.1)
    counter.counts[0, 0, 0] = counts_before
    counter.queries[0, 0] = queries_before
    counter.on_values(0, torch.full((1, 1, 2, 4), 0.5))  # ||v_j|| = 1
    probs = torch.tensor([[[[1.0, 0.0], [1.0, 0.0]]]])
    out = torch.tensor([[[[1.0, 0, 0, 0], [0.001, 0, 0, 0]]]])
    counter.on_block(0, 0, probs, torch.zeros(1, 1, 2), out)  # start 0: query 0 is not counted
    return counter


def test_switch_counts_stay_exact_past_float32s_integer_limit():
    small = _counter_after_one_off_query(0, 0)
    assert small.counts[0, 0].tolist() == [1, 0, 0] and small.queries.tolist() == [[1]]
    long_run = _counter_after_one_off_query(F32_EXACT, F32_EXACT)
    assert long_run.counts[0, 0].tolist() == [F32_EXACT + 1, 0, 0]
    assert long_run.queries.tolist() == [[F32_EXACT + 1]]


def test_run_eviction_writes_no_progress_bar_unless_asked(capsys):
    ids = torch.randint(3, VOCAB, (1, 8), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = BOS
    lm, config = _llama(), EvictConfig(window=4, ks=(0,))
    run_eviction(lm, [ids], config)
    assert capsys.readouterr().err == ""
    run_eviction(lm, [ids], config, progress=True)
    bar = capsys.readouterr().err  # the bar, where asked for, reaches stderr here
    assert re.search(r"(^|\r)evict: ", bar)


def test_the_eviction_page_intro_reads_whole(tmp_path):
    losses = pd.DataFrame({"window": [0, 1, 0, 1], "policy": ["full", "full", "recent", "recent"], "k": [0, 0, 0, 0],
                           "kept": ["", "", "", ""], "loss": [1.0, 2.0, 1.5, 2.5], "loss_all": [1.0, 2.0, 1.5, 2.5],
                           "n_targets": [3, 3, 3, 3]})  # fmt: skip
    meta = {"config": {"window": 4, "ks": [0]}, "model": {"name": "m"}, "corpus": {"source": "c"}, "seq_len": 8,
            "positions": "absolute", "timings": {"seconds": 1.0}}  # fmt: skip
    out = save_eviction(tmp_path / "ev", losses, summarize(losses), meta)
    page = html.unescape((out / "report.html").read_text())
    intro = re.search(r"</h1>\n<p>(.*?)</p>", page, re.S).group(1)
    assert intro == (
        "Next-token loss (nats/token, targets of queries t ≥ w) when each query keeps only its recent w keys, plus "
        "the first k tokens or the k tokens of largest column mass; Δ against the full cache and against the window "
        "alone, paired over windows, with 95 % intervals. Definitions in docs/experiments.md."
    )


def test_a_saved_attribution_table_holds_its_columns_and_no_index(tmp_path):
    routes = tuple(r for r in ALL_ROUTES if r.name in ("bos_sink", "low_norm_keys"))
    counts = torch.tensor([[[1, 0, 0], [0, 2, 0]], [[0, 0, 0], [3, 0, 1]]])
    table = attribution_table(counts, torch.tensor([[4, 4], [4, 4]]), routes, [0, 1])
    later = table[table["layer"] == 1]  # a filtered table: its index is 2, 3
    save_attribution(tmp_path / "a", later, {"model": "m"})
    assert pq.read_schema(tmp_path / "a" / "attribution.parquet").names == list(table.columns)
    read = pd.read_parquet(tmp_path / "a" / "attribution.parquet")
    assert read.index.tolist() == [0, 1] and read["n_off"].tolist() == [0, 4]


def test_prevalence_classes_by_default_with_a_sink_threshold_of_0_3():
    lm = _prevalence_llama()
    ids = torch.randint(3, VOCAB, (3, 10), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    result = run_prevalence(lm, [ids])
    lm.model.set_attn_implementation("eager")
    maps = lm.model(input_ids=ids, output_attentions=True).attentions  # plain transformers, L × (B, H, T, T)
    expected = [
        brute_class(attn[b, h].double().numpy(), 0.3) for b in range(3) for attn in maps for h in range(4)
    ]
    windows = result["windows"].sort_values(["window", "layer", "head"])
    assert windows["class"].tolist() == expected and "sink" in expected
    assert result["meta"]["epsilon"] == 0.3


def test_a_layer_without_spread_in_y_is_left_out_of_the_rowwise_spearman():
    x = np.array([[1.0, 2.0, 3.0, 4.0], [4.0, 1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]])
    y = np.array([[2.0, 4.0, 6.0, 8.0], [7.0, 7.0, 7.0, 7.0], [8.0, 6.0, 4.0, 2.0]])  # row 1: no spread in y
    assert rowwise_spearman(x, y) == (0.0, 2)  # (ρ = 1 + ρ = −1) / 2, rows 0 and 2
    assert rowwise_spearman(y, x) == (0.0, 2)  # and none in x


def test_a_margin_of_zero_is_refused():
    with pytest.raises(SinkscopeError) as refused:
        RegimeConfig(kappa=0.0)
    assert str(refused.value) == "--seeds 3 must be ≥ 1 and --kappa 0.0 a finite number > 0"
    assert RegimeConfig(kappa=1e-9).kappa == 1e-9  # any positive margin is taken


class _Stderr(io.StringIO):
    """A stderr that records what it held each time it was flushed."""

    def __init__(self) -> None:
        super().__init__()
        self.flushed: list[str] = []

    def flush(self) -> None:
        self.flushed.append(self.getvalue())


def test_a_reproduce_log_line_is_flushed_at_once(monkeypatch):
    stderr = _Stderr()
    monkeypatch.setattr(sys, "stderr", stderr)
    log("section done")
    assert re.fullmatch(r"\[reproduce \d\d:\d\d:\d\d\] section done\n", stderr.getvalue())
    assert stderr.flushed == [stderr.getvalue()]


def test_a_damaged_stamp_names_the_error_it_raised(tmp_path, capsys):
    (tmp_path / KEY_FILE).write_text("{not json")
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / KEY_FILE).write_bytes(b"\xff\xfe")
    assert _read_stamp(tmp_path) is None and _read_stamp(tmp_path / "b") is None
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == [
        f"{tmp_path}: its stored key {KEY_FILE} is damaged (JSONDecodeError): computing the section again",
        f"{tmp_path / 'b'}: its stored key {KEY_FILE} is damaged (UnicodeDecodeError): computing the section again",
    ]


def test_a_section_stored_with_other_settings_says_so_in_one_line(tmp_path, capsys):
    write_key(tmp_path, {"seq_len": 64, "model": "a"})
    assert is_fresh(tmp_path, {"seq_len": 64, "model": "a"}) and capsys.readouterr().err == ""
    assert not is_fresh(tmp_path, {"seq_len": 128, "model": "a"})
    line = capsys.readouterr().err.split("] ", 1)[1]
    assert line == f"{tmp_path}: stored with other inputs or settings (seq_len changed): computing it again\n"


def test_massive_activation_histograms_land_on_the_layers_that_were_fed():
    stat = MassiveActivations(n_layers=3, d_model=2)
    stat.on_layer_input(2, torch.ones(1, 2, 2), None)  # four magnitudes of 2^0
    stat.on_layer_input(0, torch.full((1, 2, 2), 4.0), None)  # four of 2^2; layer 1 is not watched
    stat.end_batch(1)
    counts = stat.histogram.value
    assert counts.sum(1).tolist() == [4.0, 0.0, 4.0]
    assert int(counts[0].argmax() - counts[2].argmax()) == 2 * BINS_PER_OCTAVE  # two octaves apart
