"""Per-window evidence of the switch claims and of the geometry claim on the residual stream, in one pass per
batch that sees every layer's full attention rows, values and inputs:

- `curve` (W, δ scale, τ, 4): the pooled switch 2×2 (off·sink, off·no sink, on·sink, on·no sink over queries
  t ≥ 1 of every head) at hard-sink δ × `GRID` and τ over `TAU_CURVE` (described, not judged);
- `head_counts` (W, δ scale, τ scale, L, H, 3): per head, over its queries t ≥ 1, the counts of switched off ∧
  hard sink, switched off, and hard sink at δ × `GRID`, τ × `GRID` (the per-head switch claim's units);
  `head_drain` (W, L, H): each head's value drain ‖v_0‖ / mean_{j≥1} ‖v_j‖ per window (its KV group's values);
- `routes` (W, δ scale, τ scale, R + 1): switched-off queries per route (`stats.switch_routes.ROUTES`, the last
  entry unexplained) at δ × `GRID`, τ × `GRID`, pooled over layers and heads; `routes_by_layer` (W, L, R + 1)
  at δ, τ; `route_bos_mass` (W, R + 1): Σ A[t,0] over each route's queries at δ, τ (its mean BOS mass);
- `nonpos_h` (W, L): count of t ≥ 1 with cos(h_0, h_t) ≤ 0 on the residual stream h (the block's input);
  `nonpos_h_control` (W, L): the same with a random context token h_r (r as `WindowEvidence` draws it) in
  BOS's place, over t ≥ 1, t ≠ r;
- `tau`, `delta`: the τ and δ the scales multiply.

The attention comes from sinkscope's own blocked attention path (`capture.attention.watch_attention`, the
path `sinkscope analyze` uses and tests against plain `transformers`), the inputs from `capture.layer_inputs`.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from sinkscope.functional.geometry import bos_cosine
from sinkscope.functional.switch_routes import ROUTES, RouteInputs, classify, route_counts
from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.switch_claims import GRID, TAU_CURVE


def _switch_cells(off: Tensor, sink: Tensor) -> Tensor:
    """(B, 4) counts over heads and queries t ≥ 1 (`off`, `sink`: (B, H, T), false at t = 0 for both)."""
    valid = torch.zeros_like(off)
    valid[..., 1:] = True
    on = ~off & valid
    return torch.stack([(a & b).sum((1, 2)) for a, b in ((off, sink), (off, ~sink & valid), (on, sink),
                                                         (on, ~sink & valid))], -1)  # fmt: skip


def head_switch_counts(off: Tensor, sink: Tensor) -> Tensor:
    """(B, H, 3) counts over queries t ≥ 1 of off ∧ sink, off, sink (`off`, `sink`: (B, H, T), false at t = 0)."""
    return torch.stack([(off & sink).sum(-1), off.sum(-1), sink.sum(-1)], -1)


def layer_switch_evidence(attn: Tensor, value_norms: Tensor, out_norms: Tensor, tau: float, delta: float
                          ) -> dict[str, Tensor]:  # fmt: skip
    """One layer's per-window counts: `curve` (B, len(GRID), len(TAU_CURVE), 4), `heads` (B, len(GRID), len(GRID),
    H, 3) per head at δ × GRID, τ × GRID (`head_switch_counts`), `drain` (B, H), `routes` (B, len(GRID), len(GRID),
    R + 1), `routes_at` (B, R + 1) at δ, τ and `bos_mass` (B, R + 1), Σ A[t,0] per route at δ, τ.
    `attn` (B, H, T, T), `value_norms` (B, H, T), `out_norms` (B, H, T)."""
    from sinkscope.functional.switch import switched_off, value_drain

    B, H, T = out_norms.shape
    t = torch.arange(T, device=attn.device)
    sink_mass = attn[..., 0]
    curve = torch.zeros(B, len(GRID), len(TAU_CURVE), 4, dtype=torch.float64)
    heads = torch.zeros(B, len(GRID), len(GRID), H, 3, dtype=torch.float64)
    routes = torch.zeros(B, len(GRID), len(GRID), len(ROUTES) + 1, dtype=torch.float64)
    bos_mass = torch.zeros(B, len(ROUTES) + 1, dtype=torch.float64)
    inputs = RouteInputs(attn, value_norms, out_norms)
    for i, d_scale in enumerate(GRID):
        sink = (sink_mass >= 1 - delta * d_scale) & (t >= 1)
        for k, tau_k in enumerate(TAU_CURVE):
            off = switched_off(out_norms, value_norms, tau_k) & (t >= 1)
            curve[:, i, k] = _switch_cells(off, sink).double().cpu()
        for j, t_scale in enumerate(GRID):
            off = switched_off(out_norms, value_norms, tau * t_scale) & (t >= 1)
            heads[:, i, j] = head_switch_counts(off, sink).double().cpu()
            labels = classify(inputs, tau * t_scale, delta * d_scale)  # (B, H, T)
            routes[:, i, j] = route_counts(labels.reshape(B, -1), len(ROUTES)).double().cpu()
            if d_scale == 1.0 and t_scale == 1.0:
                for route in range(len(ROUTES) + 1):
                    bos_mass[:, route] = (sink_mass * (labels == route)).sum((1, 2)).double().cpu()
    return {"curve": curve, "heads": heads, "drain": value_drain(value_norms.double()).cpu(), "routes": routes, "routes_at": routes[:, GRID.index(1.0), GRID.index(1.0)],
            "bos_mass": bos_mass}


def _nonpos(h: Tensor, control: Tensor) -> tuple[Tensor, Tensor]:
    """(B,) counts of cos(h_0, h_t) ≤ 0 over t ≥ 1, and of cos(h_r, h_t) ≤ 0 over t ≥ 1, t ≠ r."""
    unit = h.float() / h.float().norm(dim=-1, keepdim=True).clamp_min(1e-30)
    rows = torch.arange(len(control), device=h.device)
    anchor = unit[rows, control]  # (B, d)
    cos = (unit[:, 1:] @ anchor[:, :, None]).squeeze(-1)  # (B, T-1)
    others = torch.arange(1, h.shape[1], device=h.device)[None, :] != control[:, None]
    return (bos_cosine(h) <= 0).sum(-1).double().cpu(), ((cos <= 0) & others).sum(-1).double().cpu()


def _capture(lm: LoadedModel, ids: Tensor, modules: dict) -> tuple[dict, dict, dict]:
    """One forward pass of `ids`: per layer the value norms per query head (B, H, T), the attention blocks
    `(start, probs (B, H, Q, K), out norms (B, H, Q))` and the residual stream h (B, T, d)."""
    from sinkscope.capture.attention import watch_attention
    from sinkscope.capture.layer_inputs import layer_input_hooks

    group = lm.layout.group
    values: dict[int, Tensor] = {}
    rows: dict[int, list[tuple[int, Tensor, Tensor]]] = {layer: [] for layer in modules}
    inputs: dict[int, Tensor] = {}

    def on_values(layer: int, value: Tensor) -> None:
        values[layer] = value.float().norm(dim=-1).repeat_interleave(group, dim=1)  # (B, KV, T) → (B, H, T)

    def on_block(layer: int, start: int, probs: Tensor, _entropy: Tensor, block: Tensor) -> None:
        rows[layer].append((start, probs.float(), block.float().norm(dim=-1)))

    def on_input(layer: int, h: Tensor, _z: Tensor) -> None:
        inputs[layer] = h.detach()

    with layer_input_hooks(lm, on_input, list(modules)), watch_attention(lm.model, modules, on_block, on_values):
        lm.base(input_ids=ids.to(lm.device), use_cache=False)
    return values, rows, inputs


@torch.no_grad()
def switch_evidence(lm: LoadedModel, batches: list[Tensor], seed: int, tau: float = 0.1, delta: float = 0.1
                    ) -> dict[str, np.ndarray]:  # fmt: skip
    """The arrays of the module docstring over `batches` (each (B, T) token ids, windows in order)."""
    from sinkscope.models.families import attention_module
    from sinkscope.statistics.window_evidence import control_positions

    L = len(lm.layers)
    modules = {layer: attention_module(lm.family, block) for layer, block in enumerate(lm.layers)}
    out: dict[str, list[Tensor]] = {name: [] for name in ("curve", "routes", "route_bos_mass", "routes_by_layer",
                                                          "nonpos_h", "nonpos_h_control", "head_counts",
                                                          "head_drain")}  # fmt: skip
    seen = 0
    for ids in batches:
        B, T = ids.shape
        control = control_positions(torch.arange(seen, seen + B), T, seed).to(lm.device)
        seen += B
        values, rows, inputs = _capture(lm, ids, modules)
        batch = {"curve": 0, "routes": 0, "route_bos_mass": 0, "routes_by_layer": [], "nonpos_h": [],
                 "nonpos_h_control": [], "head_counts": [], "head_drain": []}  # fmt: skip
        for layer in range(L):
            attn = torch.zeros(B, lm.layout.n_heads, T, T, device=lm.device)
            norms = torch.zeros(B, lm.layout.n_heads, T, device=lm.device)
            for start, probs, out_norms in rows[layer]:
                Q, K = probs.shape[-2:]
                attn[:, :, start : start + Q, :K] = probs
                norms[:, :, start : start + Q] = out_norms
            counts = layer_switch_evidence(attn, values[layer], norms, tau, delta)
            batch["curve"] = batch["curve"] + counts["curve"]
            batch["routes"] = batch["routes"] + counts["routes"]
            batch["route_bos_mass"] = batch["route_bos_mass"] + counts["bos_mass"]
            batch["routes_by_layer"].append(counts["routes_at"])
            batch["head_counts"].append(counts["heads"])
            batch["head_drain"].append(counts["drain"])
            nonpos, nonpos_control = _nonpos(inputs[layer], control)
            batch["nonpos_h"].append(nonpos)
            batch["nonpos_h_control"].append(nonpos_control)
        out["curve"].append(batch["curve"])
        out["routes"].append(batch["routes"])
        out["route_bos_mass"].append(batch["route_bos_mass"])
        for name in ("routes_by_layer", "nonpos_h", "nonpos_h_control", "head_drain"):
            out[name].append(torch.stack(batch[name], 1))  # (B, L, ...)
        out["head_counts"].append(torch.stack(batch["head_counts"], 3))  # (B, δ scale, τ scale, L, H, 3)
    return {name: torch.cat(parts).numpy() for name, parts in out.items()} | {"tau": np.array(tau),
                                                                              "delta": np.array(delta)}
