"""Per-head weights read through the family table: norm gains, projection channels, query/key and value/output maps.

Weights are returned in the SPEC's row-vector convention: a head's value-output map is `y = x W_V^h W_O^h`.
Where each weight lives (module names, fused QKV layouts, `Conv1D` or `nn.Linear`) is `models.families`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import QKV_LAYOUTS, Family, HeadLayout, attention_module, input_norm_module

if TYPE_CHECKING:  # torch imported where a function needs it, as in models.families
    import torch
    from torch import nn


def norm_gain(family: Family, layer: nn.Module) -> torch.Tensor:
    """Per-channel gain `g` of the attention input norm, shape (d,): `z = normalise(x) * g`."""
    norm = input_norm_module(family, layer)
    if norm is None:
        raise SinkscopeError(f"{family.name} models have no norm before attention, hence no input-norm gain")
    return norm.weight.detach().float() + family.norm_gain_offset


def projection_channels(family: Family, layout: HeadLayout, which: str) -> torch.Tensor:
    """Output channels of the projection module that hold the queries (`which` = "q"), keys ("k") or values
    ("v"), ordered head by head: (n·head_dim,) indices with n = n_heads for queries, else n_kv_heads.

    The layouts are those of `QKV_LAYOUTS`; for `per_group` the kv heads hold `group` query heads each.
    """
    import torch

    H, KV, dh, group = layout.n_heads, layout.n_kv_heads, layout.head_dim, layout.group
    n = H if which == "q" else KV
    within = torch.arange(dh)
    if family.qkv == "separate":
        return torch.arange(n * dh)
    if family.qkv == "concat":  # [q (H·dh) | k (KV·dh) | v (KV·dh)]
        return {"q": 0, "k": H * dh, "v": (H + KV) * dh}[which] + torch.arange(n * dh)
    if family.qkv == "per_head":  # (H, 3, dh): per head its q, k, v
        return (torch.arange(H)[:, None] * 3 * dh + "qkv".index(which) * dh + within).flatten()
    if family.qkv == "per_group":  # (KV, group + 2, dh): per kv head its group of queries, then k, v
        width = (group + 2) * dh
        if which == "q":
            return (torch.arange(KV)[:, None, None] * width + torch.arange(group)[:, None] * dh + within).flatten()
        slot = group if which == "k" else group + 1
        return (torch.arange(KV)[:, None] * width + slot * dh + within).flatten()
    raise SinkscopeError(f"family {family.name}: unknown qkv layout {family.qkv!r}; use one of {QKV_LAYOUTS}")


def _in_out(family: Family, module: nn.Module) -> torch.Tensor:
    """A projection's weight as (in, out): `Conv1D` stores it so, `nn.Linear` as (out, in)."""
    weight = module.weight.detach()
    return weight if family.weights_in_out else weight.T


def projection_map(family: Family, attn: nn.Module, layout: HeadLayout, which: str) -> torch.Tensor:
    """The query ("q"), key ("k") or value ("v") map of every head, row-vector form: (n, d, head_dim), n = n_heads
    for queries, n_kv_heads for keys and values; biases are left out."""
    name = {"q": family.query_proj, "k": family.key_proj, "v": family.value_proj}[which]
    weight = _in_out(family, getattr(attn, name))[:, projection_channels(family, layout, which)]  # (d, n·dh)
    return weight.float().reshape(layout.d_model, -1, layout.head_dim).permute(1, 0, 2)


def value_output_maps(family: Family, layer: nn.Module, layout: HeadLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head value and output maps in row-vector form (SPEC §3, §5).

    Returns `W_V` of shape (n_heads, d, head_dim) (GQA: heads of one group share their kv head's map) and
    `W_O` of shape (n_heads, head_dim, d), so head h maps a token `x` to `x @ W_V[h] @ W_O[h]`.
    Biases are ignored: they shift every token equally and do not enter `W`.
    """
    attn = attention_module(family, layer)
    w_v = projection_map(family, attn, layout, "v").repeat_interleave(layout.group, dim=0)  # (H, d, dh)
    w_o = _in_out(family, getattr(attn, family.output_proj)).float()  # (H·dh, d)
    return w_v, w_o.reshape(layout.n_heads, layout.head_dim, layout.d_model)


def _norm_gains(family: Family, norm: nn.Module, n: int, head_dim: int) -> torch.Tensor:
    """A QK-norm's gain as (n, 1, head_dim): per head (`head_dim` gains shared) or over all heads (n·head_dim)."""
    gain = norm.weight.detach().float() + family.norm_gain_offset
    return gain.reshape(-1, 1, head_dim).expand(n, 1, head_dim)


def query_key_maps(family: Family, layer: nn.Module, layout: HeadLayout) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-head query and key maps in row-vector form: `W_Q`, `W_K`, each (n_heads, d, head_dim).

    Head h's position-free score is `z_i W_Q[h] W_K[h]ᵀ z_jᵀ` (GQA: heads of one group share their kv head's key
    map), times the module's constant `scaling`, which is folded into `W_Q`. Where the attention module has
    QK-norms (`q = rms(z W_Q) ⊙ g_q`, per head or over all heads), their gains are folded in; the per-token RMS
    factors they also apply are positive scalars and cannot be (they rescale a token's logits, not the form's
    directions). Biases are ignored. RoPE is not applied: this is the form at relative offset 0.
    """
    family.require("weights")
    attn = attention_module(family, layer)
    dh, H, kv = layout.head_dim, layout.n_heads, layout.n_kv_heads
    w_q = projection_map(family, attn, layout, "q")  # (H, d, dh)
    w_k = projection_map(family, attn, layout, "k")  # (kv, d, dh)
    norm = getattr(attn, family.query_norm, None)
    if norm is not None and getattr(norm, "weight", None) is not None:
        w_q = w_q * _norm_gains(family, norm, H, dh)
    norm = getattr(attn, family.key_norm, None)
    if norm is not None and getattr(norm, "weight", None) is not None:
        w_k = w_k * _norm_gains(family, norm, kv, dh)
    scaling = getattr(attn, "scaling", None)
    if scaling is None:
        scaling = dh**-0.5
    return w_q * float(scaling), w_k.repeat_interleave(layout.group, dim=0)
