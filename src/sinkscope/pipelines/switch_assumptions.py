"""The switch theorem's assumptions, judged per layer and window, and the switched-off queries that are not sinks.

The theorem ("a head switches a query off, `o_t = 0`, iff the query is a sink") needs the context inputs of the
window to be linearly independent and BOS's input `z_0` to lie outside their span (docs/theory/geometry.md, The
hard switch). Per (layer, window) this module computes, on that window's own attention inputs `z_1..z_{T−1}`
(`theory.halfspace.span_assumptions`): `context_rank` (numerical rank, singular values above 1e-4 × the largest)
and `span_distance` = |z_0 − P z_0| / |z_0|; and in each KV head's value space the numerical rank of the context
values v_1..v_{T−1} (`functional.switch.context_value_spectrum` at `rank_rtol`), whose smallest over the KV heads is
`value_rank_min`: switch ⇒ sink needs them independent, which can fail wherever T − 1 ≤ head_dim (a value map may
collapse contexts) and fails by the dimension count alone where T − 1 > head_dim. The assumptions **hold** when
the input rank is full (T−1, which needs T−1 ≤ d), `span_distance ≥ min_distance` (default 0.05: z_0 at least
5 % of its norm away from the span) and every KV head's context values are independent (`values_independent`).

Per (layer, window, head) it counts, over queries t ≥ 1, the switched-off ones (`||o_t|| ≤ τ · mean_{j≤t} ||v_j||`,
SPEC §3) and of those the hard sinks (`A[t,0] ≥ 1 − δ`); `agreement` = P(hard sink | switched off), pooled over the
(layer, window) cells where the assumptions hold, where they fail, and over all, with a 95 % percentile interval
from a bootstrap over windows (seeded). Every switched-off query that is not a hard sink is listed with what it
attends to and sorted into one of:

- `near sink`: A[t,0] ≥ 0.5 (the sink holds most of the mass, not 1 − δ);
- `self, small value`: the query's own key holds ≥ 0.5 and its value is small (a diagonal switch);
- `other small-value key`: another key j ≥ 1 holds ≥ 0.5 (a secondary sink: its value is small);
- `spread`: no key holds half the mass (the values cancel or are all small).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.functional.switch import context_value_spectrum, numerical_rank
from sinkscope.models.families import attention_module, input_norm_module
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import projection_channels
from sinkscope.theory.halfspace import span_assumptions

CATEGORIES = ("near sink", "self, small value", "other small-value key", "spread")


@dataclass(frozen=True)
class SwitchConfig:
    tau: float = 0.1  # switched off: ||o_t|| ≤ τ · mean_{j≤t} ||v_j||
    delta: float = 0.1  # hard sink: A[t,0] ≥ 1 − δ
    min_distance: float = 0.05  # span_distance at or above which z_0 counts as outside the contexts' span
    rank_rtol: float = 1e-4  # a context value direction counts when its singular value is above this × the largest
    bootstrap: int = 1000
    seed: int = 0


def categorize(a0: float, a_self: float, top_mass: float) -> str:
    """The category of a switched-off non-sink query from its mass on BOS, on itself, and its largest mass on a
    key j ≥ 1 other than itself (module doc)."""
    if a0 >= 0.5:
        return CATEGORIES[0]
    if a_self >= 0.5:
        return CATEGORIES[1]
    return CATEGORIES[2] if top_mass >= 0.5 else CATEGORIES[3]


def switch_masks(attn: Tensor, values: Tensor, group: int, tau: float, delta: float) -> tuple[Tensor, Tensor, Tensor]:
    """(switched_off, hard_sink, value_scale), each (B, H, T) over queries (entry 0 is BOS itself).

    attn: (B, H, T, T); values: (B, KV, T, dh) with H = KV·group. `o_t = Σ_j A[t,j] v_j`; value_scale[t] =
    mean_{j≤t} ||v_j|| (the keys query t sees)."""
    v = values.repeat_interleave(group, dim=1)  # (B, H, T, dh)
    out_norm = (attn @ v).norm(dim=-1)
    norms = v.norm(dim=-1)
    scale = norms.cumsum(-1) / torch.arange(1, norms.shape[-1] + 1, dtype=norms.dtype, device=norms.device)
    return out_norm <= tau * scale, attn[..., 0] >= 1 - delta, scale


@torch.no_grad()
def measure(lm: LoadedModel, batches: Iterable[Tensor], config: SwitchConfig) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(cells, offenders): one row per (window, layer) with the assumptions and switch counts summed over heads,
    and one row per switched-off query that is not a hard sink."""
    layout, family, blocks = lm.layout, lm.family, lm.layers
    channels = projection_channels(family, layout, "v").to(lm.device)
    z_in: dict[int, Tensor] = {}
    v_in: dict[int, Tensor] = {}
    handles = []
    for layer, block in enumerate(blocks):
        norm = input_norm_module(family, block)
        if norm is None:
            raise SinkscopeError(f"{family.name} models have no norm before attention: no attention input z to judge")
        handles.append(norm.register_forward_hook(lambda _m, _a, out, layer=layer: z_in.__setitem__(layer, out)))
        proj = getattr(attention_module(family, block), family.value_proj)
        handles.append(proj.register_forward_hook(lambda _m, _a, out, layer=layer: v_in.__setitem__(layer, out)))
    previous = lm.model.config._attn_implementation
    cells, offenders, start = [], [], 0
    try:
        lm.model.set_attn_implementation("eager")
        for ids in batches:
            ids = ids.to(lm.device)
            maps = lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions
            B, T = ids.shape
            for layer, attn in enumerate(maps):
                attn = attn.double()
                values = v_in[layer][..., channels].double().reshape(B, T, layout.n_kv_heads, -1).transpose(1, 2)
                off, sink, scale = switch_masks(attn, values, layout.group, config.tau, config.delta)
                value_ranks = numerical_rank(context_value_spectrum(values), config.rank_rtol).min(-1).values  # (B,)
                off, sink = off[..., 1:], sink[..., 1:]  # queries t ≥ 1
                z = z_in[layer].double().cpu().numpy()
                for b in range(B):
                    rank, distance = span_assumptions(z[b, 1:], z[b, 0])
                    independent = int(value_ranks[b]) == T - 1
                    cells.append({"window": start + b, "layer": layer, "context_rank": rank, "n_contexts": T - 1,
                                  "span_distance": distance, "value_rank_min": int(value_ranks[b]),
                                  "values_independent": independent,
                                  "holds": rank == min(T - 1, z.shape[-1]) and distance >= config.min_distance
                                  and independent,
                                  "switched": int(off[b].sum()), "switched_sink": int((off[b] & sink[b]).sum()),
                                  "sink": int(sink[b].sum()), "queries": int(off[b].numel())})  # fmt: skip
                offenders += _offenders(attn, values, off & ~sink, scale, ids, layer, start, layout.group)
            start += B
    finally:
        lm.model.set_attn_implementation(previous)
        for handle in handles:
            handle.remove()
    if not cells:
        raise SinkscopeError("switch-assumptions got no windows: use a larger corpus or a smaller --seq-len")
    return pd.DataFrame(cells), pd.DataFrame(offenders, columns=OFFENDER_COLUMNS)


OFFENDER_COLUMNS = ["window", "layer", "head", "t", "token", "a0", "a_self", "top_key", "top_mass", "top_value_ratio",
                    "self_value_ratio", "category"]  # fmt: skip


def _offenders(attn, values, mask, scale, ids, layer, start, group) -> list[dict]:
    """One row per query of `mask` (B, H, T−1, queries t ≥ 1): where its attention goes and how large the values
    there are (ratio to the query's value scale)."""
    rows = []
    v_norm = values.norm(dim=-1).repeat_interleave(group, dim=1)  # (B, H, T)
    for b, h, q in mask.nonzero().tolist():
        t = q + 1
        row = attn[b, h, t, : t + 1]
        others = row.clone()
        others[0] = others[t] = -1.0
        top = int(others.argmax()) if t > 1 else 0
        top_mass = float(others[top]) if t > 1 else 0.0
        a0, a_self = float(row[0]), float(row[t])
        rows.append({"window": start + b, "layer": layer, "head": h, "t": t, "token": int(ids[b, t]), "a0": a0,
                     "a_self": a_self, "top_key": top, "top_mass": top_mass,
                     "top_value_ratio": float(v_norm[b, h, top] / scale[b, h, t]),
                     "self_value_ratio": float(v_norm[b, h, t] / scale[b, h, t]),
                     "category": categorize(a0, a_self, top_mass)})  # fmt: skip
    return rows


def conditioned(cells: pd.DataFrame, config: SwitchConfig) -> pd.DataFrame:
    """Agreement P(hard sink | switched off) where the assumptions hold, fail, and over all cells, with a 95 %
    bootstrap interval over windows (windows resampled with replacement, `config.bootstrap` times, seeded)."""
    rng = np.random.default_rng(config.seed)
    windows = np.sort(cells["window"].unique())
    rows = []
    for name, subset in (("assumptions hold", cells[cells["holds"]]), ("assumptions fail", cells[~cells["holds"]]),
                         ("all", cells)):  # fmt: skip
        per_window = subset.groupby("window")[["switched", "switched_sink"]].sum().reindex(windows, fill_value=0)
        s, k = per_window["switched"].to_numpy(), per_window["switched_sink"].to_numpy()
        draws = rng.integers(0, len(windows), size=(config.bootstrap, len(windows)))
        with np.errstate(invalid="ignore", divide="ignore"):
            boot = k[draws].sum(1) / s[draws].sum(1)
        boot = boot[np.isfinite(boot)]
        rows.append({"cells": name, "n_cells": len(subset), "switched": int(s.sum()), "switched_sink": int(k.sum()),
                     "agreement": float(k.sum() / s.sum()) if s.sum() else float("nan"),
                     "agreement_lo": float(np.quantile(boot, 0.025)) if boot.size else float("nan"),
                     "agreement_hi": float(np.quantile(boot, 0.975)) if boot.size else float("nan")})  # fmt: skip
    return pd.DataFrame(rows)


def run_switch_assumptions(lm: LoadedModel, windows, config: SwitchConfig) -> dict:
    """Every table: `cells` (window, layer), `layers` (per layer: share of windows where the assumptions hold,
    median rank and distance, agreement), `conditioned`, `offenders`, `categories`, and `meta`."""
    started = time.perf_counter()
    cells, offenders = measure(lm, windows, config)
    layers = cells.groupby("layer").agg(holds_frac=("holds", "mean"), rank_median=("context_rank", "median"),
                                        value_rank_median=("value_rank_min", "median"),
                                        n_contexts=("n_contexts", "first"),
                                        span_distance_median=("span_distance", "median"),
                                        span_distance_min=("span_distance", "min"), switched=("switched", "sum"),
                                        switched_sink=("switched_sink", "sum")).reset_index()  # fmt: skip
    layers["agreement"] = layers["switched_sink"] / layers["switched"].where(layers["switched"] > 0)
    counts = offenders["category"].value_counts().reindex(list(CATEGORIES), fill_value=0)
    categories = pd.DataFrame({"category": list(CATEGORIES), "queries": counts.to_numpy(),
                               "share": counts.to_numpy() / max(len(offenders), 1)})  # fmt: skip
    meta = {"config": asdict(config), "model": lm.identity,
            "corpus": windows.identity() if hasattr(windows, "identity") else {},
            "timings": {"seconds": time.perf_counter() - started}}  # fmt: skip
    return {"cells": cells, "layers": layers, "conditioned": conditioned(cells, config), "offenders": offenders,
            "categories": categories, "meta": meta}


def save_switch_assumptions(directory, result: dict, overwrite: bool = False):
    """Write `switch_cells.parquet`, `switch_layers.parquet`, `switch_conditioned.parquet`,
    `switch_offenders.parquet`, `switch_categories.parquet`, `switch_assumptions.json`, `figures/` and
    `report.html`, staged and renamed into place."""
    from sinkscope.report.plots import figure_png
    from sinkscope.report.result_files import save_result_files
    from sinkscope.report.switch_assumptions_section import assumptions_figure

    meta = result["meta"]
    png = figure_png(assumptions_figure(result["cells"], result["layers"]))
    settings = {"model": (meta.get("model") or {}).get("name", "unnamed model"),
                "corpus": (meta.get("corpus") or {}).get("source"),
                "windows": int(result["cells"]["window"].nunique()), **meta["config"],
                "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    return save_result_files(
        directory, overwrite=overwrite,
        tables={f"switch_{name}.parquet": result[name]
                for name in ("cells", "layers", "conditioned", "offenders", "categories")},
        meta_name="switch_assumptions.json", meta=meta,
        figures={"switch_assumptions.png": ("Assumptions and agreement by layer", png)},
        title=f"sinkscope switch-assumptions: {settings['model']}",
        intro="The switch theorem's assumptions (full-rank contexts, BOS outside their span) per layer and window, "
        "the agreement P(hard sink | switched off) where they hold and where they fail, and what the "
        "switched-off queries that are not hard sinks attend to. Definitions in docs/experiments.md.",
        settings=settings,
        shown=[("Agreement conditioned on the assumptions (switch_conditioned.parquet)", result["conditioned"]),
               ("Switched-off queries that are not hard sinks (switch_categories.parquet)", result["categories"]),
               ("Per layer (switch_layers.parquet)", result["layers"])],
    )  # fmt: skip
