"""Captured statistics equal those computed from plain transformers outputs, for every supported family.

Tiny random-weight models built from configs (no download). The reference uses `output_attentions=True` of the
same model run with eager attention, `output_hidden_states=True`, and hooks on the value/output projections.
"""

import pandas as pd
import pytest
import torch
from transformers import (
    Gemma3ForCausalLM,
    Gemma3TextConfig,
    GPT2Config,
    GPT2LMHeadModel,
    LlamaConfig,
    LlamaForCausalLM,
    MistralConfig,
    MistralForCausalLM,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import family_for, input_norm_module
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import value_output_maps
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

V, T = 96, 12
COMMON = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              max_position_embeddings=64)


def build(name: str, attn: str = "eager") -> LoadedModel:
    torch.manual_seed(0)
    if name == "llama":
        model = LlamaForCausalLM(LlamaConfig(**COMMON, num_key_value_heads=2))
    elif name == "mistral":
        model = MistralForCausalLM(MistralConfig(**COMMON, num_key_value_heads=1, sliding_window=None))
    elif name == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**COMMON, num_key_value_heads=2))
    elif name == "gemma3":
        # A sliding window shorter than T exercises the boolean-mask path; softcap the logits too.
        model = Gemma3ForCausalLM(Gemma3TextConfig(**COMMON, num_key_value_heads=1, head_dim=16, sliding_window=5,
                                                   layer_types=["sliding_attention", "full_attention",
                                                                "sliding_attention"],
                                                   attn_logit_softcapping=20.0))
    else:
        model = GPT2LMHeadModel(GPT2Config(vocab_size=V, n_embd=64, n_layer=3, n_head=4, n_positions=64))
    # Random init gives near-uniform attention; sharpen it so hard-pattern thresholds are exercised.
    with torch.no_grad():
        for module in model.modules():
            for attr in ("q_proj", "k_proj"):
                if hasattr(module, attr):
                    getattr(module, attr).weight.mul_(6.0)
            if hasattr(module, "c_attn"):
                module.c_attn.weight[:, :128].mul_(6.0)
    model.set_attn_implementation(attn)
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for(model.config.model_type), identity={"name": name})


def token_windows(n: int = 10) -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, V, (n, T), generator=g)
    ids[:, 0] = 0  # BOS
    return ids


def reference(lm: LoadedModel, ids: torch.Tensor, delta: float, tau: float):
    """Per-head statistics from plain transformers outputs, computed window by window with loops over heads."""
    layout = lm.layout
    lm.model.set_attn_implementation("eager")
    out = lm.base(input_ids=ids, output_attentions=True, output_hidden_states=True, use_cache=False)
    att = torch.stack(out.attentions).double()  # (L, N, H, T, T)
    L = att.shape[0]
    ref = {
        "sink_score": att[..., :, 0].mean((1, 3)),
        "diag_score": att.diagonal(dim1=-2, dim2=-1)[..., 1:].mean((1, 3)),
        "prev_score": att.diagonal(offset=-1, dim1=-2, dim2=-1).mean((1, 3)),
        "hard_sink_frac": (att[..., 1:, 0] >= 1 - delta).double().mean((1, 3)),
    }
    p = att[..., 1:, :]
    ent = -(torch.where(p > 0, p * p.clamp_min(1e-300).log(), torch.zeros_like(p))).sum(-1)
    ref["entropy"] = (ent / torch.log(torch.arange(2, T + 1, dtype=torch.float64))).mean((1, 3))
    # Head outputs o_t = Σ_j A[t,j] v_j, with v from the layer input through the value map (biases included
    # via the projection module itself).
    ahon = torch.zeros(L, layout.n_heads, dtype=torch.float64)
    bos_cos = torch.zeros(L, dtype=torch.float64)
    for layer, block in enumerate(lm.layers):
        h = out.hidden_states[layer]
        z = input_norm_module(lm.family, block)(h)
        unit = torch.nn.functional.normalize(z.double(), dim=-1)
        bos_cos[layer] = (unit[:, 1:] @ unit[:, 0, :, None]).mean()
        w_v, _ = value_output_maps(lm.family, block, layout)
        attn_module = getattr(block, lm.family.attention)
        if lm.family.fused_qkv:
            bias = attn_module.c_attn.bias[2 * layout.d_model:]
        else:
            bias = attn_module.v_proj.bias if attn_module.v_proj.bias is not None else torch.zeros(1)
        bias = bias.reshape(-1, layout.head_dim) if bias.numel() > 1 else torch.zeros(layout.n_kv_heads,
                                                                                         layout.head_dim)
        for head in range(layout.n_heads):
            v = z.double() @ w_v[head].double() + bias[head // layout.group].double()  # (N, T, dh)
            o = att[layer, :, head] @ v
            ahon[layer, head] = o.norm(dim=-1).mean()
    ref["ahon"] = ahon
    return ref, bos_cos


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen2", "gemma3", "gpt2"])
def test_captured_statistics_equal_plain_transformers(name):
    lm = build(name, attn="sdpa")
    ids = token_windows()
    logits_before = lm.model(input_ids=ids).logits
    config = AnalyzeConfig(delta=0.5, geometry_cap=0)
    run = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    # The capture left the model as it found it.
    assert lm.model.config._attn_implementation == "sdpa"
    torch.testing.assert_close(lm.model(input_ids=ids).logits, logits_before)
    ref, bos_cos = reference(lm, ids, config.delta, config.tau)
    heads = run.heads.sort_values(["layer", "head"])
    for column, expected in ref.items():
        got = torch.tensor(heads[column].to_numpy()).view_as(expected)
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5, msg=f"{name}: {column}")
    assert ref["hard_sink_frac"].max() > 0  # the threshold was exercised
    torch.testing.assert_close(torch.tensor(run.layers["bos_cos_mean_z"].to_numpy()), bos_cos, atol=1e-5, rtol=0)


def test_eager_and_sdpa_models_give_the_same_numbers():
    ids = token_windows(6)
    runs = [analyze(build("llama", attn=a), TokenWindows(ids), progress=False) for a in ("eager", "sdpa")]
    numeric = runs[0].heads.select_dtypes("number").columns
    torch.testing.assert_close(
        torch.tensor(runs[0].heads[numeric].to_numpy()), torch.tensor(runs[1].heads[numeric].to_numpy()), equal_nan=True
    )


def test_run_roundtrip_and_report(tmp_path):
    from sinkscope.pipelines.run import Run

    run = analyze(build("gpt2"), TokenWindows(token_windows(4)), progress=False)
    run.save(tmp_path / "run")
    loaded = Run.load(tmp_path / "run")
    assert loaded.heads.equals(run.heads)
    assert (tmp_path / "run" / "report.html").read_text().count("data:image/png;base64") >= 5
    assert sorted(p.name for p in (tmp_path / "run" / "figures").iterdir())
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_bfloat16_model_accumulates_in_float64_and_stays_close_to_float32():
    ids = token_windows(4)
    lm32 = build("llama", attn="sdpa")
    lm16 = build("llama", attn="sdpa")
    lm16.model.to(torch.bfloat16)
    lm16.identity["dtype"] = "bfloat16"
    run32, run16 = (analyze(lm, TokenWindows(ids), AnalyzeConfig(geometry_cap=0), progress=False)
                    for lm in (lm32, lm16))
    for column in ("sink_score", "diag_score", "entropy"):
        assert run16.heads[column].dtype == "float64"
        torch.testing.assert_close(torch.tensor(run16.heads[column].to_numpy()),
                                   torch.tensor(run32.heads[column].to_numpy()), atol=3e-2, rtol=0)


def census_reference(att: torch.Tensor, ids: torch.Tensor, epsilon: float):
    """Gu et al.'s per-window sink rates and the key-token table from full maps att (L, N, H, T, T), with loops."""
    L, N, H, T, _ = att.shape
    per_key = torch.stack([att[..., k:, k].sum(-1) / (T - k) for k in range(T)], -1)  # (L, N, H, T): α^w_k
    head_rate = (att[..., :, 0].mean(-1) > epsilon).double().mean(1)  # (L, H): mean_w [α^w > ε]
    position_rate = (per_key > epsilon).double().mean((1, 2))  # (L, T)
    tokens: dict[int, dict] = {}
    for w in range(N):
        for k in range(1, T - 1):
            received = att[:, w, :, k + 1 :, k].mean(-1)  # (L, H): mean_{t>k} A[t,k]
            entry = tokens.setdefault(int(ids[w, k]), {"n": 0, "sum": torch.zeros(L), "over": torch.zeros(L)})
            entry["n"] += 1
            entry["sum"] += received.sum(-1)
            entry["over"] += (received > epsilon).double().sum(-1)
    return head_rate, position_rate, tokens


@pytest.mark.parametrize("name", ["llama", "gemma3", "gpt2"])
def test_sink_census_equals_full_attention_maps(name):
    lm = build(name, attn="sdpa")
    ids = token_windows()
    epsilon = 0.25
    config = AnalyzeConfig(epsilon=epsilon, epsilons=(0.1, 0.5), geometry_cap=0)
    run = analyze(lm, TokenWindows(ids, batch_size=4), config, progress=False)
    lm.model.set_attn_implementation("eager")
    att = torch.stack(lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions).double()
    L, N, H = att.shape[:3]
    head_rate, position_rate, tokens = census_reference(att, ids, epsilon)
    heads = run.heads.sort_values(["layer", "head"])
    got = torch.tensor(heads["sink_rate"].to_numpy()).view(L, H)
    torch.testing.assert_close(got, head_rate, atol=1e-12, rtol=0)
    assert ((head_rate > 0) & (head_rate < 1)).any(), "no head is a sink in only some windows"
    torch.testing.assert_close(torch.tensor(run.layers["sink_rate"].to_numpy()), head_rate.mean(1))
    positions = run.positions.sort_values(["layer", "position"])
    torch.testing.assert_close(torch.tensor(positions["sink_rate"].to_numpy()).view(L, T), position_rate)
    # The old number, kept under its own name: threshold of the window-mean score.
    of_mean = (att[..., :, 0].mean((1, 3)) > epsilon).double().mean()
    summary = run.meta["summary"]
    assert summary["sink_rate_of_mean"] == pytest.approx(of_mean.item())
    assert summary["sink_rate"] == pytest.approx(head_rate.mean().item())
    for e in (0.1, 0.25, 0.5):
        expected = (att[..., :, 0].mean(-1) > e).double().mean().item()
        assert summary["sink_rates"][str(e)] == pytest.approx(expected)
    table = run.extra["tokens"].set_index("token_id")
    assert sorted(table.index) == sorted(tokens)
    for token_id, entry in tokens.items():
        row = table.loc[token_id]
        assert row["n"] == entry["n"]
        assert row["received_mean"] == pytest.approx(entry["sum"].sum().item() / (entry["n"] * L * H), abs=1e-6)
        assert row["sink_frac"] == pytest.approx(entry["over"].sum().item() / (entry["n"] * L * H), abs=1e-12)
    long = run.extra["token_layers"].set_index(["token_id", "layer"])
    for token_id, entry in tokens.items():
        for layer in range(L):
            row = long.loc[(token_id, layer)]
            assert row["sink_frac"] == pytest.approx(entry["over"][layer].item() / (entry["n"] * H), abs=1e-12)
            assert row["received_mean"] == pytest.approx(entry["sum"][layer].item() / (entry["n"] * H), abs=1e-6)
    assert table["sink_frac"].max() > 0, "no token's received attention crossed ε"


def test_resumed_run_keeps_the_census(tmp_path):
    lm = build("llama", attn="sdpa")
    ids = token_windows(8)
    config = AnalyzeConfig(epsilon=0.25, epsilons=(0.5,), geometry_cap=0)
    whole = analyze(lm, TokenWindows(ids, batch_size=2), config, progress=False)
    # Interrupted after 4 windows (analyze keeps its checkpoint; the CLI removes it once the result is saved),
    # then resume the whole corpus.
    analyze(lm, TokenWindows(ids[:4], batch_size=2), config, progress=False, checkpoint_dir=tmp_path / "ck",
            checkpoint_every=2)
    resumed = analyze(lm, TokenWindows(ids, batch_size=2), config, progress=False, checkpoint_dir=tmp_path / "ck",
                      resume=True)
    assert resumed.meta["corpus"]["windows"] == 8
    assert resumed.meta["summary"]["sink_rates"] == whole.meta["summary"]["sink_rates"]
    for name in ("heads", "positions"):
        pd.testing.assert_frame_equal(getattr(resumed, name), getattr(whole, name), rtol=1e-9, atol=1e-12)
    for name in ("tokens", "token_layers"):
        pd.testing.assert_frame_equal(resumed.extra[name], whole.extra[name], rtol=1e-9, atol=1e-12)
