"""How a switched-off query's output is small: its *route*, as pure functions over one block of attention rows.

A query t ≥ 1 of a head is switched off when `||o_t|| ≤ τ · mean_{j≤t} ||v_j||` (`stats.switch`). The paper
proves that attending fully to BOS is the only geometrically viable way to get there; other ways exist on paper,
and this module tells them apart, one query at a time. With `o_t = Σ_j A[t,j] v_j` and the triangle inequality
`||o_t|| ≤ w_t := Σ_j A[t,j] ||v_j||`, a small output has two kinds of cause:

* the weights sit on small values (`w_t ≤ τ · mean`): then *where* the mass sits names the route — on BOS
  (the sink), on the query's own key (diagonal attention on a small value), or on other keys with small values
  (a secondary sink);
* the weights sit on values that are not small (`w_t > τ · mean`): the output is small only because the
  weighted values cancel (spread attention whose weighted values sum near zero).

`ROUTES` is an ordered, declared list; a query takes the **first** route whose rule holds, so the list is a
partition of the switched-off queries (the last rule always holds). A route may need an input that only some
models have (a learned sink column, an output gate): it names it in `needs`, the caller passes it in
`RouteInputs.extra`, and a route whose inputs are absent is skipped. Add such a route with
`routes = (*ROUTES[:k], Route(...), *ROUTES[k:])`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch
from torch import Tensor

from sinkscope.functional.switch import visible_value_mean

NOT_OFF = -1  # label of a query that is not switched off (and of t = 0, which sees only BOS)


@dataclass(frozen=True)
class RouteInputs:
    """One block of query rows `start..start+Q-1` of one layer.

    `attn` (..., Q, T): `A[t,j]` (zero for j > t; rows may sum below 1 when a learned sink takes the rest);
    `value_norms` (..., T): `||v_j||` of the values each query row reads (one per query head: GQA groups
    repeated); `out_norms` (..., Q): `||o_t||`; `extra`: optional per-query inputs (..., Q) of added routes, by
    name (e.g. `learned_sink`: the mass on a learned sink column; `gate`: an output gate's value).
    """

    attn: Tensor
    value_norms: Tensor
    out_norms: Tensor
    start: int = 0
    extra: Mapping[str, Tensor] = field(default_factory=dict)


@dataclass(frozen=True)
class RouteMasses:
    """Per query (..., Q), float64: `bos` = A[t,0]; `own` = A[t,t] (0 at t = 0); `other` = Σ_{0<j<t} A[t,j];
    `weighted_norm` w_t = Σ_j A[t,j] ||v_j||; `limit` = τ · mean_{j≤t} ||v_j||; `off` = ||o_t|| ≤ limit and
    t ≥ 1; `extra` as passed in."""

    bos: Tensor
    own: Tensor
    other: Tensor
    weighted_norm: Tensor
    limit: Tensor
    off: Tensor
    extra: Mapping[str, Tensor]


Rule = Callable[[RouteMasses, Mapping[str, float]], Tensor]


@dataclass(frozen=True)
class Route:
    """One way a switched-off query's output can be small. `rule(masses, thresholds)` → (..., Q) booleans
    (`thresholds` holds at least `tau` and `delta`); `needs`: names of `RouteInputs.extra` it reads; `sink`:
    whether the route is attention on BOS (the paper's sink)."""

    name: str
    rule: Rule
    needs: tuple[str, ...] = ()
    sink: bool = False


ROUTES: tuple[Route, ...] = (
    # A[t,0] ≥ 1 − δ: the hard sink of the paper.
    Route("bos_sink", lambda m, th: m.bos >= 1 - th["delta"], sink=True),
    # w_t > τ · mean: the values the weights sit on are not small; only their cancellation makes o_t small.
    Route("cancellation", lambda m, th: m.weighted_norm > m.limit),
    # Small values reached mostly through BOS, below the hard-sink cut.
    Route("bos_partial", lambda m, th: (m.bos >= m.own) & (m.bos >= m.other), sink=True),
    # Small values reached mostly through the query's own key (diagonal attention on a small v_t).
    Route("self_small_value", lambda m, th: m.own >= m.other),
    # Small values reached mostly through other keys (a secondary sink on low-norm keys): the rest.
    Route("low_norm_keys", lambda m, th: torch.ones_like(m.off)),
)

# Routes of architectures with another way to switch off (issue 37), added to the list above in `ALL_ROUTES`;
# `classify` skips each where its input is absent, so `ALL_ROUTES` serves every model.
# An output gate (Qwen3-Next): the attention alone would leave the output on — `ungated_out_norm`, ||Σ_j A[t,j] v_j||
# before the gate, is above the limit — and the gate made it small. First: it overrides what the attention did.
GATE_ROUTE = Route("gate", lambda m, th: m.extra["ungated_out_norm"].double() > m.limit, needs=("ungated_out_norm",))
# A learned sink column (gpt-oss's s_aux) taking m_t ≥ 1 − δ of the row: the hard learned sink.
LEARNED_SINK_ROUTE = Route("learned_sink", lambda m, th: m.extra["learned_sink"].double() >= 1 - th["delta"],
                           needs=("learned_sink",))
# Small values reached mostly through the learned sink column, below the hard cut (before BOS's partial route).
LEARNED_PARTIAL_ROUTE = Route(
    "learned_partial",
    lambda m, th: m.extra["learned_sink"].double() >= torch.maximum(m.bos, torch.maximum(m.own, m.other)),
    needs=("learned_sink",),
)
ALL_ROUTES: tuple[Route, ...] = (GATE_ROUTE, ROUTES[0], LEARNED_SINK_ROUTE, ROUTES[1], LEARNED_PARTIAL_ROUTE,
                                 *ROUTES[2:])  # fmt: skip


def route_masses(inputs: RouteInputs, tau: float) -> RouteMasses:
    """The per-query quantities the rules read (see `RouteMasses`), in float64."""
    attn, norms = inputs.attn.double(), inputs.value_norms.double()
    Q, T = attn.shape[-2], attn.shape[-1]
    t = torch.arange(inputs.start, inputs.start + Q, device=attn.device)
    keys = torch.arange(T, device=attn.device)
    own = keys[None, :] == t[:, None]  # (Q, T): key j = t
    between = (keys[None, :] > 0) & (keys[None, :] < t[:, None])  # (Q, T): 0 < j < t
    self_mass = (attn * own).sum(-1) * (t >= 1)
    weighted = (attn * norms[..., None, :]).sum(-1)
    limit = tau * visible_value_mean(norms, inputs.start + Q)[..., inputs.start :]
    off = (inputs.out_norms.double() <= limit) & (t >= 1)
    other = (attn * between).sum(-1)
    return RouteMasses(attn[..., 0], self_mass, other, weighted, limit, off, dict(inputs.extra))


def classify(inputs: RouteInputs, tau: float, delta: float, routes: tuple[Route, ...] = ROUTES) -> Tensor:
    """(..., Q) int64: the index in `routes` of each switched-off query's first matching route, `NOT_OFF` for
    queries that are not switched off (and t = 0), `len(routes)` for a switched-off query no route explains
    (impossible with `ROUTES`, whose last rule always holds). Routes whose `needs` are absent are skipped."""
    masses = route_masses(inputs, tau)
    thresholds = {"tau": tau, "delta": delta}
    labels = torch.full(masses.off.shape, NOT_OFF, dtype=torch.long, device=masses.off.device)
    open_ = masses.off.clone()
    for index, route in enumerate(routes):
        if any(name not in inputs.extra for name in route.needs):
            continue
        hit = open_ & route.rule(masses, thresholds).bool()
        labels[hit] = index
        open_ &= ~hit
    labels[open_] = len(routes)
    return labels


def route_counts(labels: Tensor, n_routes: int) -> Tensor:
    """(..., n_routes + 1) int64 counts over the last axis of `labels` (from `classify`): queries per route,
    the last entry the unexplained ones; queries that are not switched off are not counted."""
    valid = labels >= 0
    one_hot = torch.nn.functional.one_hot(labels.clamp_min(0), n_routes + 1) * valid[..., None]
    return one_hot.sum(-2)
