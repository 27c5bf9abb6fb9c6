"""The reproduction's own measurements for its intervals and controls (beside the `sinkscope analyze` runs):

- `window_evidence`: per-window sums (`statistics.window_evidence.WindowEvidence`) in one pass per hard-sink
  threshold δ × {½, 1, 2} (the capture's hard-sink mask is taken at one δ per pass), for bootstrap intervals
  over windows and the δ/τ sensitivity of the switch verdict;
- `certificate_layers`: the half-space certificates of the middle layers on every raw context token of enough
  windows to exceed the model width, with random context tokens as the control, and the certificate
  directions p̂ (queries) and q̂ (keys);
- `pq_alignment`: per head, `p̂ W_QK(Δ) q̂ᵀ / σ₁` averaged over the RoPE offsets Δ = 1 … T−1 at which a query
  scores the BOS key (`W_QK(Δ) = W_Q R(Δ) W_Kᵀ`, the model's own rotary tables).
"""

from __future__ import annotations

import inspect

import numpy as np
import pandas as pd
import torch

from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.config import DELTA_SCALES


@torch.no_grad()
def window_evidence(lm: LoadedModel, stream, n_windows: int, seed: int, tau: float = 0.1, delta: float = 0.1,
                    delta_scales: tuple[float, ...] = DELTA_SCALES) -> dict[str, np.ndarray]:  # fmt: skip
    """`{name: array}`: the `WindowEvidence` sums of the windows of `stream` (a `corpus.windows` object of at most
    `n_windows`, read once per pass), W first; `switch`, `hard_sink` and `mlp_like` gain a δ-scale axis after W
    (in `delta_scales` order), the others come from the δ × 1 pass."""
    from sinkscope.capture.feed import Feed
    from sinkscope.statistics.window_evidence import WindowEvidence

    layout, L, seq_len = lm.layout, len(lm.layers), stream.seq_len
    passes = {}
    for scale in delta_scales:
        statistic = WindowEvidence(L, layout.n_heads, layout.group, seq_len, n_windows, tau, seed)
        feed = Feed([statistic], seq_len, layout.group, delta * scale)
        with feed.hooks(lm):
            for batch in stream.batches():
                batch = batch.to(lm.device)
                feed.begin_batch(batch)
                lm.base(input_ids=batch, use_cache=False)
                feed.end_batch(len(batch))
        passes[scale] = {name: value[: feed.windows].numpy() for name, value in statistic.arrays().items()}
    out = dict(passes[1.0]) if 1.0 in passes else dict(passes[delta_scales[0]])
    for name in ("switch", "hard_sink", "mlp_like"):
        out[name] = np.stack([passes[scale][name] for scale in delta_scales], axis=1)
    return out


@torch.no_grad()
def certificate_layers(lm: LoadedModel, corpus: str, seq_len: int, n_windows: int, layers: list[int],
                       n_control: int, seed: int) -> tuple[pd.DataFrame, dict[int, tuple[np.ndarray, np.ndarray]]]:  # fmt: skip
    """Per layer of `layers`, SPEC §4's certificates on *every* raw (un-normalised) context input of `n_windows`
    windows (BOS = z_0 of the first window), and the γ₂ of `n_control` random context tokens against the others.

    Raw, because on unit vectors H2 cannot fail for any distinct token (a sphere is strictly convex) and
    normalising moves the geometry the theorem is about. γ₂ is compared relative to the token's norm
    (`gamma2_rel` = γ₂ / ‖z‖), which is scale-free. Returns the table (layer, n_contexts, gamma1, gamma2, h1, h2,
    gamma2_rel, control_gamma2_rel (list), n_controls) and `{layer: (p̂, q̂)}` where both conditions hold.
    """
    from sinkscope.capture.layer_inputs import layer_inputs
    from sinkscope.corpus.windows import windows
    from sinkscope.theory.halfspace import control_separations, sink_geometry

    batch = torch.cat(list(windows(corpus, lm.tokenizer, seq_len, n_windows, seed=seed))).to(lm.device)
    captured = layer_inputs(lm, batch, layers)
    rows, directions = [], {}
    for layer in layers:
        z = captured[layer][1].double().cpu().numpy()  # (W, T, d)
        contexts = z[:, 1:].reshape(-1, z.shape[-1])
        sink = z[0, 0]
        geometry = sink_geometry(contexts, sink)
        control = control_separations(contexts, n_control, seed + layer)
        # the same seeded picks as control_separations, for the tokens' norms
        picks = np.random.default_rng(seed + layer).choice(contexts.shape[0], control.size, replace=False)
        control_rel = control / np.linalg.norm(contexts[picks], axis=1).clip(1e-30)
        rows.append({"layer": layer, "n_contexts": int(contexts.shape[0]), "gamma1": geometry.gamma1,
                     "gamma2": geometry.gamma2, "h1": geometry.h1, "h2": geometry.h2,
                     "gamma2_rel": geometry.gamma2 / max(float(np.linalg.norm(sink)), 1e-30),
                     "control_gamma2_rel": control_rel.tolist(), "n_controls": int(control.size),
                     "control_gamma2_rel_max": float(control_rel.max()),
                     "control_gamma2_rel_median": float(np.median(control_rel))})  # fmt: skip
        if geometry.query_dir is not None and geometry.key_dir is not None:
            directions[layer] = (geometry.query_dir, geometry.key_dir)
    return pd.DataFrame(rows), directions


def _rotary_tables(lm: LoadedModel, seq_len: int, layer: int) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(cos, sin), each (seq_len, head_dim), of the model's rotary embedding for `layer`; None without RoPE."""
    rotary = getattr(lm.base, "rotary_emb", None)
    if rotary is None:
        return None
    x = torch.zeros(1, seq_len, 1, dtype=torch.float32, device=lm.device)
    positions = torch.arange(seq_len, device=lm.device)[None]
    kwargs = {}
    layer_types = getattr(lm.model.config, "layer_types", None)
    if layer_types is not None and "layer_type" in inspect.signature(rotary.forward).parameters:
        kwargs["layer_type"] = layer_types[layer]
    cos, sin = rotary(x, positions, **kwargs)
    return cos[0].float().cpu(), sin[0].float().cpu()


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


@torch.no_grad()
def pq_alignment(lm: LoadedModel, directions: dict[int, tuple[np.ndarray, np.ndarray]], seq_len: int) -> pd.DataFrame:
    """Per (layer, head) of the layers in `directions`: `qk_pq_score` = mean over Δ = 1 … T−1 of
    `p̂ W_Q R(Δ) W_Kᵀ q̂ᵀ` (query at offset Δ from the BOS key; transformers' rotate-half RoPE, R(0) = I) and
    `qk_pq_score_offset0` (Δ = 0), both divided by σ₁ of the offset-0 form `W_Q W_Kᵀ`."""
    from sinkscope.functional.weights import factored_svd
    from sinkscope.models.weight_maps import query_key_maps

    rows = []
    for layer, (p, q) in sorted(directions.items()):
        w_q, w_k = query_key_maps(lm.family, lm.layers[layer], lm.layout)  # (H, d, dh)
        w_q, w_k = w_q.cpu().double(), w_k.cpu().double()
        sigma1 = factored_svd(w_q, w_k.transpose(-1, -2))[1][:, 0]  # (H,)
        a = torch.einsum("d,hde->he", torch.as_tensor(p), w_q)  # (H, dh): p̂ W_Q
        b = torch.einsum("d,hde->he", torch.as_tensor(q), w_k)  # (H, dh): q̂ W_K
        tables = _rotary_tables(lm, seq_len, layer)
        at0 = (a * b).sum(-1)
        if tables is None:
            mean_score = at0
        else:
            cos, sin = (t.double()[1:] for t in tables)  # offsets 1..T-1
            rotated = a[:, None] * cos[None] + _rotate_half(a)[:, None] * sin[None]  # (H, T-1, dh)
            mean_score = (rotated * b[:, None]).sum(-1).mean(-1)
        for head in range(lm.layout.n_heads):
            rows.append({"layer": layer, "head": head, "qk_pq_score": float(mean_score[head] / sigma1[head]),
                         "qk_pq_score_offset0": float(at0[head] / sigma1[head])})  # fmt: skip
    return pd.DataFrame(rows, columns=["layer", "head", "qk_pq_score", "qk_pq_score_offset0"])
