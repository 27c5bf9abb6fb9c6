"""Every documented column of a run equals the independent eager reference, for every family and attention path.

Tiny random-weight models of each supported family (`FAMILIES`), analysed with the block budget forced small
(`BLOCK_ELEMENTS`, so every path cuts a layer into several query blocks of uneven size) through each routing:
the default (rows path wherever the attention is plain causal), the fused path forced (`ROWS_UP_TO_SEQ_LEN` 0) and
the block path forced. Each run's heads, layers, positions, tokens, token_layers and summary are compared with
`eager_reference` column by column; a column without a reference fails (`compare`).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import replace

import pytest
import torch
import transformers as tf

from sinkscope.capture import fused_cpu
from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import family_for, supported_model_types
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig

from .eager_reference import CERTIFICATES, Reference, analyze_on_path, compare, eager_reference

V, T, N, BATCH = 96, 13, 10, 4  # batches of 4, 4, 2 windows
# Query rows per block = BLOCK_ELEMENTS // (B·H·T): 4 rows for the batches of 4 (blocks 4, 4, 4, 1), 9 for the
# last batch of 2 (blocks 9, 4), for 4 heads.
BLOCK_ELEMENTS = 1000
COMMON = dict(vocab_size=V, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
              max_position_embeddings=64)  # fmt: skip
CONFIG = AnalyzeConfig(epsilon=0.25, delta=0.4, tau=0.7, epsilons=(0.1, 0.6), geometry_cap=0)

MOE = dict(num_experts_per_tok=1)
FAMILIES = {  # model type -> (config, model class): every type of the family table but the multimodal "gemma3"
    "llama": (lambda: tf.LlamaConfig(**COMMON, num_key_value_heads=2), tf.LlamaForCausalLM),
    "mistral": (lambda: tf.MistralConfig(**COMMON, num_key_value_heads=1, sliding_window=None), tf.MistralForCausalLM),
    "mixtral": (lambda: tf.MixtralConfig(**COMMON, **MOE, num_key_value_heads=2, num_local_experts=2,
                                         sliding_window=None), tf.MixtralForCausalLM),
    "qwen2": (lambda: tf.Qwen2Config(**COMMON, num_key_value_heads=2), tf.Qwen2ForCausalLM),
    "qwen3": (lambda: tf.Qwen3Config(**COMMON, num_key_value_heads=2, head_dim=16), tf.Qwen3ForCausalLM),
    "qwen2_moe": (lambda: tf.Qwen2MoeConfig(**COMMON, **MOE, num_key_value_heads=2, num_experts=2,
                                            moe_intermediate_size=32, shared_expert_intermediate_size=32),
                  tf.Qwen2MoeForCausalLM),
    "qwen3_moe": (lambda: tf.Qwen3MoeConfig(**COMMON, **MOE, num_key_value_heads=2, head_dim=16, num_experts=2,
                                            moe_intermediate_size=32), tf.Qwen3MoeForCausalLM),
    "gemma": (lambda: tf.GemmaConfig(**COMMON, num_key_value_heads=1, head_dim=16), tf.GemmaForCausalLM),
    # Gemma 2 soft-caps its logits (the only family that does): every layer takes the block path.
    "gemma2": (lambda: tf.Gemma2Config(**COMMON, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=16,
                                       attn_logit_softcapping=4.0, sliding_window=6), tf.Gemma2ForCausalLM),
    # A sliding window shorter than T in two layers: those take the block path with a boolean mask.
    "gemma3_text": (lambda: tf.Gemma3TextConfig(**COMMON, num_key_value_heads=1, head_dim=16, sliding_window=5,
                                                layer_types=["sliding_attention", "full_attention",
                                                             "sliding_attention"]), tf.Gemma3ForCausalLM),
    "phi": (lambda: tf.PhiConfig(**COMMON, partial_rotary_factor=0.5), tf.PhiForCausalLM),
    "phi3": (lambda: tf.Phi3Config(**COMMON, num_key_value_heads=2), tf.Phi3ForCausalLM),
    "olmo2": (lambda: tf.Olmo2Config(**COMMON, num_key_value_heads=2), tf.Olmo2ForCausalLM),  # no input norm: z = h
    "olmoe": (lambda: tf.OlmoeConfig(**COMMON, **MOE, num_key_value_heads=2, num_experts=2), tf.OlmoeForCausalLM),
    "opt": (lambda: tf.OPTConfig(vocab_size=V, hidden_size=64, ffn_dim=96, num_hidden_layers=3, num_attention_heads=4,
                                 max_position_embeddings=64, word_embed_proj_dim=64), tf.OPTForCausalLM),
    "falcon": (lambda: tf.FalconConfig(vocab_size=V, hidden_size=64, num_hidden_layers=3, num_attention_heads=4),
               tf.FalconForCausalLM),  # multi-query: [q | k | v] in one projection
    "gpt_neox": (lambda: tf.GPTNeoXConfig(**COMMON, rotary_pct=0.25), tf.GPTNeoXForCausalLM),  # [q k v] per head
    "gpt2": (lambda: tf.GPT2Config(vocab_size=V, n_embd=64, n_layer=3, n_head=4, n_positions=64), tf.GPT2LMHeadModel),
}  # fmt: skip
NO_SDPA = ("gemma2",)  # transformers runs these with eager attention only
# Every layer takes the block path: Gemma 2 soft-caps, Falcon hands the attention function a mask tensor.
BLOCKS_ONLY = ("gemma2", "falcon")
GEOMETRY = ("llama", "olmo2", "gpt2")  # the certificate columns (which no attention path touches): default path
PATHS = ("default", "fused", "blocks")


def tiny(name: str) -> LoadedModel:
    """A random model of the family with sharpened query·key logits, so hard patterns and ε are crossed."""
    torch.manual_seed(0)
    make_config, cls = FAMILIES[name]
    config = make_config()
    config.pad_token_id = 0  # no window holds id 0: a padding id's embedding is zero
    model = cls(config)
    H, dh = 4, 16
    with torch.no_grad():
        for module in model.modules():
            for attr in ("q_proj", "k_proj"):
                if hasattr(module, attr):
                    getattr(module, attr).weight.mul_(6.0)
            for attr in ("q_norm", "k_norm"):  # QK-norm undoes the scale above: raise its gain instead
                if hasattr(module, attr):
                    getattr(module, attr).weight.add_(2.0)
            if hasattr(module, "c_attn"):  # GPT-2: columns [q | k | v]
                module.c_attn.weight[:, : 2 * H * dh].mul_(6.0)
            for attr in ("qkv_proj", "query_key_value"):
                if hasattr(module, attr):
                    weight = getattr(module, attr).weight
                    if name == "gpt_neox":  # rows [q k v] per head
                        weight.view(H, 3, dh, -1)[:, :2].mul_(6.0)
                    else:  # rows [q | k | v]: k and v are equally wide
                        weight[: weight.shape[0] - (weight.shape[0] - H * dh) // 2].mul_(6.0)
    model.set_attn_implementation("eager" if name in NO_SDPA else "sdpa")
    model.eval().requires_grad_(False)
    family = family_for(config.model_type, config)
    return LoadedModel(model=model, tokenizer=None, family=family, identity={"name": name})


def token_windows() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(2, V, (N, T), generator=g)
    ids[:, 0] = 1  # BOS (not 0: Gemma's padding id, whose embedding is zero)
    ids[:, 3] = 7  # a token seen in every window, so the key-token table has repeated ids
    return ids


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny tensors: several threads only contend (a tiny Mixtral's analysis took 1.8 s on 2 busy cores, 0.2 s on 1)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@functools.cache
def model_and_reference(name: str) -> tuple[LoadedModel, Reference]:
    lm = tiny(name)
    ref = eager_reference(lm.model, token_windows(), CONFIG.epsilon, CONFIG.delta, CONFIG.tau, CONFIG.epsilons,
                          geometry=name in GEOMETRY)
    return lm, ref


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(FAMILIES))
def test_every_column_equals_the_eager_reference(name, path, monkeypatch):
    lm, ref = model_and_reference(name)
    geometry = name in GEOMETRY
    if geometry and path != "default":
        ref = dataclasses.replace(ref, layers=ref.layers[[c for c in ref.layers if c not in CERTIFICATES]])
    config = replace(CONFIG, geometry_cap=N * (T - 1)) if geometry and path == "default" else CONFIG
    windows = TokenWindows(token_windows(), batch_size=BATCH)
    run, taken, starts = analyze_on_path(lm, windows, config, path, monkeypatch, BLOCK_ELEMENTS)
    if path == "blocks" or name in BLOCKS_ONLY:
        assert set(taken) == {"blocks"}
        assert len(set(starts)) > 2, "the block path ran in one block"
    elif path == "fused":
        assert "fused" in taken and set(taken) <= {"fused", "blocks"}
    else:
        default = "compiled" if fused_cpu.available() else "rows"
        assert default in taken and set(taken) <= {default, "blocks"}
    if name == "gemma3_text":
        assert "blocks" in taken  # its sliding-window layers
    tables = {"heads": run.heads, "layers": run.layers, "positions": run.positions, **run.extra}
    compare(tables, run.meta["summary"], ref, f"{name} {path}:")


@pytest.mark.parametrize("name", list(FAMILIES))
def test_the_reference_crosses_every_threshold(name):
    """Each family's inputs put some queries on both sides of δ (hard sink, hard diagonal), τ (switched off/on) and
    ε (token sink_frac), and some BOS cosines at or below 0, so a wrong comparison or count shows."""
    _, ref = model_and_reference(name)
    for key in ("hard_sink", "off", "on", "cos_nonpos"):
        assert ref.exercised[key] > 0, f"{name}: no {key}"
    assert ref.exercised["sink_frac"] > 0
    assert (ref.heads["switch_n_off_sink"] > 0).any() and (ref.heads["switch_n_off_nosink"] > 0).any()
    assert ((ref.heads["sink_rate"] > 0) & (ref.heads["sink_rate"] < 1)).any() or name in ("gemma", "gemma3_text")


def test_every_supported_model_type_has_a_reference_test():
    from .test_capture_more_families import MODELS as MORE  # the families added with issue 28

    more = {cls.config_class.model_type for cls, _ in MORE.values()}
    own = {"qwen3_next"}  # gated and linear-attention layers: its own reference test, test_qwen3_next.py
    assert set(supported_model_types()) - {"gemma3"} == set(FAMILIES) | more | own
    assert set(GEOMETRY) <= set(FAMILIES)


def test_the_readme_python_example_gives_the_reference_numbers(tmp_path):
    """README's Python section through the top-level names, on a saved tiny Llama and a text corpus: the summary's
    sink rate, the sink heads and every table equal the eager reference; the run survives save and load."""
    from transformers import AutoModelForCausalLM

    import sinkscope

    from .tiny_checkpoint import save_tiny_llama, write_corpus

    directory = save_tiny_llama(tmp_path / "model")
    lm = sinkscope.load_model(str(directory))
    stream = sinkscope.windows(str(write_corpus(tmp_path / "corpus.txt", documents=20)), lm.tokenizer, seq_len=16,
                               max_windows=6)
    run = sinkscope.analyze(lm, stream, sinkscope.AnalyzeConfig(epsilon=0.3, delta=0.1, geometry_cap=90),
                            progress=False)
    ids = torch.cat(list(stream))
    ref = eager_reference(AutoModelForCausalLM.from_pretrained(directory), ids, 0.3, 0.1, 0.1, tokenizer=lm.tokenizer)
    assert run.meta["summary"]["sink_rate"] == pytest.approx(ref.summary["sink_rate"], abs=1e-12)
    sinks = run.heads.query("head_class == 'sink'")[["layer", "head"]].to_numpy().tolist()
    assert sinks == ref.heads.query("head_class == 'sink'")[["layer", "head"]].to_numpy().tolist()
    run.save(tmp_path / "x")
    loaded = sinkscope.Run.load(tmp_path / "x")
    tables = {"heads": loaded.heads, "layers": loaded.layers, "positions": loaded.positions, **loaded.extra}
    compare(tables, loaded.meta["summary"], ref, "readme:")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("path", ["default", "blocks"])
@pytest.mark.parametrize("name", ["llama", "qwen3", "gemma2", "gemma3_text", "gpt2"])
def test_every_column_on_cuda_equals_the_eager_reference(name, path, monkeypatch):
    """On CUDA the default route takes the flex path for plain causal layers; the block path with a small device
    budget. The reference is the CPU float64 one."""
    import copy

    import sinkscope.capture.blocks as blocks

    lm, ref = model_and_reference(name)
    lm = dataclasses.replace(lm, model=copy.deepcopy(lm.model).to("cuda"))
    monkeypatch.setattr(blocks, "DEVICE_BLOCK_ELEMENTS", BLOCK_ELEMENTS)
    run, taken, _ = analyze_on_path(lm, TokenWindows(token_windows(), batch_size=BATCH), CONFIG, path, monkeypatch)
    expected = {"blocks"} if path == "blocks" or name in BLOCKS_ONLY else {"flex", "blocks"}
    assert set(taken) <= expected and (path == "blocks" or name in BLOCKS_ONLY or "flex" in taken), taken
    if name in GEOMETRY:
        ref = dataclasses.replace(ref, layers=ref.layers[[c for c in ref.layers if c not in CERTIFICATES]])
    tables = {"heads": run.heads, "layers": run.layers, "positions": run.positions, **run.extra}
    compare(tables, run.meta["summary"], ref, f"{name} cuda {path}:")
