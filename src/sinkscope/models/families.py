"""Per-family table: where a Hugging Face causal LM keeps its layers, attention, norms and projections.

Shared code never branches on an architecture name: it asks the `Family` of a model (STYLE practice 2).
The weights of a layer, sliced per head by this table, come from `models.weight_maps`.
Every family here computes its attention through transformers' attention interface (`ALL_ATTENTION_FUNCTIONS`),
which is where sinkscope reads the attention exactly; model types that compute it inside their own modules are
refused (`REFUSED`), never analysed approximately.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import reduce
from typing import TYPE_CHECKING

from sinkscope.errors import SinkscopeError

if TYPE_CHECKING:  # torch only where a function needs it: `sinkscope models` lists this table without it
    from torch import nn

QKV_LAYOUTS = ("separate", "concat", "per_head", "per_group")
"""How query, key and value channels sit in the projection(s), per token:
`separate`: three modules `q/k/v_proj`; `concat`: one module, `[q (H·dh) | k (KV·dh) | v (KV·dh)]` (GPT-2, Phi-3,
Falcon multi-query); `per_head`: one module, `[q k v]` of head 0, then head 1, ... (GPT-NeoX, Falcon-7B style,
KV = H); `per_group`: one module, per kv head its `group` queries then its key and value (Falcon's new decoder)."""

ANALYSES = {
    "capture": "attention statistics (sink, diagonal, entropy, switch, sink rate, key tokens)",
    "geometry": "BOS geometry of h and z, half-space certificates",
    "smoothing": "oversmoothing prediction vs observation (--smoothing)",
    "weights": "weight forms W_QK, W_VO (sinkscope reproduce)",
    "ablate": "head ablation (sinkscope ablate)",
}
"""The analyses a family entry can support, with the words `sinkscope models` prints."""


@dataclass(frozen=True)
class Family:
    """Where the parts of one architecture family live, relative to the base model (no LM head).

    `layers` is the (dotted) attribute path of the base model holding the decoder blocks; `attention` and
    `input_norm` are attributes of a block; `input_norm` None means attention reads the residual stream itself
    (OLMo-2, post-LN OPT: then z = h). `qkv` is one of `QKV_LAYOUTS`; `weights_in_out` marks GPT-2's `Conv1D`
    (weight stored as in×out) instead of `nn.Linear` (out×in). `norm_gain_offset` is 1 where the norm multiplies
    by `1 + weight` (Gemma), else 0. `norm` is "rmsnorm" or "layernorm". `post_attention_norm` names the norm
    applied to the attention output before it joins the residual (Gemma 2/3's sandwich norm, OLMo-2), if any.
    `query_norm`/`key_norm` name the QK-norms (per head: Gemma 3, Qwen 3; over all heads: OLMo-2, OLMoE), used
    where the attention module has them. `parallel`: attention and MLP read the same block input (GPT-NeoX, Phi,
    Falcon). `learned_sink` names the attention module's per-head sink logits (gpt-oss's `sinks`, passed to the
    attention function as `s_aux`). `output_gate` names the projection whose output holds, per head, the query and an
    output gate of the head's width (Qwen3-Next's `q_proj`: `[q^h | g^h]`; the head output is `σ(g^h) ⊙ Σ_j A v_j`).
    Blocks without the `attention` module (Qwen3-Next's linear-attention layers) have no softmax map
    (`softmax_layers`). `sdpa`: whether transformers offers an sdpa path (the model loads with eager
    attention otherwise). `unsupported` maps an analysis of `ANALYSES` to why it does not apply.
    `configure(config)` returns the fields that depend on the model's config (OPT's norm placement, Falcon's
    layouts); `family_for(model_type, config)` applies it.
    """

    name: str
    model_types: tuple[str, ...]
    layers: str = "layers"
    attention: str = "self_attn"
    input_norm: str | None = "input_layernorm"
    norm: str = "rmsnorm"
    norm_gain_offset: float = 0.0
    qkv: str = "separate"
    weights_in_out: bool = False
    value_proj: str = "v_proj"
    output_proj: str = "o_proj"
    post_attention_norm: str | None = None
    query_proj: str = "q_proj"
    key_proj: str = "k_proj"
    query_norm: str = "q_norm"
    key_norm: str = "k_norm"
    parallel: bool = False
    learned_sink: str | None = None
    output_gate: str | None = None
    sdpa: bool = True
    unsupported: tuple[tuple[str, str], ...] = ()
    notes: str = ""
    configure: Callable[[object], dict] | None = None

    @property
    def fused_qkv(self) -> bool:
        """Whether query, key and value come out of one projection module."""
        return self.qkv != "separate"

    def supports(self, analysis: str) -> bool:
        return analysis not in dict(self.unsupported)

    def require(self, analysis: str) -> None:
        """A clear error when `analysis` (a key of `ANALYSES`) does not apply to this family."""
        reasons = dict(self.unsupported)
        if analysis in reasons:
            raise SinkscopeError(f"{ANALYSES[analysis]} is not available for {self.name} models: {reasons[analysis]}")


NO_PRE_NORM = (
    "its attention reads the residual stream without a norm before it, while the oversmoothing prediction "
    "linearises a pre-norm; run without --smoothing"
)


def _opt(config) -> dict:
    if getattr(config, "do_layer_norm_before", True):
        return {}
    # OPT-350m: the block's norm runs after attention (post-LN), so attention reads h itself.
    return {"input_norm": None, "unsupported": (("smoothing", NO_PRE_NORM),), "notes": "post-LN (OPT-350m): z = h"}


def _falcon(config) -> dict:
    new = bool(getattr(config, "new_decoder_architecture", False))
    fields: dict = {"parallel": new or bool(getattr(config, "parallel_attn", True))}
    if new:
        fields["qkv"] = "per_group"
        two_norms = (getattr(config, "num_ln_in_parallel_attn", None) or 2) == 2
        if two_norms and getattr(config, "parallel_attn", True):  # as FalconDecoderLayer builds its norms
            fields["input_norm"] = "ln_attn"
    elif getattr(config, "multi_query", True):
        fields["qkv"] = "concat"
    else:
        fields["qkv"] = "per_head"
    if getattr(config, "alibi", False):
        fields["notes"] = "ALiBi: the position bias enters as an additive mask (flex on CUDA, blocks on the CPU)"
    return fields


def _phi(config) -> dict:
    if not getattr(config, "qk_layernorm", False):
        return {}
    reason = "its QK LayerNorms add a bias and centre each head, which a bilinear form cannot hold"
    return {"unsupported": (("weights", reason),)}


FAMILIES: tuple[Family, ...] = (
    Family("llama", ("llama",)),
    Family("mistral", ("mistral",)),
    Family("qwen2", ("qwen2", "qwen3")),
    Family("gemma", ("gemma",), norm_gain_offset=1.0),
    Family(
        "gemma2",
        ("gemma2", "gemma3", "gemma3_text"),
        norm_gain_offset=1.0,
        post_attention_norm="post_attention_layernorm",
    ),
    Family(
        "gpt2",
        ("gpt2",),
        layers="h",
        attention="attn",
        input_norm="ln_1",
        norm="layernorm",
        qkv="concat",
        weights_in_out=True,
        value_proj="c_attn",
        output_proj="c_proj",
        query_proj="c_attn",
        key_proj="c_attn",
    ),
    Family(
        "gpt_neox",
        ("gpt_neox",),
        attention="attention",
        norm="layernorm",
        qkv="per_head",
        value_proj="query_key_value",
        output_proj="dense",
        query_proj="query_key_value",
        key_proj="query_key_value",
        parallel=True,
        notes="Pythia; partial rotary; parallel attention and MLP (use_parallel_residual)",
    ),
    Family(
        "opt",
        ("opt",),
        layers="decoder.layers",
        input_norm="self_attn_layer_norm",
        norm="layernorm",
        output_proj="out_proj",
        notes="learned positions; </s> is its BOS; post-LN OPT-350m: z = h and no smoothing",
        configure=_opt,
    ),
    Family(
        "phi3",
        ("phi3",),
        qkv="concat",
        value_proj="qkv_proj",
        query_proj="qkv_proj",
        key_proj="qkv_proj",
        notes="fused [q | k | v] projection",
    ),
    Family(
        "phi",
        ("phi",),
        norm="layernorm",
        output_proj="dense",
        parallel=True,
        notes="partial rotary; parallel attention and MLP; with QK LayerNorms no weight forms",
        configure=_phi,
    ),
    Family(
        "olmo2",
        ("olmo2",),
        input_norm=None,
        post_attention_norm="post_attention_layernorm",
        unsupported=(("smoothing", NO_PRE_NORM),),
        notes="QK-norm over all heads; norms after attention and MLP, none before (z = h)",
    ),
    Family(
        "falcon",
        ("falcon",),
        layers="h",
        attention="self_attention",
        norm="layernorm",
        value_proj="query_key_value",
        output_proj="dense",
        query_proj="query_key_value",
        key_proj="query_key_value",
        notes="multi-query, grouped (new decoder) or per-head QKV; rotary or ALiBi (flex on CUDA, blocks on the CPU)",
        configure=_falcon,
    ),
    Family("mixtral", ("mixtral",), notes="mixture-of-experts MLP"),
    Family("qwen2_moe", ("qwen2_moe", "qwen3_moe"), notes="mixture-of-experts MLP"),
    Family("olmoe", ("olmoe",), notes="mixture-of-experts MLP; QK-norm over all heads"),
    Family("phimoe", ("phimoe",), norm="layernorm", notes="mixture-of-experts MLP"),
    Family(
        "gpt_oss",
        ("gpt_oss",),
        learned_sink="sinks",
        sdpa=False,
        notes="learned sink per head (s_aux; learned_sink_* columns); mixture-of-experts MLP; sliding-window layers",
    ),
    Family(
        "qwen3_next",
        ("qwen3_next",),
        output_gate="q_proj",
        unsupported=(
            ("smoothing", "its linear-attention layers have no attention map to linearise"),
            ("weights", "its query projection also holds the output gate; W_QK is not read from it"),
            ("ablate", "head ablation is not written for its gated and linear-attention layers"),
        ),
        notes="output-gated full attention (gate_* columns); linear-attention layers have no softmax map (NaN rows)",
    ),
)

REFUSED = {
    model_type: "transformers computes its attention inside the model's own module, outside the attention "
    "interface where sinkscope reads it exactly"
    for model_type in ("bloom", "mpt", "gpt_neo", "gpt_neox_japanese")
}
"""Model types that cannot be analysed exactly, with the reason `family_for` gives."""


def supported_model_types() -> list[str]:
    """Every `config.model_type` that has a family entry."""
    return sorted(t for family in FAMILIES for t in family.model_types)


def family_for(model_type: str, config=None) -> Family:
    """The family entry for a `config.model_type` (with `config`, its config-dependent fields applied), or a clear
    error: why the type is refused, or which types are supported."""
    if model_type in REFUSED:
        raise SinkscopeError(f"model type '{model_type}' is not supported: {REFUSED[model_type]}")
    for family in FAMILIES:
        if model_type in family.model_types:
            if config is None or family.configure is None:
                return family
            fields = family.configure(config)
            if "unsupported" in fields:
                fields["unsupported"] = family.unsupported + fields["unsupported"]
            return replace(family, **fields)
    raise SinkscopeError(
        f"model type '{model_type}' is not supported: sinkscope analyses decoder-only causal LMs of these model "
        f"types: {', '.join(supported_model_types())} (`sinkscope models` lists them); a new type is one entry in "
        "sinkscope/models/families.py (README, Model families)"
    )


@dataclass(frozen=True)
class HeadLayout:
    """Head counts of an attention layer: `n_heads` query heads share `n_kv_heads` key/value heads (GQA)."""

    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int

    @property
    def group(self) -> int:
        """Query heads per key/value head: head h reads kv head `h // group`."""
        return self.n_heads // self.n_kv_heads


def head_layout(config) -> HeadLayout:
    """Read the head counts from a (text) config; GPT-2 spells them `n_head`/`n_embd`."""
    d_model = config.hidden_size
    n_heads = config.num_attention_heads
    n_kv = getattr(config, "num_key_value_heads", None) or n_heads
    head_dim = getattr(config, "head_dim", None) or d_model // n_heads
    return HeadLayout(n_heads=n_heads, n_kv_heads=n_kv, head_dim=head_dim, d_model=d_model)


def decoder_layers(family: Family, base: nn.Module) -> list[nn.Module]:
    """The decoder blocks of a base model, in order."""
    return list(reduce(getattr, family.layers.split("."), base))


def attention_module(family: Family, layer: nn.Module) -> nn.Module:
    return getattr(layer, family.attention)


def softmax_layers(family: Family, layers: list[nn.Module]) -> list[int]:
    """Indices of the blocks that have the family's softmax attention module (all of them except, e.g.,
    Qwen3-Next's linear-attention layers, which have no attention map)."""
    return [index for index, layer in enumerate(layers) if hasattr(layer, family.attention)]


def require_softmax_layers(family: Family, layers: list[nn.Module], command: str) -> list[int]:
    """`softmax_layers`, refused in one line when there is none (a Qwen3-Next built of linear-attention layers
    only): every attention statistic of `command` would have no map to measure, so it fails before any pass."""
    softmax = softmax_layers(family, layers)
    if not softmax:
        raise SinkscopeError(
            f"{command} measures softmax attention maps, and no layer of this {family.name} model has one (all "
            f"{len(layers)} are linear attention); choose a model with at least one softmax attention layer"
        )
    return softmax


def input_norm_module(family: Family, layer: nn.Module) -> nn.Module | None:
    """The norm whose output is the attention input `z` (SPEC §4); None where attention reads `h` itself."""
    return None if family.input_norm is None else getattr(layer, family.input_norm)


def post_attention_norm_module(family: Family, layer: nn.Module) -> nn.Module | None:
    """The norm between the attention output and the residual (Gemma 2/3, OLMo-2), or None where there is none."""
    return None if family.post_attention_norm is None else getattr(layer, family.post_attention_norm)
