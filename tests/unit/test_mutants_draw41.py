"""Survivors of the seventh sampled mutmut run (seed 41; docs/testing.md, "Mutation tool"): verdict fields a user
reads in `verdicts.json` and the report, each checked against the value written out by hand here."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sinkscope.capture.feed import Feed
from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.analysis import summary
from sinkscope.reproduction.experiment_claims import cost_boundary_trained_verdict
from sinkscope.reproduction.verdicts import NOT_MEASURABLE
from sinkscope.reproduction.weight_claims import weights_verdict


def test_each_weight_claim_names_the_direction_it_claims_in_plain_words():
    """`claimed_direction`: the rank claim says the sink heads are lower, the alignment claim that they are
    higher, exactly these words (the report prints them), whatever the verdict."""
    layers, score = np.repeat(np.arange(4), 4), np.tile([0.9, 0.9, 0.05, 0.05], 4)
    values = np.linspace(1.0, 2.0, score.size)
    low = weights_verdict("weights_low_rank", "m", values, score, layers, head_dim=64)
    high = weights_verdict("weights_bos_alignment", "m", values, score, layers, n_layers=4)
    assert low.evidence["claimed_direction"] == "sink heads lower"
    assert high.evidence["claimed_direction"] == "sink heads higher"


def test_the_trained_boundary_claim_without_runs_is_filed_under_the_lab_model():
    """No runs: not measurable, "no runs" (or the caller's reason), under the model name `synthetic` that the
    measured verdict of the same claim carries, so the report keeps both in one row."""
    for runs in (None, pd.DataFrame()):
        verdict = cost_boundary_trained_verdict(runs)
        assert (verdict.model, verdict.verdict, verdict.reason) == ("synthetic", NOT_MEASURABLE, "no runs")
    assert cost_boundary_trained_verdict(None, reason="lab skipped").reason == "lab skipped"


def test_a_refused_summary_lists_every_number_a_statistic_took_comma_separated():
    """A plug-in statistic setting two of the heads table's numbers is refused by one line naming both, sorted
    and separated by ", " (the user renames exactly those)."""
    heads = pd.DataFrame({"sink_score": [0.2, 0.8], "diag_score": 0.0, "head_class": "mixed"})
    with pytest.raises(SinkscopeError) as refused:
        summary(heads, {"mean_sink_score": 1.0, "epsilon": 0.3, "mine": 2.0}, (0.5,))
    assert "sets the summary number(s) epsilon, mean_sink_score, which the analysis computes" in str(refused.value)


def test_a_saved_state_without_a_window_count_is_refused_with_the_way_out():
    """A checkpoint of an older sinkscope (no `windows` entry): one line saying what is missing and to rerun
    without --resume, in these words."""
    with pytest.raises(SinkscopeError) as refused:
        Feed([], seq_len=8).load_state_dict({})
    assert str(refused.value) == ("the saved state has no window count (written by an older sinkscope); "
                                  "rerun without --resume")
