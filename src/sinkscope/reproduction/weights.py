"""Section 5 of `sinkscope reproduce`: spectra of every head's `W_QK` and `W_VO` on a real model's weights.

Per head h (GQA: its kv group's key and value maps), in the model's own basis (row vectors, SPEC):
- `W_QK = W_Q^h W_K^hᵀ`, the position-free bilinear form: the exact score matrix at relative offset 0. RoPE
  rotates the query and key of a pair at offset Δ by `R(Δ)` between the factors (`W_Q R(Δ) W_Kᵀ`), so only
  offset 0 is free of position; QK-norm gains and the module's score scaling are folded in
  (`models.weight_maps.query_key_maps`);
- `W_VO = W_V^h W_O^h`, the value-output map `y = x W_VO` (no position dependence).
Statistics (`stats.weights`): the singular values, nuclear/Frobenius ratio, effective rank, and how the BOS
attention input `z_0` of the layer meets the form: for `W_QK` on the key side (a key enters as `W z_0ᵀ`),
for `W_VO` on the input side (`z_0 W`): alignment with the top singular vector and the gain `||·|| / σ₁`.
"""

from __future__ import annotations

import pandas as pd
import torch

from sinkscope.capture.layer_inputs import layer_inputs
from sinkscope.functional.weights import (
    effective_rank,
    factored_svd,
    nuclear_frobenius_ratio,
    probe_alignment,
)
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import query_key_maps, value_output_maps


@torch.no_grad()
def bos_attention_inputs(lm: LoadedModel, bos_id: int) -> dict[int, torch.Tensor]:
    """`{layer: z_0}` (d,): the attention input of BOS at position 0, the same in every window (causal)."""
    captured = layer_inputs(lm, torch.tensor([[bos_id]]))
    return {layer: z[0, 0].float().cpu() for layer, (_, z) in captured.items()}


def form_statistics(prefix: str, left: torch.Tensor, right: torch.Tensor, probe: torch.Tensor, side: str) -> dict:
    """Columns `{prefix}_*` for the forms `left[h] @ right[h]`, one list entry per head: left (H, d, r),
    right (H, r, d), probe (d,) entering on `side` (see `stats.weights.probe_alignment`)."""
    u, s, vh = factored_svd(left, right)
    alignment, gain = probe_alignment(u, s, vh, probe, side)
    return {
        f"{prefix}_sigma1": s[:, 0].tolist(),
        f"{prefix}_frobenius": s.pow(2).sum(-1).sqrt().tolist(),
        f"{prefix}_nuclear_over_frobenius": nuclear_frobenius_ratio(s).tolist(),
        f"{prefix}_effective_rank": effective_rank(s).tolist(),
        f"{prefix}_bos_alignment": alignment.tolist(),
        f"{prefix}_bos_gain": gain.tolist(),
        f"{prefix}_singular_values": [row.tolist() for row in s],
    }


def weight_table(lm: LoadedModel, bos_id: int) -> pd.DataFrame:
    """One row per (layer, head): the statistics of `W_QK` (prefix `qk`) and `W_VO` (prefix `vo`)."""
    z0 = bos_attention_inputs(lm, bos_id)
    layout, frames = lm.layout, []
    for index, block in enumerate(lm.layers):
        w_q, w_k = query_key_maps(lm.family, block, layout)  # (H, d, dh) each
        w_v, w_o = value_output_maps(lm.family, block, layout)  # (H, d, dh), (H, dh, d)
        columns = {"layer": [index] * layout.n_heads, "head": list(range(layout.n_heads))}
        columns |= form_statistics("qk", w_q.cpu(), w_k.cpu().transpose(-1, -2), z0[index], "right")
        columns |= form_statistics("vo", w_v.cpu(), w_o.cpu(), z0[index], "left")
        frames.append(pd.DataFrame(columns))
    return pd.concat(frames, ignore_index=True)
