"""The Python API chooses torch's CPU threads the way the CLI does: `sinkscope.analyze(..., threads="auto")` reads the
machine's load (clamp(round(cpus − load), 1, cpus), worked out by hand here from a faked load), keeps a count the
CLI already chose, takes an explicit count, leaves torch alone with None, records the choice in the run's provenance
and gives torch's own count back after the call. The thread count is read *during* the forward pass, by a hook."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import sinkscope.threads as threads_module
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

VOCAB, T = 48, 12


def _tiny() -> tuple[LoadedModel, list[int]]:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=16, intermediate_size=24, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=32, bos_token_id=0,
                         eos_token_id=1, attn_implementation="sdpa")  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    seen: list[int] = []
    model.model.layers[0].register_forward_hook(lambda *_: seen.append(torch.get_num_threads()))
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={}), seen


def _windows() -> TokenWindows:
    ids = torch.randint(2, VOCAB, (3, T), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = 0
    return TokenWindows(ids, batch_size=3)


@pytest.fixture
def machine(monkeypatch):
    """A 6-CPU machine carrying a load of 3.6 on the whole machine: auto = clamp(floor(6 − 3.6 + 0.5), 1, 6) = 2."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    monkeypatch.setattr(threads_module, "usable_cpus", lambda cpu_max=None: 6)
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (3.6, 0.0, 0.0))
    monkeypatch.setattr(threads_module.os, "cpu_count", lambda: 6)
    before = torch.get_num_threads()
    torch.set_num_threads(5)  # torch's count before the call: not what auto picks, and given back after
    yield
    torch.set_num_threads(before)
    threads_module.pin(None)


def test_auto_picks_from_the_load_during_the_pass_and_restores_torch_after(machine):
    lm, seen = _tiny()
    run = analyze(lm, _windows(), AnalyzeConfig(geometry_cap=0), progress=False)
    assert seen == [2]
    assert run.meta["timings"]["threads"] == 2
    assert "load of 3.6" in run.meta["timings"]["threads_chosen"]
    assert torch.get_num_threads() == 5


def test_a_heavier_load_gets_one_thread(machine, monkeypatch):
    monkeypatch.setattr(threads_module.os, "getloadavg", lambda: (4.6, 0.0, 0.0))  # floor(6 − 4.6 + 0.5) = 1
    lm, seen = _tiny()
    analyze(lm, _windows(), AnalyzeConfig(geometry_cap=0), progress=False)
    assert seen == [1]


def test_an_explicit_count_and_none_are_kept(machine):
    lm, seen = _tiny()
    run = analyze(lm, _windows(), AnalyzeConfig(geometry_cap=0), progress=False, threads=3)
    assert seen == [3] and run.meta["timings"]["threads_chosen"] == "threads=3"
    run = analyze(lm, _windows(), AnalyzeConfig(geometry_cap=0), progress=False, threads=None)
    assert seen == [3, 5] and run.meta["timings"]["threads"] == 5
    assert torch.get_num_threads() == 5


def test_the_cli_choice_wins_over_auto(machine):
    threads_module.pin(threads_module.ThreadChoice(4, "--threads 4"))
    lm, seen = _tiny()
    run = analyze(lm, _windows(), AnalyzeConfig(geometry_cap=0), progress=False)
    assert seen == [4] and run.meta["timings"]["threads_chosen"] == "--threads 4"


@pytest.mark.parametrize("bad", [0, -1, "two", 1.5, True])
def test_a_bad_count_is_one_line_before_the_pass(machine, bad):
    lm, seen = _tiny()
    with pytest.raises(SinkscopeError, match="threads="):
        analyze(lm, _windows(), progress=False, threads=bad)
    assert seen == []
