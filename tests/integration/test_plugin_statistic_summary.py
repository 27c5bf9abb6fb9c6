"""A user-written statistic's model-level numbers (`Tables.summary`) reach `run.meta["summary"]` (run.json) through
the one generic merge of `pipelines.analysis.statistic_summaries`, beside the built-in numbers; a summary key that
two statistics both set is refused."""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import sinkscope.pipelines.analysis as analysis
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.statistics.statistic import Statistic, Tables

T, B, WINDOWS = 10, 3, 6
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, vocab_size=101, max_position_embeddings=64)  # fmt: skip


class CountWindows(Statistic):
    """Reports, as its one summary number `summary_key`, the number of windows it was computed over."""

    name = "count_windows"

    def __init__(self, summary_key: str = "windows_counted") -> None:
        super().__init__()
        self.summary_key = summary_key

    def compute(self, windows: int) -> Tables:
        return Tables(summary={self.summary_key: windows})


def analyze_with(monkeypatch, plug_in: Statistic):
    """`analyze` of a tiny random Llama over `WINDOWS` windows, with `plug_in` registered after the built-ins."""
    built_ins = analysis.statistics_for
    monkeypatch.setattr(analysis, "statistics_for", lambda *a, **k: [*built_ins(*a, **k), plug_in])
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(**SIZES)).eval()
    lm = LoadedModel(model=llama, tokenizer=None, family=family_for("llama"), identity={})
    ids = torch.randint(1, SIZES["vocab_size"], (WINDOWS, T), generator=torch.Generator().manual_seed(1))
    return analysis.analyze(lm, TokenWindows(ids, batch_size=B), analysis.AnalyzeConfig(geometry_cap=0), progress=False)


def test_a_plug_in_statistics_summary_number_reaches_run_json(monkeypatch):
    run = analyze_with(monkeypatch, CountWindows())
    summary = run.meta["summary"]
    assert summary["windows_counted"] == WINDOWS == run.meta["corpus"]["windows"]
    # the built-in numbers are all still there, the window sink rate's first
    assert list(summary)[:5] == ["sink_rate", "sink_rate_of_mean", "epsilon", "sink_rates", "sink_rates_of_mean"]
    assert {"mean_sink_score", "mean_diag_score", "head_classes"} <= summary.keys()


@pytest.mark.parametrize(
    ("key", "message"),
    [("sink_rate", "'window_sink_rate' and 'count_windows' both set the summary number 'sink_rate'"),
     ("mean_sink_score", "sets the summary number.s. mean_sink_score, which the analysis computes from the heads")],
)  # fmt: skip
def test_a_summary_number_two_statistics_both_set_is_refused(monkeypatch, key, message):
    with pytest.raises(SinkscopeError, match=message):
        analyze_with(monkeypatch, CountWindows(key))
