"""The flex path's precision (`--attention-precision`, `AnalyzeConfig.attention_precision`): "exact" runs the
kernels on float32 copies, "model" on the model's dtype with float32 accumulation. With bfloat16 inputs the two
agree on every `AttentionReadout` field but the output norms to the tests' tolerance (both against float64 maps);
the output norms differ, by the dtype's rounding (docs/performance.md, Precision). The flag reaches the path of a
whole analysis, and a bad value is one line.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

import sinkscope.capture.attention as attention
from sinkscope.capture import flex
from sinkscope.cli.main import main
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import token_windows
from .test_flex_forms import eager_flex_without_tracing, float64_rows, inputs  # noqa: F401 (an autouse fixture)

# What "model" keeps of the output norms (docs/performance.md, Precision: ≤ 4.0e-3 measured, head_dim 64).
MODEL_OUT_NORM_RTOL = 1e-2


@pytest.mark.parametrize("sinks", [None, (-2.0, 0.0, 2.0, 4.0)])
def test_model_precision_keeps_every_field_but_the_output_norms_exact(sinks):
    q, k, v = (x.to(torch.bfloat16) for x in inputs(2, 4, 2, 37, 64, 64, seed=3, sharpness=2.0))
    form = {} if sinks is None else {"sinks": torch.tensor(sinks)}
    ref = float64_rows(q, k, v, 0.125, **form)
    got = {}
    for precision in flex.PRECISIONS:
        out, packed = flex.flex_parts(q, k, v, 0.125, precision=precision, **form)
        got[precision] = (out, flex.unpack_rows(packed.parts), packed.parts)
    for _, rows, parts in got.values():
        for name in ("sink", "diag", "prev", "columns"):
            torch.testing.assert_close(getattr(rows, name).double(), ref[name], atol=1e-5, rtol=1e-5, msg=name)
        torch.testing.assert_close(rows.entropy, ref["entropy"], atol=1e-5 * 37, rtol=1e-5)
        if sinks is not None:
            torch.testing.assert_close(flex.learned_sink_mass(parts).double(), ref["mass"], atol=1e-5, rtol=1e-5)
    exact, model = got["exact"][1].out_norms, got["model"][1].out_norms
    torch.testing.assert_close(exact.double(), ref["out_norms"], atol=1e-5, rtol=1e-5)
    assert (model != exact).any(), "model precision computed in float32: the flag did not reach the kernel"
    torch.testing.assert_close(model.double(), ref["out_norms"], atol=0, rtol=MODEL_OUT_NORM_RTOL)


def bf16_llama() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=64)
    model = LlamaForCausalLM(config).to(torch.bfloat16).eval().requires_grad_(False)
    model.set_attn_implementation("sdpa")
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"),
                       identity={"name": "llama-bf16", "dtype": "bfloat16"})  # fmt: skip


def test_the_precision_of_an_analysis_reaches_the_flex_path(monkeypatch):
    """On CUDA's routing, a bfloat16 model's first layer (the same q, k, v in both runs) gives the same packed rows
    in both precisions but for the output norm, which differs by more than 0 and less than the documented bound."""
    lm, ids = bf16_llama(), token_windows(2)
    flex_parts, calls = flex.flex_parts, []
    monkeypatch.setattr(attention, "_flex_here", lambda query: True)
    monkeypatch.setattr(flex, "flex_parts", lambda *a, **kw: calls.append((kw["precision"], flex_parts(*a, **kw)))
                        or calls[-1][1])  # fmt: skip
    for precision in ("exact", "model"):
        analyze(lm, TokenWindows(ids, batch_size=2), AnalyzeConfig(geometry_cap=0, attention_precision=precision),
                progress=False)  # fmt: skip
    assert [p for p, _ in calls] == ["exact"] * 2 + ["model"] * 2  # two layers, one batch each
    assert attention._precision == "exact"  # restored after the run
    exact, model = (flex.unpack_rows(calls[i][1][1].parts) for i in (0, 2))
    for name in ("sink", "diag", "prev", "columns", "entropy"):
        torch.testing.assert_close(getattr(model, name), getattr(exact, name), atol=1e-5, rtol=1e-5, msg=name)
    assert (model.out_norms != exact.out_norms).any()
    torch.testing.assert_close(model.out_norms, exact.out_norms, atol=0, rtol=MODEL_OUT_NORM_RTOL)


def test_a_bad_precision_is_one_line(tmp_path, capsys):
    with pytest.raises(SinkscopeError, match=r"^--attention-precision 'fast' must be exact or model$"):
        AnalyzeConfig(attention_precision="fast")
    with pytest.raises(SinkscopeError, match="attention precision 'half' is not one of exact, model"):
        with attention.attention_precision("half"):
            pass
    with pytest.raises(SystemExit) as exit_:
        main(["analyze", "--attention-precision", "fast", "--out", str(tmp_path / "run")])
    assert exit_.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == "sinkscope analyze: error: argument --attention-precision: invalid choice: 'fast' (choose from 'exact', 'model')"
