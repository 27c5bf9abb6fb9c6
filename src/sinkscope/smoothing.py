"""Oversmoothing on a real model, per head and per layer: predicted vs observed λ-curves (SPEC §5).

For each layer the pass streams, over context tokens (positions ≥ 1: the BOS is left out, its massive
activation would dominate the moments and it is not a "context token" of SPEC §5):
- the sums of `x` and `xᵀx` of the residual `h` entering the layer (the block's skip carries h, attention reads
  `z = norm(h)`), shifted by a reference row for numerical stability: no tokens are stored;
- the *observed* curve of every head: the mean pairwise cosine of `X + A_λ Z W_V^h W_O^h` over a window's
  context tokens, with the real `Z` and `A_λ = (1-λ) I + λ U`, U causal uniform over the context tokens;
- the same for the whole layer (all heads' maps summed), and two reference points: the cosine of X itself and
  of `X + attention output` (the layer's real pattern and maps; a post-attention norm, as in Gemma, is not
  applied, being outside the SPEC §5 block).
After the pass, μ and Σ give each head's pre-norm linearised map `W̃ = P diag(g) W / s_LN` (gain folded in,
GQA aware), the traces `b = tr(ΣW̃)`, `c = tr(W̃ᵀΣW̃)`, the condition `2b + c > 0`, the peak `λ*` and the
predicted curve (the causal closed form of `theory.oversmoothing` with a shared mean).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.capture.layer_inputs import layer_input_hooks
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module, norm_gain, value_output_maps
from sinkscope.models.load import LoadedModel
from sinkscope.theory.oversmoothing import (
    Traces,
    causal_uniform_cosine,
    norm_scale,
    pre_norm_map,
    shared_mean_energy,
    smoothing_condition,
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


class SmoothingCollector:
    """Streaming per-layer sums for SPEC §5; feed it with `hooks()` around forward passes of `lm.base`."""

    def __init__(self, lm: LoadedModel, layers: Sequence[int] | None = None, lambdas: Sequence[float] = LAMBDAS):
        self.lm = lm
        self.layers = list(range(len(lm.layers))) if layers is None else list(layers)
        self.lambdas = torch.tensor(lambdas, dtype=torch.float32)
        layout = lm.layout
        self.maps = {}
        for index in self.layers:
            w_v, w_o = value_output_maps(lm.family, lm.layers[index], layout)  # (H, d, dh), (H, dh, d)
            self.maps[index] = (w_v.to(lm.device), w_o.to(lm.device))
        d, H, L = layout.d_model, layout.n_heads, len(lambdas)
        self.shift: dict[int, Tensor] = {}
        self.x_sum = {i: torch.zeros(d, dtype=torch.float64) for i in self.layers}
        self.xx_sum = {i: torch.zeros(d, d, dtype=torch.float64) for i in self.layers}
        self.tokens = dict.fromkeys(self.layers, 0)
        self.curve_sum = {i: torch.zeros(H + 1, L, dtype=torch.float64) for i in self.layers}  # row H: layer
        self.reference_sum = {i: torch.zeros(2, dtype=torch.float64) for i in self.layers}  # cos X, X + attn
        self.windows = dict.fromkeys(self.layers, 0)
        self.seq_len: int | None = None
        self._pending: dict[int, tuple[Tensor, Tensor]] = {}

    def on_layer_input(self, layer: int, h: Tensor, z: Tensor) -> None:
        """Moments of h and the observed per-head curves; h, z (B, T, d), context tokens only."""
        if h.shape[1] < 3:
            raise SinkscopeError(f"--seq-len {h.shape[1]} is too short for smoothing: it needs ≥ 2 context tokens")
        self.seq_len = h.shape[1]
        X, Z = h[:, 1:].float(), z[:, 1:].float()  # (B, T', d)
        flat = X.reshape(-1, X.shape[-1])
        shift = self.shift.setdefault(layer, flat.mean(0))
        centred = flat - shift
        self.x_sum[layer] += centred.sum(0).double().cpu()
        self.xx_sum[layer] += (centred.T @ centred).double().cpu()
        self.tokens[layer] += flat.shape[0]

        w_v, w_o = self.maps[layer]
        V = torch.einsum("btd,hde->bhte", Z, w_v) @ w_o  # (B, H, T', d): Z W_V^h W_O^h
        V = torch.cat([V, V.sum(1, keepdim=True)], dim=1)  # (B, H+1, T', d): whole layer last
        mixed = causal_uniform_mix(V)
        for k, lam in enumerate(self.lambdas.tolist()):
            Y = X[:, None] + (1 - lam) * V + lam * mixed  # X + A_λ Z W
            self.curve_sum[layer][:, k] += mean_pairwise_cosine(Y).sum(0).double().cpu()
        self.reference_sum[layer][0] += mean_pairwise_cosine(X).sum().double().cpu()
        self.windows[layer] += X.shape[0]
        self._pending[layer] = (X, Z)

    def on_attention_output(self, layer: int, out: Tensor) -> None:
        """The reference point with the layer's real attention: cos of `X + attention output` (B, T, d)."""
        X, _ = self._pending.pop(layer)
        self.reference_sum[layer][1] += mean_pairwise_cosine(X + out[:, 1:].float()).sum().double().cpu()

    @contextmanager
    def hooks(self) -> Iterator[None]:
        """Layer-input hooks plus attention-output hooks on the requested layers, removed in `finally`."""
        handles = []

        def attention_hook(index: int):
            def hook(_module, _args, output):
                self.on_attention_output(index, output[0] if isinstance(output, tuple) else output)

            return hook

        try:
            for index in self.layers:
                module = attention_module(self.lm.family, self.lm.layers[index])
                handles.append(module.register_forward_hook(attention_hook(index)))
            with layer_input_hooks(self.lm, self.on_layer_input, self.layers):
                yield
        finally:
            for handle in handles:
                handle.remove()

    def moments(self, layer: int) -> tuple[np.ndarray, np.ndarray]:
        """Pooled context-token mean μ (d,) and covariance Σ (d, d) of h entering `layer` (float64)."""
        n = self.tokens[layer]
        if n < 2:
            raise SinkscopeError("no context tokens were seen: run a forward pass inside `hooks()` first")
        mean_c = self.x_sum[layer] / n
        sigma = self.xx_sum[layer] / n - torch.outer(mean_c, mean_c)
        return (mean_c + self.shift[layer].double().cpu()).numpy(), sigma.numpy()

    def tables(self) -> SmoothingTables:
        """Predicted (from μ, Σ and the weights) and observed (streamed) quantities, as three DataFrames."""
        lambdas = self.lambdas.double().numpy()
        kind = self.lm.family.norm
        T_ctx = self.seq_len - 1
        head_rows, layer_rows, curve_rows = [], [], []
        for layer in self.layers:
            mu, sigma = self.moments(layer)
            gain = norm_gain(self.lm.family, self.lm.layers[layer]).double().cpu().numpy()
            w_v, w_o = (w.double().cpu().numpy() for w in self.maps[layer])
            per_head = [w_v[h] @ w_o[h] for h in range(len(w_v))]
            observed = (self.curve_sum[layer] / self.windows[layer]).numpy()
            rows = []
            for head, W in enumerate([*per_head, sum(per_head)]):
                W_tilde = pre_norm_map(mu, sigma, W, kind, gain)
                condition = smoothing_condition(sigma, W_tilde)
                traces = Traces(float(np.trace(sigma)), condition.b, condition.c)
                energy = shared_mean_energy(mu, W_tilde)
                predicted = np.array([causal_uniform_cosine(energy, traces, lam, T_ctx) for lam in lambdas])
                d_obs = float(observed[head, -1] - observed[head, 0])
                rows.append(
                    {
                        "layer": layer,
                        "head": head if head < len(per_head) else -1,
                        "smooth_b": condition.b,
                        "smooth_c": condition.c,
                        "smooth_dense_more": condition.dense_smooths_more,
                        "smooth_lambda_peak": condition.lambda_peak,
                        "smooth_dcos_pred": float(predicted[-1] - predicted[0]),
                        "smooth_dcos_obs": d_obs,
                        "smooth_sign_agree": condition.dense_smooths_more == (d_obs > 0),
                    }
                )
                for k, lam in enumerate(lambdas):
                    curve_rows.append(
                        {"layer": layer, "head": rows[-1]["head"], "lam": float(lam),
                         "cos_pred": float(predicted[k]), "cos_obs": float(observed[head, k])}
                    )  # fmt: skip
            head_rows.extend(rows[:-1])
            whole = rows[-1]
            reference = (self.reference_sum[layer] / self.windows[layer]).numpy()
            layer_rows.append(
                {
                    "layer": layer,
                    **{k: v for k, v in whole.items() if k.startswith("smooth_")},
                    "smooth_frac_dense_more": float(np.mean([r["smooth_dense_more"] for r in rows[:-1]])),
                    "smooth_head_sign_agreement": float(np.mean([r["smooth_sign_agree"] for r in rows[:-1]])),
                    "smooth_cos_input": float(reference[0]),
                    "smooth_cos_real": float(reference[1]),
                    "smooth_trace_sigma": float(np.trace(sigma)),
                    "smooth_norm_scale": norm_scale(mu, sigma, kind),
                }
            )
        return SmoothingTables(pd.DataFrame(head_rows), pd.DataFrame(layer_rows), pd.DataFrame(curve_rows))


@torch.no_grad()
def smoothing_analysis(
    lm: LoadedModel,
    windows: Iterable[Tensor],
    *,
    layers: Sequence[int] | None = None,
    lambdas: Sequence[float] = LAMBDAS,
) -> SmoothingTables:
    """Per-head and per-layer SPEC §5 oversmoothing tables of `lm` on `windows` (LongTensor[B, T] batches).

    One forward pass of the base model per batch; memory is constant in the number of windows.
    """
    collector = SmoothingCollector(lm, layers, lambdas)
    with collector.hooks():
        for batch in windows:
            lm.base(input_ids=batch.to(lm.device), use_cache=False)
    return collector.tables()
