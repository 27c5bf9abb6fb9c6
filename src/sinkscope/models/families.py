"""Per-family table: where a Hugging Face causal LM keeps its layers, attention, norms and projections.

Shared code never branches on an architecture name: it asks the `Family` of a model (STYLE practice 2).
Weights are returned in the SPEC's row-vector convention: a head's value-output map is `y = x W_V^h W_O^h`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from sinkscope.errors import SinkscopeError


@dataclass(frozen=True)
class Family:
    """Where the parts of one architecture family live, relative to the base model (no LM head).

    `layers` is the attribute of the base model holding the decoder blocks; `attention` and `input_norm` are
    attributes of a block. `fused_qkv` marks GPT-2's `Conv1D` `c_attn` (weight stored as in×out) instead of
    separate `q/k/v_proj` `nn.Linear`s (weight stored as out×in). `norm_gain_offset` is 1 where the norm
    multiplies by `1 + weight` (Gemma), else 0. `norm` is "rmsnorm" or "layernorm". `post_attention_norm` names
    the norm applied to the attention output before it joins the residual (Gemma 2/3's sandwich norm), if any.
    `query_norm`/`key_norm` name the per-head QK-norms (Gemma 3, Qwen 3), used where the attention module has them.
    """

    name: str
    model_types: tuple[str, ...]
    layers: str = "layers"
    attention: str = "self_attn"
    input_norm: str = "input_layernorm"
    norm: str = "rmsnorm"
    norm_gain_offset: float = 0.0
    fused_qkv: bool = False
    value_proj: str = "v_proj"
    output_proj: str = "o_proj"
    post_attention_norm: str | None = None
    query_proj: str = "q_proj"
    key_proj: str = "k_proj"
    query_norm: str = "q_norm"
    key_norm: str = "k_norm"


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
        fused_qkv=True,
        value_proj="c_attn",
        output_proj="c_proj",
        query_proj="c_attn",
        key_proj="c_attn",
    ),
)


def supported_model_types() -> list[str]:
    """Every `config.model_type` that has a family entry."""
    return sorted(t for family in FAMILIES for t in family.model_types)


def family_for(model_type: str) -> Family:
    """The family entry for a `config.model_type`, or a clear error listing the supported ones."""
    for family in FAMILIES:
        if model_type in family.model_types:
            return family
    raise SinkscopeError(
        f"model type '{model_type}' has no sinkscope family entry; supported: "
        f"{', '.join(supported_model_types())} (add one to sinkscope/models/families.py)"
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
    return list(getattr(base, family.layers))


def attention_module(family: Family, layer: nn.Module) -> nn.Module:
    return getattr(layer, family.attention)


def input_norm_module(family: Family, layer: nn.Module) -> nn.Module:
    """The norm whose output is the attention input `z` (SPEC §4)."""
    return getattr(layer, family.input_norm)


def post_attention_norm_module(family: Family, layer: nn.Module) -> nn.Module | None:
    """The norm between the attention output and the residual (Gemma 2/3), or None where there is none."""
    return None if family.post_attention_norm is None else getattr(layer, family.post_attention_norm)


def norm_gain(family: Family, layer: nn.Module) -> torch.Tensor:
    """Per-channel gain `g` of the attention input norm, shape (d,): `z = normalise(x) * g`."""
    weight = input_norm_module(family, layer).weight.detach()
    return weight.float() + family.norm_gain_offset


def value_output_maps(family: Family, layer: nn.Module, layout: HeadLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head value and output maps in row-vector form (SPEC §3, §5).

    Returns `W_V` of shape (n_heads, d, head_dim) (GQA: heads of one group share their kv head's map) and
    `W_O` of shape (n_heads, head_dim, d), so head h maps a token `x` to `x @ W_V[h] @ W_O[h]`.
    Biases are ignored: they shift every token equally and do not enter `W`.
    """
    attn = attention_module(family, layer)
    d, dh = layout.d_model, layout.head_dim
    if family.fused_qkv:
        # Conv1D stores (in, out); c_attn's output columns are [q | k | v].
        w_v = getattr(attn, family.value_proj).weight.detach()[:, 2 * d : 3 * d]  # (d, kv*dh)
        w_o = getattr(attn, family.output_proj).weight.detach()  # (H*dh, d)
    else:
        w_v = getattr(attn, family.value_proj).weight.detach().T  # (d, kv*dh)
        w_o = getattr(attn, family.output_proj).weight.detach().T  # (H*dh, d)
    w_v = w_v.reshape(d, layout.n_kv_heads, dh).permute(1, 0, 2)  # (kv, d, dh)
    w_v = w_v.repeat_interleave(layout.group, dim=0)  # (H, d, dh)
    w_o = w_o.reshape(layout.n_heads, dh, d)  # (H, dh, d)
    return w_v.float(), w_o.float()


def query_key_maps(family: Family, layer: nn.Module, layout: HeadLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head query and key maps in row-vector form: `W_Q`, `W_K`, each (n_heads, d, head_dim).

    Head h's position-free score is `z_i W_Q[h] W_K[h]ᵀ z_jᵀ` (GQA: heads of one group share their kv head's key
    map), times the module's constant `scaling`, which is folded into `W_Q`. Where the attention module has
    per-head QK-norms (`q = rms(z W_Q) ⊙ g_q`), their gains are folded in; the per-token RMS factors they also
    apply are positive scalars and cannot be (they rescale a token's logits, not the form's directions).
    Biases are ignored. RoPE is not applied: this is the form at relative offset 0.
    """
    attn = attention_module(family, layer)
    d, dh, H, kv = layout.d_model, layout.head_dim, layout.n_heads, layout.n_kv_heads
    if family.fused_qkv:  # Conv1D stores (in, out); c_attn's output columns are [q | k | v]
        weight = getattr(attn, family.query_proj).weight.detach()
        w_q, w_k = weight[:, :d], weight[:, d : 2 * d]  # (d, H*dh)
    else:
        w_q = getattr(attn, family.query_proj).weight.detach().T  # (d, H*dh)
        w_k = getattr(attn, family.key_proj).weight.detach().T  # (d, kv*dh)
    w_q = w_q.float().reshape(d, H, dh).permute(1, 0, 2)  # (H, d, dh)
    w_k = w_k.float().reshape(d, kv, dh).permute(1, 0, 2).repeat_interleave(layout.group, dim=0)  # (H, d, dh)
    for name, which in ((family.query_norm, "q"), (family.key_norm, "k")):
        norm = getattr(attn, name, None)
        if norm is not None and getattr(norm, "weight", None) is not None:
            gain = norm.weight.detach().float() + family.norm_gain_offset  # (dh,)
            w_q, w_k = (w_q * gain, w_k) if which == "q" else (w_q, w_k * gain)
    scaling = getattr(attn, "scaling", None)
    if scaling is None:
        scaling = dh**-0.5
    return w_q * float(scaling), w_k
