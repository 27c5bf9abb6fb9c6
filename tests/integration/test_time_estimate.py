"""Issue 32, item 10: a long analysis says early how long it will take — from the first decoder layer of the first
batch (a very long --seq-len makes one batch minutes long) — once, and only when it comes to a minute or more."""

import types

import sinkscope.pipelines.time_estimate as time_estimate
from sinkscope.corpus.windows import TokenWindows
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import build, token_windows


def test_the_first_layer_of_the_first_batch_gives_the_estimate_once(monkeypatch, capsys):
    lm, ids = build("llama"), token_windows(8)
    config = AnalyzeConfig(geometry_cap=0)
    analyze(lm, TokenWindows(ids, batch_size=2), config, progress=True)
    assert "layer 1 of" not in capsys.readouterr().err  # a quick run: nothing more is said
    clock = iter(range(0, 10**6, 40))  # every reading of the clock is 40 s after the one before
    monkeypatch.setattr(time_estimate, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    analyze(lm, TokenWindows(ids, batch_size=2), config, progress=True)
    assert len(lm.layers) == 3 and len(ids) == 8  # 4 batches of 2 windows: 40 s × 3 layers × 4 batches = 8 min
    line = "layer 1 of 3 took 40.0 s on the first batch: about 2 min per batch; all 4 batches: about 8 min\n"
    err = capsys.readouterr().err
    assert line in err and err.count("layer 1 of") == 1  # once, not once per batch
    analyze(lm, TokenWindows(ids[:2], batch_size=2), config, progress=True)  # one batch: it is the whole run
    assert "layer 1 of 3 took 40.0 s on the first batch: about 2 min per batch\n" in capsys.readouterr().err
    analyze(lm, TokenWindows(ids, batch_size=2), config, progress=False)  # --quiet
    assert "layer 1 of" not in capsys.readouterr().err
