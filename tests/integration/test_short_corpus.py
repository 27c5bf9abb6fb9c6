"""A corpus shorter than --max-windows: analyze says how many windows it gives and sizes its progress bar to them
(issue 27 item 5), and `Windows.available` equals the windows an iteration yields."""

import json

from integration.tiny_checkpoint import save_tiny_llama, write_corpus
from sinkscope.cli.main import main
from sinkscope.corpus.windows import windows


def test_short_corpus_is_announced_and_the_progress_bar_has_its_length(tmp_path, capsys):
    model = save_tiny_llama(tmp_path / "model")
    corpus = write_corpus(tmp_path / "short.txt", documents=2, words=40)  # 81 tokens: 5 windows of T = 16 and a
    # sixth of the last 15 tokens (issue 35: no token dropped)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    for limit in (3, 5, 50):
        stream = windows(str(corpus), tokenizer, 16, limit, batch_size=2)
        yielded = sum(len(batch) for batch in stream)
        assert stream.available() == yielded == min(limit, 6)
    assert windows("builtin:random", tokenizer, 16, 7).available() == 7
    assert windows(str(corpus), tokenizer, 16, None).available() is None  # not counted without a limit
    capsys.readouterr()
    assert main(["analyze", "--model", str(model), "--corpus", str(corpus), "--seq-len", "16", "--max-windows",
                 "50", "--batch-size", "2", "--geometry-cap", "0", "--out", str(tmp_path / "run")]) == 0  # fmt: skip
    err = capsys.readouterr().err
    assert (f"corpus {corpus} gives 6 windows of T=16 (the last starts 9 tokens early, so no token is dropped), "
            "fewer than --max-windows 50: analysing 6") in err  # fmt: skip
    assert "3/3" in err and "/25" not in err  # 6 windows in batches of 2; not ceil(50 / 2) batches
    assert json.loads((tmp_path / "run" / "run.json").read_text())["corpus"]["windows"] == 6


def test_an_hf_corpus_that_cannot_open_fails_before_the_model_loads(tmp_path, capsys):
    """Without the datasets package, or offline, an `hf:` corpus is refused before the (here missing) model is
    looked at; before, its generator raised only at the first window, after the model had loaded."""
    code = main(["analyze", "--model", str(tmp_path / "no-model"), "--corpus", "hf:nobody/nothing", "--out",
                 str(tmp_path / "run")])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and ("corpus 'hf:nobody/nothing'" in err or "Hugging Face dataset 'nobody/nothing'" in err)
    assert "no-model" not in err


def test_python_callers_get_the_thread_count_in_run_json():
    """`analyze()` from Python records the CPU threads torch used (issue 27 item 6), as the CLI's --threads does."""
    import torch

    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    from .test_capture_families import build, token_windows

    before = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            run = analyze(build("llama"), TokenWindows(token_windows(2)), AnalyzeConfig(geometry_cap=0), progress=False,
                          threads=None)  # None: the count the caller set (the default "auto" picks from the load)
            assert run.meta["timings"]["threads"] == threads
    finally:
        torch.set_num_threads(before)
