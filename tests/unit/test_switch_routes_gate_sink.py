"""The routes added for gated and learned-sink attention (`stats.switch_routes.ALL_ROUTES`) on hand-made heads whose
route is known: a closed output gate over attention that alone stays on, a hard and a partial learned sink; the
routes are skipped where their input is absent, and every attention route keeps its label."""

from __future__ import annotations

import torch

from sinkscope.functional.switch_routes import ALL_ROUTES, NOT_OFF, ROUTES, RouteInputs, classify

TAU, DELTA = 0.1, 0.1
NAMES = [route.name for route in ALL_ROUTES] + ["unexplained"]
VALUES = torch.tensor([[0.01, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 0.02], [0.0, 1.0]], dtype=torch.float64)


def labels(rows, gate=None, learned=None) -> list[str]:
    attn = torch.tensor(rows, dtype=torch.float64)
    ungated = (attn @ VALUES).norm(dim=-1)
    extra = {}
    if gate is not None:
        extra["ungated_out_norm"] = ungated
        out = ungated * torch.tensor(gate, dtype=torch.float64)  # a scalar gate per query
    else:
        out = ungated
    if learned is not None:
        extra["learned_sink"] = torch.tensor(learned, dtype=torch.float64)
    found = classify(RouteInputs(attn, VALUES.norm(dim=-1), out, 0, extra), TAU, DELTA, ALL_ROUTES).tolist()
    return ["on" if i == NOT_OFF else NAMES[i] for i in found]


def test_gate_route_where_attention_alone_stays_on():
    rows = [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0.5, 0.5, 0, 0], [0, 0, 0, 0, 1], [0.95, 0, 0, 0, 0.05]]
    gates = [1.0, 0.01, 0.01, 1.0, 1.0]
    # t=1: v_1 alone is large, the gate closes it; t=2: v_1, v_2 cancel before the gate; t=3: open gate, on;
    # t=4: a hard BOS sink (its ungated output is already small)
    assert labels(rows, gate=gates) == ["on", "gate", "cancellation", "on", "bos_sink"]
    without = classify(RouteInputs(torch.tensor(rows, dtype=torch.float64), VALUES.norm(dim=-1),
                                   (torch.tensor(rows, dtype=torch.float64) @ VALUES).norm(dim=-1)), TAU, DELTA,
                       ALL_ROUTES)  # fmt: skip
    assert [NAMES[i] if i >= 0 else "on" for i in without.tolist()] == ["on", "on", "cancellation", "on", "bos_sink"]


def test_learned_sink_routes():
    # rows sum to 1 − m_t: the learned sink column takes the rest
    rows = [[1, 0, 0, 0, 0], [0.02, 0.0, 0, 0, 0], [0.1, 0, 0.0, 0.05, 0], [0.05, 0, 0, 0.4, 0.0],
            [0.0, 0.03, 0.0, 0.0, 0.0]]  # fmt: skip
    learned = [0.0, 0.98, 0.85, 0.55, 0.97]
    # t=1: hard learned sink; t=2: partial (m 0.85 < 1 − δ, more than BOS 0.1 and key 3's 0.05); t=3: partial
    # (m 0.55 more than its own key's 0.4); t=4: hard learned sink again
    assert labels(rows, learned=learned) == ["on", "learned_sink", "learned_partial", "learned_partial",
                                             "learned_sink"]  # fmt: skip
    rows[3] = [0.05, 0, 0, 0.6, 0.0]  # now its own small value takes more than the learned sink's 0.35
    assert labels(rows, learned=[0.0, 0.98, 0.85, 0.35, 0.97])[3] == "self_small_value"


def test_attention_routes_keep_their_order():
    assert [r.name for r in ALL_ROUTES if not r.needs] == [r.name for r in ROUTES]
