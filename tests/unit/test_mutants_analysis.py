"""Survivors of the sampled mutmut run over `pipelines/analysis.py` and `statistics/` (docs/testing.md, "Mutation
tool")."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, statistics_for
from sinkscope.statistics.window_evidence import WindowEvidence


def _tiny_llama() -> LoadedModel:
    """A 2-layer, 4-head (2 kv heads) random Llama with eager attention, weights from the current torch seed."""
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=101, max_position_embeddings=64, attn_implementation="eager",
    )  # fmt: skip
    return LoadedModel(model=LlamaForCausalLM(config).eval(), tokenizer=None, family=family_for("llama"), identity={})


def test_extra_epsilons_are_kept_as_a_tuple_of_floats():
    """A list of thresholds (as a caller builds it) becomes a tuple of floats: the frozen config stays hashable."""
    config = AnalyzeConfig(epsilons=[0.2, 0.4])
    assert config.epsilons == (0.2, 0.4) and all(type(e) is float for e in config.epsilons)
    assert hash(config) == hash(AnalyzeConfig(epsilons=(0.2, 0.4)))


def test_window_evidence_checkpoint_names_each_tensor_after_its_array():
    """A checkpoint's tensors are `"{array}.value"`, one per array the reproduction reads."""
    evidence = WindowEvidence(n_layers=3, n_heads=4, group=2, seq_len=8, n_windows=2, tau=0.1)
    names = set(evidence.arrays())
    assert names == {"nonpos", "nonpos_control", "switch", "drain", "hard_sink", "mlp_like", "sink_column"}
    assert set(evidence.state_dict()) == {f"{name}.value" for name in names}


def test_a_negative_geometry_cap_is_refused_by_name():
    with pytest.raises(SinkscopeError, match=r"^--geometry-cap -1 must be ≥ 0$"):
        AnalyzeConfig(geometry_cap=-1)


@pytest.mark.parametrize(
    "field, flag",
    [("diagonal", "--diag-threshold"), ("previous", "--prev-threshold"), ("dense", "--dense-threshold"),
     ("learned_sink", "--learned-sink-threshold")],
)  # fmt: skip
def test_a_head_class_threshold_outside_zero_one_is_refused_by_its_flag(field, flag):
    with pytest.raises(SinkscopeError, match=rf"^{flag} 1.5 must lie between 0 and 1 \(a share of attention"):
        AnalyzeConfig(**{field: 1.5})


@pytest.mark.parametrize("field", ["diagonal", "previous", "dense", "learned_sink"])
def test_head_class_thresholds_of_exactly_zero_and_one_are_accepted(field):
    """The refusal reads "must lie between 0 and 1": both ends are allowed."""
    for value in (0.0, 1.0):
        assert getattr(AnalyzeConfig(**{field: value}), field) == value


def test_every_statistic_keeps_its_sums_on_the_models_device():
    """A model reported on the `meta` device: each statistic's dense sums are created there (on the CPU a dropped
    device argument would be invisible)."""
    lm = _tiny_llama()
    on_meta = SimpleNamespace(layers=lm.layers, layout=lm.layout, tokenizer=None, family=lm.family, model=lm.model,
                              device=torch.device("meta"))  # fmt: skip
    devices = {
        type(statistic).__name__: {state.value.device.type for state in statistic._states.values()
                                   if isinstance(getattr(state, "value", None), torch.Tensor)}
        for statistic in statistics_for(on_meta, 8, AnalyzeConfig())
    }  # fmt: skip
    dense = {name: found for name, found in devices.items() if found}
    assert {"PatternScores", "SwitchCounts", "WindowSinkRate", "WindowSummary", "BosGeometry"} <= set(dense)
    assert all(found == {"meta"} for found in dense.values()), dense


def test_a_gated_models_gate_sums_sit_on_its_device_and_a_geometry_cap_of_one_certifies():
    """A model with output gates (Qwen3-Next's family entry) and learned sinks (gpt-oss's) reported on the `meta`
    device: the gate, learned-sink and key-token statistics' sums are made there. `geometry_cap` = 1 (the smallest
    sample) still builds the certificates, with the progress bar asked for."""
    import dataclasses

    from sinkscope.statistics.certificates import HalfSpaceCertificates
    from sinkscope.statistics.key_tokens import KeyTokens
    from sinkscope.statistics.learned_sink import LearnedSinkScores
    from sinkscope.statistics.output_gate import OutputGates

    lm = _tiny_llama()
    gated = dataclasses.replace(lm.family, output_gate=family_for("qwen3_next").output_gate,
                                learned_sink=family_for("gpt_oss").learned_sink)  # fmt: skip
    on_meta = SimpleNamespace(layers=lm.layers, layout=lm.layout, tokenizer=None, family=gated, model=lm.model,
                              device=torch.device("meta"))  # fmt: skip
    built = statistics_for(on_meta, 8, AnalyzeConfig(geometry_cap=1), progress=True)
    (gates,) = [s for s in built if isinstance(s, OutputGates)]
    assert {state.value.device.type for state in gates.sums.values()} == {"meta"}
    (learned,) = [s for s in built if isinstance(s, LearnedSinkScores)]
    dense = [
        state for state in learned._states.values() if isinstance(getattr(state, "value", None), torch.Tensor)
    ]
    assert dense and {state.value.device.type for state in dense} == {"meta"}
    (key_tokens,) = [s for s in built if isinstance(s, KeyTokens)]
    assert key_tokens.table.keys.device.type == "meta"
    (certificates,) = [s for s in built if isinstance(s, HalfSpaceCertificates)]
    assert certificates.cap == 1 and certificates.progress is True


def test_the_summary_counts_a_head_at_exactly_a_threshold_as_not_exceeding_it():
    """`sink_rate_of_mean` and `sink_rates_of_mean`: the share of heads whose mean α exceeds ε (strictly). Heads at
    α = 0.25, 0.5, 0.75, 0.75 with ε = 0.5 and 0.75: 2 of 4 exceed 0.5, none exceeds 0.75."""
    from sinkscope.pipelines.analysis import summary

    heads = pd.DataFrame({"sink_score": [0.25, 0.5, 0.75, 0.75], "diag_score": 0.0, "head_class": "mixed"})
    numbers = summary(heads, {}, (0.5, 0.75))
    assert numbers["sink_rate_of_mean"] == 0.5
    assert numbers["sink_rates_of_mean"] == {"0.5": 0.5, "0.75": 0.0}


def test_a_window_longer_than_the_models_context_is_refused_with_the_limit():
    """A Llama with 64 positions: T = 64 is accepted, T = 65 refused by one line naming the limit."""
    from sinkscope.pipelines.analysis import check_seq_len

    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=101, max_position_embeddings=64,
    )  # fmt: skip
    lm = LoadedModel(model=LlamaForCausalLM(config), tokenizer=None, family=family_for("llama"), identity={})
    check_seq_len(lm, 64)
    with pytest.raises(SinkscopeError) as refused:
        check_seq_len(lm, 65)
    assert str(refused.value) == "--seq-len 65 exceeds the model's context of 64 tokens; use ≤ 64"
