"""The families the sink literature uses beyond llama/gemma/gpt2, each on tiny random-weight real transformers classes.

GPT-NeoX (Pythia: fused per-head QKV, partial rotary, parallel attention and MLP), OPT (learned positions, pre- and
post-LN), Phi-3 (fused [q|k|v]), Phi (parallel, partial rotary), OLMo-2 (no norm before attention, QK-norm over all
heads, norm after attention), Falcon (its three QKV layouts, ALiBi), and the mixture-of-experts families Mixtral,
Qwen2-MoE, Qwen3-MoE and OLMoE. Every column of a run is compared with `eager_reference` (plain eager maps in
float64) on the default and the block path; the reference reads `h` at each block's input, `z` at each attention
module's input and the values as the model's own eager attention function receives them, so it shares no code
with sinkscope's family table. The weight maps are checked against the model's own logits and outputs, head
ablation against the value vectors, and `sinkscope analyze --model DIR` runs on a saved directory of each family.
"""

from __future__ import annotations

import functools
import sys
from contextlib import contextmanager

import pandas as pd
import pytest
import torch
import transformers as tf

import sinkscope.capture.attention as attention
import sinkscope.capture.blocks as blocks
from sinkscope.capture.feed import Feed
from sinkscope.capture.head_ablation import head_ablation
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import (
    REFUSED,
    attention_module,
    family_for,
)
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import query_key_maps, value_output_maps
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze, statistics_for

from . import eager_reference as eager
from .eager_reference import compare

V, T, N, BATCH = 96, 13, 8, 4
BLOCK_ELEMENTS = 1000  # several uneven query blocks per layer on the block path
SIZES = dict(vocab_size=V, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=64,
             pad_token_id=None)  # no zero embedding row: BOS and every token have a direction
COMMON = dict(SIZES, intermediate_size=96)
MOE = dict(COMMON, num_key_value_heads=2, num_experts_per_tok=1)
FALCON = dict(SIZES, ffn_hidden_size=96)
OPT = dict(SIZES, ffn_dim=96, word_embed_proj_dim=64)
CONFIG = AnalyzeConfig(epsilon=0.25, delta=0.5, tau=0.3, epsilons=(0.1,), geometry_cap=0)

MODELS = {  # name -> (model class, config)
    "gpt_neox": (tf.GPTNeoXForCausalLM, lambda: tf.GPTNeoXConfig(**COMMON, rotary_pct=0.25)),
    "opt": (tf.OPTForCausalLM, lambda: tf.OPTConfig(**OPT)),
    # OPT-350m's layout: the norm after attention (post-LN), and a projection between embeddings and blocks.
    "opt_post_ln": (tf.OPTForCausalLM, lambda: tf.OPTConfig(**{**OPT, "word_embed_proj_dim": 32},
                                                             do_layer_norm_before=False)),
    "phi3": (tf.Phi3ForCausalLM, lambda: tf.Phi3Config(**COMMON, num_key_value_heads=2,
                                                       eos_token_id=1, bos_token_id=0)),
    "phi": (tf.PhiForCausalLM, lambda: tf.PhiConfig(**COMMON)),
    "olmo2": (tf.Olmo2ForCausalLM, lambda: tf.Olmo2Config(**COMMON, num_key_value_heads=2, eos_token_id=1)),
    "falcon_grouped": (tf.FalconForCausalLM, lambda: tf.FalconConfig(**FALCON, num_kv_heads=2,
                                                                     new_decoder_architecture=True)),
    "falcon_alibi": (tf.FalconForCausalLM, lambda: tf.FalconConfig(**FALCON, multi_query=True, alibi=True)),
    "falcon_per_head": (tf.FalconForCausalLM, lambda: tf.FalconConfig(**FALCON, multi_query=False,
                                                                      parallel_attn=False)),
    "mixtral": (tf.MixtralForCausalLM, lambda: tf.MixtralConfig(**MOE, num_local_experts=2)),
    "qwen2_moe": (tf.Qwen2MoeForCausalLM, lambda: tf.Qwen2MoeConfig(**MOE, num_experts=2, moe_intermediate_size=32,
                                                                    shared_expert_intermediate_size=32)),
    "qwen3_moe": (tf.Qwen3MoeForCausalLM, lambda: tf.Qwen3MoeConfig(**MOE, num_experts=2, moe_intermediate_size=32,
                                                                    head_dim=16)),
    "olmoe": (tf.OlmoeForCausalLM, lambda: tf.OlmoeConfig(**MOE, num_experts=2)),
    "phimoe": (tf.PhimoeForCausalLM, lambda: tf.PhimoeConfig(**MOE, num_local_experts=2)),
    # A learned sink per head; a sliding window shorter than T in layer 0 (a boolean mask).
    "gpt_oss": (tf.GptOssForCausalLM, lambda: tf.GptOssConfig(**MOE, num_local_experts=2, head_dim=16, sliding_window=5,
                                                              layer_types=["sliding_attention", "full_attention"])),
}  # fmt: skip
LEARNED_SINKS = (-3.0, 0.0, 2.0, 5.0)  # gpt-oss's sink logit of each head: from little mass to nearly all

# Where the blocks and their attention modules live — written here, not read from sinkscope's family table.
LAYOUT = {"gpt_neox": ("layers", "attention"), "opt": ("decoder.layers", "self_attn"), "falcon": ("h", "self_attention")}
QK_PROJECTIONS = ("q_proj", "k_proj", "query_key_value", "qkv_proj")


def tiny(name: str) -> LoadedModel:
    """A random model with sharpened query·key logits and a small BOS value: hard patterns and thresholds are crossed."""
    torch.manual_seed(0)
    cls, config = MODELS[name]
    model = cls(config())
    with torch.no_grad():
        # A BOS embedding near zero gives BOS a small value (Guo et al.'s value drain): queries on it switch off.
        model.get_input_embeddings().weight[0].mul_(1e-3)
        for module in model.modules():
            for attr in QK_PROJECTIONS:
                if hasattr(module, attr):
                    getattr(module, attr).weight.mul_(6.0)
            for attr in ("q_norm", "k_norm"):  # a QK-norm undoes the scale above: raise its gain instead
                if hasattr(module, attr):
                    getattr(module, attr).weight.add_(2.0)
            if hasattr(module, "sinks"):
                module.sinks.copy_(torch.tensor(LEARNED_SINKS))
    model.set_attn_implementation("sdpa" if family_for(model.config.model_type).sdpa else "eager")
    model.eval().requires_grad_(False)
    family = family_for(model.config.model_type, model.config)
    return LoadedModel(model=model, tokenizer=None, family=family, identity={"name": name})


def blocks_and_attention(model: torch.nn.Module) -> list[tuple[torch.nn.Module, torch.nn.Module]]:
    blocks_path, attention_name = LAYOUT.get(model.config.model_type, ("layers", "self_attn"))
    blocks = functools.reduce(getattr, blocks_path.split("."), model.base_model)
    return [(block, getattr(block, attention_name)) for block in blocks]


@contextmanager
def recorded_values(model: torch.nn.Module, store: dict):
    """The model's own eager attention function, wrapped to record the value states (B, KV, T, dh) it receives."""
    module = sys.modules[type(model.base_model).__module__]
    original = module.eager_attention_forward
    layer_of = {id(attn): i for i, (_, attn) in enumerate(blocks_and_attention(model))}

    def recording(attn, query, key, value, *args, **kwargs):
        store[layer_of[id(attn)]] = value.double()
        return original(attn, query, key, value, *args, **kwargs)

    module.eager_attention_forward = recording
    try:
        yield
    finally:
        module.eager_attention_forward = original


@torch.no_grad()
def capture(model: torch.nn.Module, ids: torch.Tensor) -> tuple[list, list, list, list]:
    """`eager_reference.capture` for these families: maps, h (block input), z (attention input), values."""
    pairs = blocks_and_attention(model)
    h, z, values = [None] * len(pairs), [None] * len(pairs), {}
    handles = []

    def keep(store, index):
        def hook(_module, args, kwargs):
            store[index] = (args[0] if args else kwargs["hidden_states"]).double()

        return hook

    for i, (block, attn) in enumerate(pairs):
        handles.append(block.register_forward_pre_hook(keep(h, i), with_kwargs=True))
        handles.append(attn.register_forward_pre_hook(keep(z, i), with_kwargs=True))
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        with recorded_values(model, values):
            out = model.base_model(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
        for handle in handles:
            handle.remove()
    return [a.double() for a in out.attentions], h, z, [values[i] for i in range(len(pairs))]


def token_windows() -> torch.Tensor:
    ids = torch.randint(1, V, (N, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 0  # BOS
    ids[:, 3] = 7  # a token in every window: the key-token table has repeated ids
    return ids


@functools.cache
def model_and_reference(name: str):
    lm = tiny(name)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(eager, "capture", capture)
        ref = eager.eager_reference(lm.model, token_windows(), CONFIG.epsilon, CONFIG.delta, CONFIG.tau,
                                    CONFIG.epsilons, geometry=False)
    return lm, ref


# Every family on the default and the block path (gpt-oss: test_learned_sink_columns_...); the fused path (CPU, long
# windows) forced for a few, one per kind of attention input (fused per-head QKV, no input norm, GQA, fused concat).
ROUTES = [(n, p) for n in MODELS if n != "gpt_oss" for p in ("default", "blocks")] + [
    (n, "fused") for n in ("gpt_neox", "olmo2", "mixtral", "phi3")]  # fmt: skip


@pytest.mark.parametrize(("name", "path"), ROUTES)
def test_every_column_equals_the_eager_reference(name, path, monkeypatch):
    lm, ref = model_and_reference(name)
    taken: list[str] = []
    route = attention.attention_path

    def spy(*args, **kwargs):
        chosen = "blocks" if path == "blocks" else route(*args, **kwargs)
        taken.append(chosen)
        return chosen

    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", BLOCK_ELEMENTS)
    monkeypatch.setattr(attention, "attention_path", spy)
    if path == "fused":
        monkeypatch.setattr(attention.fused_cpu, "available", lambda: False)  # the compiled kernel would take it
        monkeypatch.setattr(attention, "ROWS_UP_TO_SEQ_LEN", 0)
    run = analyze(lm, TokenWindows(token_windows(), batch_size=BATCH), CONFIG, progress=False)
    # Falcon always hands its attention a mask (ALiBi adds to it): the block path; the others are plain causal.
    default = "compiled" if attention.fused_cpu.available() else "rows"
    plain = {"default": default, "fused": "fused", "blocks": "blocks"}[path]
    assert set(taken) == ({"blocks"} if name.startswith("falcon") else {plain})
    tables = {"heads": run.heads, "layers": run.layers, "positions": run.positions, **run.extra}
    compare(tables, run.meta["summary"], ref, f"{name} {path}:")
    for key in ("hard_sink", "off", "on"):  # the thresholds were crossed, so a wrong comparison shows
        assert ref.exercised[key] > 0, f"{name}: no {key}"


@contextmanager
def rope_off(lm: LoadedModel):
    """Every rotary embedding returns cos = 1, sin = 0 (RoPE is the identity), and ALiBi is off."""
    def identity(_module, _args, output):
        return torch.ones_like(output[0]), torch.zeros_like(output[1])

    rotary = [m for m in lm.model.modules() if "RotaryEmbedding" in type(m).__name__]
    handles = [m.register_forward_hook(identity) for m in rotary]
    alibi = getattr(lm.model.config, "alibi", False)
    lm.model.config.alibi = False
    try:
        yield
    finally:
        lm.model.config.alibi = alibi
        for handle in handles:
            handle.remove()


def qk_norm_factors(attn: torch.nn.Module, z: torch.Tensor, which: str, n: int, head_dim: int) -> torch.Tensor:
    """The QK-norm's per-token 1/rms (B, T, n) of the raw query or key projection, per head where its gain has
    `head_dim` entries (Qwen3), over all heads otherwise (OLMo-2, OLMoE); ones without a QK-norm."""
    norm = getattr(attn, f"{which}_norm", None)
    if norm is None:
        return torch.ones(*z.shape[:2], n, dtype=torch.float64)
    raw = getattr(attn, f"{which}_proj")(z.float()).double()  # (B, T, n·dh)
    if norm.weight.numel() == head_dim:
        mean_square = raw.unflatten(-1, (n, head_dim)).pow(2).mean(-1)
    else:
        mean_square = raw.pow(2).mean(-1, keepdim=True).expand(*raw.shape[:2], n)
    return torch.rsqrt(mean_square + norm.variance_epsilon)


@pytest.mark.parametrize("name", [n for n in MODELS if n != "falcon_alibi"])
def test_weight_maps_equal_the_models_logits_and_outputs(name):
    """`query_key_maps`: log-attention differences of the model's own eager maps (RoPE off, biases zero) equal
    `z_i W_Q W_Kᵀ (z_j − z_0)ᵀ` with the QK-norm's per-token factors read off the raw projections (OLMo-2, OLMoE:
    one per token over all heads; Qwen3: per head); `value_output_maps`: `Σ_h A_h z W_V[h] W_O[h]` is the attention
    module's output."""
    lm = tiny(name)
    with torch.no_grad():
        for module in lm.model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                module.bias.zero_()
    ids = token_windows()[:2]
    outputs, inputs = {}, {}
    handles = []
    for i, (_, attn) in enumerate(blocks_and_attention(lm.model)):
        handles.append(attn.register_forward_hook(lambda _m, _a, out, i=i: outputs.__setitem__(i, out[0].double())))
        handles.append(attn.register_forward_pre_hook(
            lambda _m, args, kwargs, i=i: inputs.__setitem__(i, (args[0] if args else kwargs["hidden_states"])
                                                             .double()), with_kwargs=True))  # fmt: skip
    lm.model.set_attn_implementation("eager")
    with rope_off(lm), torch.no_grad():
        maps = lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions
    for handle in handles:
        handle.remove()
    layout = lm.layout
    for layer, block in enumerate(lm.layers):
        z, A = inputs[layer], maps[layer].double()  # (B, T, d), (B, H, T, T)
        w_q, w_k = (w.double() for w in query_key_maps(lm.family, block, layout))
        w_v, w_o = (w.double() for w in value_output_maps(lm.family, block, layout))
        heads_out = A @ torch.einsum("btd,hde->bhte", z, w_v)  # (B, H, T, dh)
        expected = torch.einsum("bhte,hef->btf", heads_out, w_o)
        torch.testing.assert_close(outputs[layer], expected, atol=1e-4, rtol=1e-4, msg=f"{name} W_V W_O {layer}")
        attn = attention_module(lm.family, block)
        r_q = qk_norm_factors(attn, z, "q", layout.n_heads, layout.head_dim)  # (B, T, H)
        r_k = qk_norm_factors(attn, z, "k", layout.n_kv_heads, layout.head_dim).repeat_interleave(layout.group, -1)
        logits = torch.einsum("btd,hde,hfe,bsf->bhts", z, w_q, w_k, z)  # (B, H, T, T)
        logits = logits * r_q.transpose(1, 2)[..., None] * r_k.transpose(1, 2)[:, :, None, :]
        for t in range(1, T):
            if (A[:, :, t, 0] == 0).any():  # BOS outside a sliding window (gpt-oss's layer 0)
                continue
            got = A[:, :, t, : t + 1].log() - A[:, :, t, :1].log()
            want = logits[:, :, t, : t + 1] - logits[:, :, t, :1]
            torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=f"{name} W_QK {layer} q{t}")


@pytest.mark.parametrize("name", ["gpt_neox", "falcon_grouped", "phi3"])
def test_bos_ablation_writes_each_heads_own_value_of_bos(name):
    """`head_ablation(..., "bos")` finds the values inside a fused projection: the ablated head's input to the
    output projection is its kv head's `v_0`, as the model's eager attention received it."""
    lm = tiny(name)
    ids = token_windows()[:2]
    values: dict = {}
    lm.model.set_attn_implementation("eager")
    with recorded_values(lm.model, values), torch.no_grad():
        lm.base(input_ids=ids, use_cache=False)
    layout, seen = lm.layout, {}
    output_proj = getattr(attention_module(lm.family, lm.layers[1]), lm.family.output_proj)
    with head_ablation(lm, [(1, 3)], "bos"):
        handle = output_proj.register_forward_pre_hook(lambda _m, args: seen.__setitem__("o", args[0].double()))
        with recorded_values(lm.model, {}), torch.no_grad():
            lm.base(input_ids=ids, use_cache=False)
        handle.remove()
    head = seen["o"].unflatten(-1, (layout.n_heads, layout.head_dim))[:, :, 3]  # (B, T, dh)
    v0 = values[1][:, 3 // layout.group, 0]  # (B, dh)
    torch.testing.assert_close(head, v0[:, None].expand_as(head), atol=1e-6, rtol=1e-6)


def test_smoothing_runs_where_it_applies_and_is_refused_where_not():
    run = analyze(tiny("gpt_neox"), TokenWindows(token_windows()[:4]), AnalyzeConfig(geometry_cap=0), progress=False,
                  smoothing=True)
    assert run.heads["smooth_b"].notna().all()
    with pytest.raises(SinkscopeError, match="olmo2 models: its attention reads the residual stream without a norm"):
        analyze(tiny("olmo2"), TokenWindows(token_windows()[:4]), progress=False, smoothing=True)


def test_refused_model_types_name_the_reason():
    for model_type in REFUSED:
        with pytest.raises(SinkscopeError, match="outside the attention interface"):
            family_for(model_type)
    with pytest.raises(SinkscopeError, match="'rwkv' is not supported: .* model types: .*gpt_neox.*`sinkscope models`"):
        family_for("rwkv")
    # What does not apply to one configuration of a family, with the reason.
    with pytest.raises(SinkscopeError, match="weight forms .* phi models: its QK LayerNorms"):
        family_for("phi", tf.PhiConfig(qk_layernorm=True)).require("weights")
    post_ln = family_for("opt", tf.OPTConfig(do_layer_norm_before=False))
    assert post_ln.input_norm is None and not post_ln.supports("smoothing") and post_ln.supports("capture")


@pytest.mark.parametrize("name", ["gpt_neox", "opt", "phi3", "phi", "olmo2", "falcon_grouped", "mixtral", "qwen2_moe",
                                  "olmoe", "gpt_oss"])  # fmt: skip
def test_analyze_command_on_a_saved_model_directory(name, tmp_path, monkeypatch):
    """`sinkscope analyze --model DIR` on a saved directory (safetensors, fast tokenizer) of each family; OPT's
    tokenizer has `</s>` as its BOS, as OPT's has. The report page is tested elsewhere and left out here for speed,
    but for gpt-oss, whose page shows the learned-sink score and class."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from sinkscope.cli.main import main
    from sinkscope.pipelines.run import Run

    from .tiny_checkpoint import WORDS, write_corpus

    words = ["</s>" if w == "<eos>" else w for w in WORDS]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    bos = "</s>" if name == "opt" else "<bos>"
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token=bos, eos_token="</s>", unk_token="<unk>")
    lm = tiny(name)
    lm.model.save_pretrained(tmp_path / "model", safe_serialization=True)
    tokenizer.save_pretrained(tmp_path / "model")
    write_corpus(tmp_path / "corpus.txt", documents=12, words=20)
    reports = []
    if name != "gpt_oss":
        monkeypatch.setattr("sinkscope.report.html.write_report", lambda runs, *a, **k: reports.append(runs))
    argv = ["analyze", "--model", str(tmp_path / "model"), "--corpus", str(tmp_path / "corpus.txt"), "--seq-len", "16",
            "--max-windows", "4", "--batch-size", "2", "--geometry-cap", "8", "--out", str(tmp_path / "run"), "--quiet"]
    assert main(argv) == 0
    run = Run.load(tmp_path / "run")
    assert run.meta["model"]["family"] == lm.family.name
    assert len(run.heads) == len(lm.layers) * lm.layout.n_heads and run.heads["sink_score"].between(0, 1).all()
    assert run.meta["corpus"]["windows"] == 4 and len(reports) == (name != "gpt_oss")
    if name == "gpt_oss":
        page = (tmp_path / "run" / "report.html").read_text()
        assert "Learned-sink score" in page and (tmp_path / "run" / "figures" / "learned_sink_score.png").is_file()
        assert "learned sink" in set(run.heads["head_class"])
    assert run.meta["corpus"]["bos_id"] == tokenizer.convert_tokens_to_ids(bos)


def test_models_command_lists_every_family_with_its_analyses(capsys):
    from sinkscope.cli.main import main
    from sinkscope.models.families import FAMILIES

    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for family in FAMILIES:
        assert f"  {family.name} ({', '.join(family.model_types)}): capture, geometry" in out
    assert "olmo2 (olmo2): capture, geometry, weights, ablate (not smoothing)" in out
    assert "gpt_oss (gpt_oss): capture, geometry, smoothing, weights, ablate; learned sink per head" in out
    assert "Refused (attention computed outside transformers' attention interface): bloom, gpt_neo" in out


def learned_sink_reference(lm: LoadedModel, ref, epsilon: float, delta: float, tau: float) -> None:
    """Add the learned-sink columns to `ref` from the model's own eager attention: its map A drops the sink column,
    so the sink column is `m_t = 1 − Σ_j A[t,j]` (float32 maps, so within 1e-6); the head class "learned sink"
    (score > ε and ≥ the BOS sink score) replaces the class the reference gave. Once per cached reference."""
    if "learned_sink_score" in ref.heads:
        return
    maps, _, _, values = capture(lm.model, token_windows())
    heads, layers = [], []
    T = maps[0].shape[-1]
    t = torch.arange(T)
    for layer, A in enumerate(maps):  # (N, H, T, T)
        m = 1 - A.sum(-1)  # (N, H, T)
        v = values[layer].repeat_interleave(A.shape[1] // values[layer].shape[1], dim=1)
        value_norms = v.norm(dim=-1)
        off = ((A @ v).norm(dim=-1) <= tau * value_norms.cumsum(-1) / (t + 1.0))[..., 1:]  # (N, H, T-1)
        hard = m[..., 1:] >= 1 - delta
        hard_sink, hard_diag = A[..., 1:, 0] >= 1 - delta, A[..., t[1:], t[1:]] >= 1 - delta
        rate = (m.mean(-1) > epsilon).double().mean(0)  # (H,)
        for head in range(A.shape[1]):
            n_off = int(off[:, head].sum())
            heads.append({
                "layer": layer, "head": head,
                "learned_sink_score": float(m[:, head].mean()),
                "learned_sink_rate": float(rate[head]),
                "hard_learned_sink_frac": float(hard[:, head].double().mean()),
                "switch_n_off_learned_sink": int((off & hard)[:, head].sum()),
                "switch_learned_agreement": int((off & hard)[:, head].sum()) / n_off if n_off else float("nan"),
                "switch_any_sink_agreement": int((off & (hard | hard_sink))[:, head].sum()) / n_off if n_off
                else float("nan"),
            })  # fmt: skip
        layers.append({"layer": layer, "learned_sink_rate": float(rate.mean()),
                       "mlp_like_frac_learned": float((hard | hard_sink | hard_diag).all(1).double().mean())})
    ref.heads = ref.heads.merge(pd.DataFrame(heads), on=["layer", "head"])
    ref.layers = ref.layers.merge(pd.DataFrame(layers), on="layer")
    learned = (ref.heads["learned_sink_score"] > epsilon) & (ref.heads["learned_sink_score"] >= ref.heads["sink_score"])
    ref.heads.loc[learned, "head_class"] = "learned sink"
    ref.summary["head_classes"] = {k: int(v) for k, v in ref.heads["head_class"].value_counts().items()}


def test_learned_sink_columns_equal_the_eager_softmax_with_its_sink_column(monkeypatch):
    """gpt-oss: every column, the learned-sink ones included, equals the eager reference; the learned sink takes a
    sliding-window layer's boolean mask, several uneven query blocks, and crosses δ, τ and ε."""
    lm, ref = model_and_reference("gpt_oss")
    learned_sink_reference(lm, ref, CONFIG.epsilon, CONFIG.delta, CONFIG.tau)
    starts: list[int] = []
    on_sink = Feed.on_learned_sink
    monkeypatch.setattr(Feed, "on_learned_sink", lambda self, layer, start, mass: starts.append(start) or
                        on_sink(self, layer, start, mass))  # fmt: skip
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", BLOCK_ELEMENTS)
    run = analyze(lm, TokenWindows(token_windows(), batch_size=BATCH), CONFIG, progress=False)
    assert len(set(starts)) > 2, "the learned-sink path ran in one block"
    assert lm.model.config._attn_implementation == "eager"  # as loaded: transformers has no sdpa path for it
    tables = {"heads": run.heads, "layers": run.layers, "positions": run.positions, **run.extra}
    compare(tables, run.meta["summary"], ref, "gpt_oss:")
    heads = ref.heads
    assert (heads["hard_learned_sink_frac"] > 0).any() and (heads["switch_n_off_learned_sink"] > 0).any()
    assert ((heads["learned_sink_rate"] > 0) & (heads["learned_sink_rate"] < 1)).any() or (
        heads["learned_sink_rate"].isin([0.0, 1.0]).all() and heads["learned_sink_rate"].nunique() == 2)
    assert "learned sink" in set(heads["head_class"]) and len(set(heads["head_class"])) > 1


def test_learned_sinks_on_cudas_routing_equal_the_eager_reference(monkeypatch):
    """gpt-oss through CUDA's routing: both layers (one with a sliding window) take the flex path with the sink in
    its normaliser, the sink's mass reaches the statistics, and every column equals the eager reference."""
    import sinkscope.capture.flex as flex

    lm, ref = model_and_reference("gpt_oss")
    learned_sink_reference(lm, ref, CONFIG.epsilon, CONFIG.delta, CONFIG.tau)
    forms: list[bool] = []
    flex_parts = flex.flex_parts
    monkeypatch.setattr(attention, "_flex_here", lambda query: True)
    monkeypatch.setattr(flex, "flex_parts", lambda *a, **kw: forms.append(kw.get("sinks") is not None)
                        or flex_parts(*a, **kw))  # fmt: skip
    run = analyze(lm, TokenWindows(token_windows(), batch_size=BATCH), CONFIG, progress=False)
    assert forms and all(forms), "a learned-sink layer left the flex path"
    tables = {"heads": run.heads, "layers": run.layers, "positions": run.positions, **run.extra}
    compare(tables, run.meta["summary"], ref, "gpt_oss flex:")


def test_unwatched_learned_sink_modules_keep_the_models_numbers():
    """Outside an analysis (a module no statistic watches) the learned sink still applies: the model's own eager
    attention, not sdpa; the logits equal eager's."""
    lm = tiny("gpt_oss")
    ids = token_windows()[:2]
    expected = lm.model(input_ids=ids).logits
    with attention.watch_attention(lm.model, {}, lambda *a: None, lambda *a: None):
        torch.testing.assert_close(lm.model(input_ids=ids).logits, expected)


def test_learned_sink_state_merges_and_restores_like_one_pass():
    """gpt-oss through `test_statistics_merge`'s check: two shards, one restored from its `state_dict`, merged
    statistic by statistic (the learned-sink one included), give the tables of one pass."""
    from .test_statistics_merge import WINDOWS, feed_windows, tables
    from .test_statistics_merge import T as LENGTH

    lm = tiny("gpt_oss")
    ids = torch.randint(1, V, (WINDOWS, LENGTH), generator=torch.Generator().manual_seed(4))
    ids[:, 0] = 0
    whole, even, odd = (feed_windows(lm, ids, shard) for shard in ((0, 1), (0, 2), (1, 2)))
    restored = Feed(statistics_for(lm, LENGTH, AnalyzeConfig(geometry_cap=20, epsilons=(0.5,)), smoothing=True),
                    LENGTH)
    restored.load_state_dict(odd.state_dict())
    for mine, other in zip(even.statistics, restored.statistics, strict=True):
        mine.merge(other)
    expected, got = tables(whole, WINDOWS), tables(even, WINDOWS)
    assert "learned_sink_rate" in expected[0] and 0 < expected[0]["learned_sink_rate"].mean() < 1
    for left, right in zip(expected, got, strict=True):
        pd.testing.assert_frame_equal(left, right, rtol=1e-5, atol=1e-7)
