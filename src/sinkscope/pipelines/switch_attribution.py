"""Switch attribution on real models: for each head, the queries whose output is switched off (SPEC §3), split by
the route that switched them off (`stats.switch_routes.ALL_ROUTES`: output gate, BOS sink, learned sink,
cancellation, partial learned sink, partial BOS, the query's own small value, other low-norm keys), among the routes
the architecture has.

One pass over the windows with the attention taken in query blocks (`capture.attention.watch_attention`, the
block path: every block's full rows); a learned sink's mass and an output gate's values come from their own
captures (`capture.learned_sink`, `capture.gate`). With a gate, "switched off" reads the gated output
`||σ(g_t) ⊙ Σ_j A[t,j] v_j||`, and the gate route holds where the ungated one is above the limit. Counts are integer
sums per (layer, head, route): memory does not grow with the windows. Layers without a softmax map (linear
attention) are not in the table.
"""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import torch
from torch import Tensor

from sinkscope.capture.attention import watch_attention
from sinkscope.capture.gate import output_gate_hooks
from sinkscope.corpus.windows import TokenWindows, Windows
from sinkscope.errors import SinkscopeError
from sinkscope.functional.switch_routes import ALL_ROUTES, Route, RouteInputs, classify, route_counts
from sinkscope.models.families import attention_module, softmax_layers
from sinkscope.models.load import LoadedModel


def available_routes(lm: LoadedModel, routes: tuple[Route, ...] = ALL_ROUTES) -> tuple[Route, ...]:
    """The routes the model's architecture has: the gate's only with an output gate, the learned sink's only with
    a learned sink column."""
    has = {"ungated_out_norm": lm.family.output_gate is not None, "learned_sink": lm.family.learned_sink is not None}
    return tuple(route for route in routes if all(has.get(name, False) for name in route.needs))


class _Counter:
    """Per-(layer, head, route) counts of switched-off queries, fed block by block."""

    def __init__(self, lm: LoadedModel, routes: tuple[Route, ...], tau: float, delta: float) -> None:
        self.routes, self.tau, self.delta, self.group = routes, tau, delta, lm.layout.group
        L, H = len(lm.layers), lm.layout.n_heads
        self.counts = torch.zeros(L, H, len(routes) + 1, dtype=torch.long)
        self.queries = torch.zeros(L, H, dtype=torch.long)
        self.value_norms: dict[int, Tensor] = {}
        self.learned: dict[int, Tensor] = {}
        self.gates: dict[int, Tensor] = {}

    def on_values(self, layer: int, value: Tensor) -> None:
        self.value_norms[layer] = value.float().norm(dim=-1).repeat_interleave(self.group, dim=1)  # (B, H, T)

    def on_learned_sink(self, layer: int, start: int, mass: Tensor) -> None:
        self.learned[layer] = mass

    def on_gate(self, layer: int, gates: Tensor) -> None:
        self.gates[layer] = gates  # (B, H, T, dh)

    def on_block(self, layer: int, start: int, probs: Tensor, entropy: Tensor, out: Tensor) -> None:
        B, H, Q, K = probs.shape
        extra, out_norms = {}, out.float().norm(dim=-1)  # (B, H, Q)
        if layer in self.learned:
            extra["learned_sink"] = self.learned.pop(layer)
        if layer in self.gates:
            extra["ungated_out_norm"] = out_norms
            out_norms = (out.float() * self.gates[layer][:, :, start : start + Q]).norm(dim=-1)
        inputs = RouteInputs(probs, self.value_norms[layer][..., :K], out_norms, start, extra)
        labels = classify(inputs, self.tau, self.delta, self.routes)
        self.counts[layer] += route_counts(labels, len(self.routes)).sum(0).cpu()
        self.queries[layer] += B * (Q - (start == 0))  # queries t ≥ 1


@torch.no_grad()
def switch_attribution(
    lm: LoadedModel, windows: Windows | TokenWindows, tau: float = 0.1, delta: float = 0.1, progress: bool = False
) -> pd.DataFrame:
    """One row per (softmax layer, head): `n_queries` (t ≥ 1), `n_off` (switched off, SPEC §3 with `tau`),
    `off_frac`, and per route of `available_routes` its count `n_<route>` and share of the off queries
    `share_<route>` (NaN where no query is off); `unexplained` counts off queries no route takes (0 with the
    declared routes, whose last always holds). `delta`: the hard-sink cut of the BOS and learned-sink routes."""
    from tqdm.auto import tqdm

    if not (0 < tau < 1 and 0 < delta < 1):
        raise SinkscopeError(f"--tau {tau} and --delta {delta} must lie strictly between 0 and 1")
    routes = available_routes(lm)
    counter = _Counter(lm, routes, tau, delta)
    layers = softmax_layers(lm.family, lm.layers)
    modules = {layer: attention_module(lm.family, lm.layers[layer]) for layer in layers}
    with watch_attention(lm.model, modules, counter.on_block, counter.on_values,
                         on_learned_sink=counter.on_learned_sink), output_gate_hooks(lm, [counter.on_gate]):  # fmt: skip
        for batch in tqdm(windows.batches(), desc="attribute", unit="batch", disable=not progress):
            lm.base(input_ids=batch.to(lm.device), use_cache=False)
            counter.value_norms.clear()
            counter.gates.clear()
    return attribution_table(counter.counts, counter.queries, routes, layers)


def attribution_table(counts: Tensor, queries: Tensor, routes: tuple[Route, ...], layers: list[int]) -> pd.DataFrame:
    """The per-head table of `switch_attribution` from counts (L, H, R + 1) and query counts (L, H)."""
    rows = []
    for layer in layers:
        for head in range(counts.shape[1]):
            n = counts[layer, head].tolist()
            off = sum(n)
            row = {"layer": layer, "head": head, "n_queries": int(queries[layer, head]), "n_off": off,
                   "off_frac": off / int(queries[layer, head]) if int(queries[layer, head]) else float("nan")}  # fmt: skip
            for route, count in zip(routes, n):
                row[f"n_{route.name}"] = count
            for route, count in zip(routes, n):
                row[f"share_{route.name}"] = count / off if off else float("nan")
            row["unexplained"] = n[-1]
            rows.append(row)
    return pd.DataFrame(rows)


def route_totals(table: pd.DataFrame) -> dict[str, float]:
    """Shares of all switched-off (head, query) pairs of the model by route, and the model's off fraction."""
    names = [c.removeprefix("share_") for c in table.columns if c.startswith("share_")]
    off = int(table["n_off"].sum())
    totals = {name: int(table[f"n_{name}"].sum()) / off if off else float("nan") for name in names}
    return {"off_frac": off / int(table["n_queries"].sum()), "n_off": off, "shares": totals}


def save_attribution(out: str | Path, table: pd.DataFrame, meta: dict) -> dict:
    """Write `attribution.parquet`, `attribution.csv`, `attribution.json` (meta and `route_totals`) and
    `figures/attribution.png` into `out`, staged and renamed into place with sinkscope's ownership marker
    (`staging.staged_directory`); returns the JSON's content."""
    from sinkscope.report.attribution_section import attribution_figure
    from sinkscope.report.plots import figure_png
    from sinkscope.staging import staged_directory

    summary = {**meta, **route_totals(table)}
    png = figure_png(attribution_figure(table, f" · {meta.get('model', '')}"))
    with staged_directory(out) as staging:
        (staging / "figures").mkdir()
        table.to_parquet(staging / "attribution.parquet", index=False)
        table.to_csv(staging / "attribution.csv", index=False)
        (staging / "attribution.json").write_text(json.dumps(summary, indent=2))
        (staging / "figures" / "attribution.png").write_bytes(png)
    return summary
