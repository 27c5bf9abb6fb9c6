"""Oversmoothing on a real model, per head and per layer: predicted vs observed λ-curves (SPEC §5).

For each layer the pass streams, over context tokens (positions ≥ 1: the BOS is left out, its massive
activation would dominate the moments and it is not a "context token" of SPEC §5):
- the sums of `x` and `xᵀx` of the residual `h` entering the layer (the block's skip carries h, attention reads
  `z = norm(h)`), shifted by a reference row for numerical stability: no tokens are stored;
- the *observed* curve of every head: the mean pairwise cosine of `X + A_λ Z W_V^h W_O^h` over a window's
  context tokens, with the real `Z` and `A_λ = (1-λ) I + λ U`, U causal uniform over the context tokens;
- the same for the whole layer (all heads' maps summed), and two reference points: the cosine of X itself and
  of `X + attention update` (the layer's real pattern and maps). Where the family has a post-attention norm
  (Gemma 2/3) the update is that norm's real output: the observed curves scale each query by the norm's real
  per-token scale, the predictions use its mean β (see `SmoothingCurves`).
After the pass, μ and Σ give each head's pre-norm linearised map `W̃ = P diag(g) W / s_LN` (gain folded in,
GQA aware), the traces `b = tr(ΣW̃)`, `c = tr(W̃ᵀΣW̃)`, the condition `2b + c > 0`, the peak `λ*` and the
predicted curve (the causal closed form of `theory.oversmoothing` with a shared mean).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import post_attention_norm_module
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import norm_gain, value_output_maps
from sinkscope.statistics.state import ShiftedMoments, Sum
from sinkscope.statistics.statistic import Statistic, Tables
from sinkscope.theory.oversmoothing import (
    Traces,
    causal_uniform_cosine,
    norm_scale,
    peak_lambda,
    pre_norm_map,
    value_traces,
)

LAMBDAS = (0.0, 0.25, 0.5, 0.75, 1.0)


class SmoothingTables(NamedTuple):
    """`heads` (layer, head), `layers` (layer) and `curves` (layer, head, lam; head -1 = whole layer)."""

    heads: pd.DataFrame
    layers: pd.DataFrame
    curves: pd.DataFrame


def mean_pairwise_cosine(Y: Tensor) -> Tensor:
    """Mean over pairs i ≠ j of cos(y_i, y_j) along the token axis −2: (..., T, d) → (...)."""
    T = Y.shape[-2]
    unit = Y / Y.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    total = unit.sum(dim=-2).pow(2).sum(dim=-1)  # ||Σ_i ŷ_i||² = T + Σ_{i≠j} cos
    return (total - T) / (T * (T - 1))


def causal_uniform_mix(V: Tensor) -> Tensor:
    """`U V` along the token axis −2 for causal uniform U: row t is the mean of rows 0..t."""
    counts = torch.arange(1, V.shape[-2] + 1, device=V.device, dtype=V.dtype)
    return V.cumsum(dim=-2) / counts[:, None]


def lambda_curve(P: Tensor, D: Tensor, lambdas: Tensor) -> Tensor:
    """Mean pairwise cosine of `Y(λ) = P + λ D` along the token axis, for every λ: (..., T, d) → (..., L).

    Equals `mean_pairwise_cosine(P + λ D)` per λ, without forming each Y: `||y_i(λ)||²` is a quadratic in λ,
    and `Σ_i ŷ_i(λ) = Σ_i w_i(λ) p_i + λ Σ_i w_i(λ) d_i` with `w_i = 1/||y_i(λ)||` is two matrix products.
    """
    T = P.shape[-2]
    pp, pd, dd = (P * P).sum(-1), (P * D).sum(-1), (D * D).sum(-1)  # (..., T)
    lam = lambdas.to(P)[:, None]  # (L, 1)
    weights = (pp[..., None, :] + 2 * lam * pd[..., None, :] + lam**2 * dd[..., None, :]).clamp_min(1e-30).rsqrt()
    total = (weights @ P + (lam * weights) @ D).pow(2).sum(-1)  # (..., L): ||Σ_i ŷ_i||²
    return (total - T) / (T * (T - 1))


class SmoothingCurves(Statistic):
    """Streaming per-layer state of SPEC §5 for `layers` (default all) of `lm` over windows of `seq_len` tokens.

    Where the family has a post-attention norm (Gemma 2/3), the attention output `o` reaches the residual as
    `r_t o_t diag(g')` (g' that norm's gain, `r_t` its per-token scale, read off the real update). The observed
    curves then use `X + r ⊙ A_λ Z W diag(g')` (the real per-query scale), the predictions the value-path gain
    `β = mean r_t` (the paper's β) with `W diag(g')`; the real reference is X + the real update. The moments of
    `[h, z]` are `ShiftedMoments` (they merge across ranks and resumes exactly); the rest are sums.
    """

    name = "smoothing"
    needs_outputs = True

    def __init__(
        self, lm: LoadedModel, seq_len: int, layers: Sequence[int] | None = None, lambdas: Sequence[float] = LAMBDAS
    ) -> None:
        super().__init__()
        lm.family.require("smoothing")  # the prediction assumes a norm before attention
        if seq_len < 3:
            raise SinkscopeError(f"--seq-len {seq_len} is too short for smoothing: it needs ≥ 2 context tokens")
        self.lm, self.seq_len = lm, seq_len
        self.layers = list(range(len(lm.layers))) if layers is None else list(layers)
        self.lambdas = torch.tensor(lambdas, dtype=torch.float32)
        layout, family = lm.layout, lm.family
        self.maps, self.post_gain = {}, {}
        for index in self.layers:
            block = lm.layers[index]
            w_v, w_o = value_output_maps(family, block, layout)  # (H, d, dh), (H, dh, d)
            post = post_attention_norm_module(family, block)
            gain = None if post is None else (post.weight.detach().float() + family.norm_gain_offset).to(lm.device)
            self.maps[index] = (w_v.to(lm.device), w_o.to(lm.device))
            self.post_gain[index] = gain
        d, H, n, L = layout.d_model, layout.n_heads, len(self.layers), len(lambdas)
        self._slot = {layer: i for i, layer in enumerate(self.layers)}
        # Over context tokens, [x, z] (2d,): Σ and the (x, x), (x, z), (z, z) blocks of Σ [x, z]ᵀ[x, z], shifted.
        self.pooled = self.add_state("moments", ShiftedMoments(2 * d, mirrored_at=d))
        self.scale_sum = self.add_state("scale_sum", Sum((n,)))  # Σ_t r_t, the post-attention norm's scales
        self.curve_sum = self.add_state("curve_sum", Sum((n, H + 1, L)))  # row H: the whole layer
        self.reference_sum = self.add_state("reference_sum", Sum((n, 2)))  # cos X, X + update
        self.window_count = self.add_state("window_count", Sum((n,)))
        self._pending: dict[int, dict[str, Tensor]] = {}  # a layer's X, Z (and o) until its update arrives

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        """Moments of `[h, z]` over context tokens; h, z (B, T, d). The curves wait for the attention output."""
        if layer not in self._slot:
            return
        X, Z = h[:, 1:].float(), z[:, 1:].float()  # (B, T', d)
        d = X.shape[-1]
        flat = torch.cat([X, Z], dim=-1).reshape(-1, 2 * d)  # (B·T', 2d)
        centred = flat - self.pooled.shift_of(layer, flat.mean(0))
        x, z = centred[:, :d], centred[:, d:]
        blocks = [  # the (z, x) block is left out: it is the transpose of (x, z)
            ((slice(None, d), slice(None, d)), x.T @ x),
            ((slice(None, d), slice(d, None)), x.T @ z),
            ((slice(d, None), slice(d, None)), z.T @ z),
        ]
        self.pooled.add(layer, flat.shape[0], centred.sum(0), blocks)
        self._pending[layer] = {"X": X, "Z": Z}

    def on_attention_output(self, layer: int, out: Tensor) -> None:
        """The attention module's output (B, T, d): the residual update itself, unless a post-norm follows."""
        if layer not in self._slot:
            return
        if self.post_gain[layer] is None:
            self._observe(layer, out[:, 1:].float(), None)
        else:
            self._pending[layer]["o"] = out[:, 1:].float()

    def on_post_norm_output(self, layer: int, update: Tensor) -> None:
        """The post-attention norm's output (B, T, d) = `r_t o_t diag(g')`: read off each query's scale `r_t`."""
        if layer not in self._slot:
            return
        o_gain = self._pending[layer]["o"] * self.post_gain[layer]
        update = update[:, 1:].float()
        scale = (update * o_gain).sum(-1) / (o_gain * o_gain).sum(-1).clamp_min(1e-30)  # (B, T')
        self._observe(layer, update, scale)

    def _observe(self, layer: int, update: Tensor, scale: Tensor | None) -> None:
        """Observed λ-curves of every head and of the layer, and the two reference cosines, for one batch."""
        pending = self._pending.pop(layer)
        X, Z = pending["X"], pending["Z"]
        w_v, w_o = self.maps[layer]
        V = torch.einsum("btd,hde->bhte", Z, w_v) @ w_o  # (B, H, T', d): Z W_V^h W_O^h
        if scale is not None:
            V = V * self.post_gain[layer]  # the post-norm's gain, per channel
            self.scale_sum.add(scale.sum(), (self._slot[layer],))
        V = torch.cat([V, V.sum(1, keepdim=True)], dim=1)  # (B, H+1, T', d): whole layer last
        mixed_minus_self = causal_uniform_mix(V) - V
        if scale is not None:  # the post-norm scales each query's output
            V, mixed_minus_self = V * scale[:, None, :, None], mixed_minus_self * scale[:, None, :, None]
        # X + A_λ Z W = (X + V) + λ (U V - V)
        curves = lambda_curve(X[:, None] + V, mixed_minus_self, self.lambdas)  # (B, H+1, L)
        self.curve_sum.add(curves.sum(0), (self._slot[layer],))
        slot = self._slot[layer]
        self.reference_sum.add(mean_pairwise_cosine(X).sum(), (slot, 0))
        self.reference_sum.add(mean_pairwise_cosine(X + update).sum(), (slot, 1))
        self.window_count.add(torch.tensor(float(X.shape[0])), (slot,))

    def value_gain(self, layer: int) -> float:
        """β: the mean post-attention norm scale `r_t` over context tokens (1 without a post-norm)."""
        if self.post_gain[layer] is None:
            return 1.0
        return float(self.scale_sum.value[self._slot[layer]]) / self.pooled.n[layer]

    def moments(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Pooled context-token mean (2d,) and covariance (2d, 2d) of `[h, z]` at `layer` (float64).

        The first d entries are μ and Σ of h; the off-diagonal block is Cov(h, z), the last block Cov(z).
        """
        n = self.pooled.n.get(layer, 0)
        if n < 2:
            raise SinkscopeError("no context tokens were seen: run a forward pass inside the feed's hooks first")
        mean_c = self.pooled.sum[layer] / n
        d = len(mean_c) // 2
        outer = self.pooled.outer[layer].clone()
        outer[d:, :d] = outer[:d, d:].T
        cov = outer / n - torch.outer(mean_c, mean_c)
        return (mean_c + self.pooled.shift[layer].double().cpu()).numpy(), cov.numpy()

    def tables(self) -> SmoothingTables:
        """Predicted (from the moments and the weights) and observed (streamed) quantities, as DataFrames."""
        head_rows, layer_rows, curve_rows = [], [], []
        for layer in self.layers:
            w_v, w_o = (w.double().cpu().numpy() for w in self.maps[layer])  # (H, d, dh), (H, dh, d)
            H, beta = len(w_v), self.value_gain(layer)
            if self.post_gain[layer] is not None:  # W_O^h diag(g') β: the value path into the residual
                w_o = w_o * self.post_gain[layer].double().cpu().numpy() * beta
            # each head's W = W_V^h W_O^h, and the whole layer's Σ_h W^h = [W_V^1 … W_V^H] [W_O^1; …; W_O^H]
            factors = [(w_v[h], w_o[h]) for h in range(H)] + [(np.concatenate(w_v, axis=1), np.concatenate(w_o))]
            slot = self._slot[layer]
            observed = (self.curve_sum.value[slot] / self.window_count.value[slot]).numpy()
            mu, cov = self.moments(layer)
            gain = norm_gain(self.lm.family, self.lm.layers[layer]).double().cpu().numpy()
            rows = []
            for head, (left, right) in enumerate(factors):
                row, predicted, measured = self._predict(mu, cov, gain, left, right)
                d_obs = float(observed[head, -1] - observed[head, 0])
                row = {"layer": layer, "head": head if head < H else -1, **row}
                row["smooth_dcos_obs"] = d_obs
                row["smooth_lambda_peak_obs"] = float(self.lambdas[int(np.argmax(observed[head]))])  # on the grid
                row["smooth_sign_agree"] = row["smooth_dense_more"] == (d_obs > 0)
                rows.append(row)
                for k, lam in enumerate(self.lambdas.tolist()):
                    curve_rows.append(
                        {"layer": layer, "head": row["head"], "lam": lam, "cos_pred": predicted[k],
                         "cos_pred_measured": measured[k], "cos_obs": float(observed[head, k])}
                    )  # fmt: skip
            head_rows.extend(rows[:-1])
            d = len(mu) // 2
            reference = (self.reference_sum.value[slot] / self.window_count.value[slot]).numpy()
            layer_rows.append(
                {
                    **{k: v for k, v in rows[-1].items() if k != "head"},  # the whole layer's W = Σ_h W^h
                    "smooth_frac_dense_more": float(np.mean([r["smooth_dense_more"] for r in rows[:-1]])),
                    "smooth_head_sign_agreement": float(np.mean([r["smooth_sign_agree"] for r in rows[:-1]])),
                    "smooth_cos_input": float(reference[0]),
                    "smooth_cos_real": float(reference[1]),
                    "smooth_trace_sigma": float(np.trace(cov[:d, :d])),
                    "smooth_norm_scale": norm_scale(mu[:d], cov[:d, :d], self.lm.family.norm),
                    "smooth_value_gain": beta,
                }
            )
        return SmoothingTables(pd.DataFrame(head_rows), pd.DataFrame(layer_rows), pd.DataFrame(curve_rows))

    def _predict(
        self, mu: np.ndarray, cov: np.ndarray, gain: np.ndarray, left: np.ndarray, right: np.ndarray
    ) -> tuple[dict, list[float], list[float]]:
        """SPEC §5 prediction for the value-output map `W = left @ right`: columns, and two predicted curves.

        `mu`, `cov`: the layer's `moments`; `gain`: its input norm's gain g (d,).

        `smooth_b`, `smooth_c` and the curve use the SPEC's linearised pre-norm map `W̃ = P diag(g) W / s_LN`;
        `smooth_b_measured`, `smooth_c_measured` and the second curve use the measured moments of the real
        attention input z instead (`b = tr(W C_hz)`, `c = tr(Wᵀ Σ_z W)`), which removes the linearisation and
        leaves only the iid-token model.
        """
        d = len(mu) // 2
        mu_x, mu_z, sigma = mu[:d], mu[d:], cov[:d, :d]
        left_tilde = pre_norm_map(mu_x, sigma, left, self.lm.family.norm, gain)  # W̃ = left_tilde @ right
        b, c = value_traces(sigma, sigma, left_tilde, right)  # tr(ΣW̃), tr(W̃ᵀΣW̃)
        a, T_ctx = float(np.trace(sigma)), self.seq_len - 1
        mean_y = mu_x + (mu_x @ left_tilde) @ right  # μ(I + W̃)
        predicted = [
            causal_uniform_cosine(float(mean_y @ mean_y), Traces(a, b, c), lam, T_ctx) for lam in self.lambdas.tolist()
        ]
        b_m, c_m = value_traces(cov[:d, d:], cov[d:, d:], left, right)
        mean_y = mu_x + (mu_z @ left) @ right  # m_i = μ + ν, ν = μ_z W
        measured = [
            causal_uniform_cosine(float(mean_y @ mean_y), Traces(a, b_m, c_m), lam, T_ctx)
            for lam in self.lambdas.tolist()
        ]
        row = {
            "smooth_b": b,
            "smooth_c": c,
            "smooth_dense_more": bool(2 * b + c > 0),
            "smooth_lambda_peak": peak_lambda(b, c),
            "smooth_dcos_pred": predicted[-1] - predicted[0],
            "smooth_b_measured": b_m,
            "smooth_c_measured": c_m,
            "smooth_dense_more_measured": bool(2 * b_m + c_m > 0),
            "smooth_dcos_pred_measured": measured[-1] - measured[0],
        }
        return row, predicted, measured

    def compute(self, windows: int) -> Tables:
        """Per-head and per-layer columns, and the λ-curves as the extra table `smoothing_curves`."""
        tables = self.tables()
        return Tables(heads=tables.heads, layers=tables.layers, extra={"smoothing_curves": tables.curves})
