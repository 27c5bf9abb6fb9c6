"""The fused path: plain causal attention and its `AttentionReadout` from two calls of PyTorch's fused CPU flash
kernel, which never forms even a block of the map (`capture.attention` routes windows longer than
`ROWS_UP_TO_SEQ_LEN` on the CPU here)."""

from __future__ import annotations

import torch
from torch import Tensor

from sinkscope.capture.readout import AttentionReadout
from sinkscope.functional.patterns import entropy_weights


def _flash(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, Tensor]:
    """Causal attention output (B, H, T, Dv) and row log-normaliser `lse` (B, H, T) from the fused CPU kernel."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, True, attn_mask=None, scale=scaling
    )
    return out, lse


def fused_attention(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, AttentionReadout]:
    """Plain causal attention and its `AttentionReadout`, in two fused kernel calls; the output is (B, T, H, Dv).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, D) (GQA: query head h reads kv head `h // (H // KV)`).
    With logits `S[t,j] = s q_t·k_j` and the first call's `lse_t`:
    - `A[t,j] = exp(S[t,j] − lse_t)` for j = 0, t, t−1 (O(T·d));
    - the second call attends from keys to queries, in reversed order so that `t ≥ k` is an ordinary causal
      mask: queries `[k_k, 1]`, keys `[q_t, −lse_t/s]`, scale s, so its logits are `S[t,k] − lse_t` and its
      log-normaliser is `log c_k`; its values `[w_t q_t, 0]` (`w_t = 1/log(t+1)`, `w_0 = 0`) make its output
      `Σ_t A[t,k] w_t q_t / c_k`, hence `Σ_k c_k s k_k·out_k = Σ_t w_t Σ_j A[t,j] S[t,j]`, and the entropy sum
      `Σ_t w_t H_t = Σ_t w_t lse_t − Σ_t w_t Σ_j A[t,j] S[t,j]` (as `H_t = lse_t − Σ_j A[t,j] S[t,j]`).
    """
    B, H, T, D = query.shape
    group = H // key.shape[1]
    q = query.float()
    k = key.float().repeat_interleave(group, dim=1)  # (B, H, T, D): the kernel has no GQA of its own
    out, lse = _flash(q, k, value.float().repeat_interleave(group, dim=1), scaling)  # (B, H, T, D), (B, H, T)

    def entries(keys: Tensor, rows: slice) -> Tensor:  # A[t, j(t)] for the key j(t) of each row t in `rows`
        return torch.exp(scaling * (q[:, :, rows] * keys).sum(-1) - lse[:, :, rows])

    prev = torch.zeros_like(lse)
    prev[..., 1:] = entries(k[:, :, :-1], slice(1, None))
    weights = entropy_weights(0, T, q.device)
    reverse = lambda x: x.flip(2)  # noqa: E731  (B, H, T, ·) in reversed sequence order
    ones = q.new_ones(B, H, T, 1)
    # Zero columns up to a multiple of 8 change no dot product; the kernel runs faster on such head sizes
    # (one call, 9 heads, T = 1024, 1 thread, best of 5 on the shared machine: 0.128 s at 72, 0.142 s at 65).
    zeros = q.new_zeros(B, H, T, -(D + 1) % 8)
    mixed, log_columns = _flash(
        reverse(torch.cat([k, ones, zeros], -1)),
        reverse(torch.cat([q, lse.unsqueeze(-1) / -scaling, zeros], -1)),
        reverse(torch.cat([q * weights.float().view(T, 1), torch.zeros_like(ones), zeros], -1)),
        scaling,
    )
    columns = reverse(log_columns).double().exp()  # (B, H, T): c_k
    mass_logits = scaling * (k * reverse(mixed)[..., :D]).sum(-1)  # Σ_t A[t,k] w_t S[t,k] / c_k
    entropy = (lse.double() * weights).sum(-1) - (columns * mass_logits.double()).sum(-1)
    rows = AttentionReadout(
        sink=entries(k[:, :, :1], slice(None)),
        diag=entries(k, slice(None)),
        prev=prev,
        columns=columns,
        entropy=entropy,
        out_norms=out.norm(dim=-1),
    )
    return out.transpose(1, 2).to(query.dtype).contiguous(), rows
