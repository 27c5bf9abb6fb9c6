"""`stats.switch_routes`: each route on a hand-made head, and the vectorised labels against a per-query loop."""

from __future__ import annotations

import math

import torch

from sinkscope.functional.switch_routes import NOT_OFF, ROUTES, Route, RouteInputs, classify, route_counts

NAMES = [route.name for route in ROUTES]
TAU, DELTA = 0.1, 0.1


def head(rows: list[list[float]], values: list[list[float]]) -> RouteInputs:
    """One head: attention rows (T, T) and values (T, 2); outputs o = A v computed here."""
    attn, v = torch.tensor(rows, dtype=torch.float64), torch.tensor(values, dtype=torch.float64)
    return RouteInputs(attn, v.norm(dim=-1), (attn @ v).norm(dim=-1))


def label_names(inputs: RouteInputs, routes=ROUTES) -> list[str]:
    names = [route.name for route in routes] + ["unexplained"]
    return ["on" if i == NOT_OFF else names[i] for i in classify(inputs, TAU, DELTA, routes).tolist()]


# Values: v_0 small (the sink's value), v_1 = -v_2 (they cancel), v_3 small (a low-norm key), v_4, v_5 large.
VALUES = [[0.01, 0.0], [1.0, 0.0], [-1.0, 0.0], [0.0, 0.02], [0.0, 1.0], [0.0, 1.0]]


def test_each_route_on_a_hand_made_head():
    rows = [
        [1, 0, 0, 0, 0, 0],  # t = 0: sees only BOS, never counted
        [0.05, 0.95, 0, 0, 0, 0],  # on: the output is v_1
        [0, 0.5, 0.5, 0, 0, 0],  # v_1 and v_2 cancel: off by cancellation
        [0.3, 0, 0, 0.7, 0, 0],  # most mass on its own small value v_3: self
        [0.95, 0, 0, 0.05, 0, 0],  # a hard sink on BOS
        [0.2, 0, 0, 0.8, 0, 0],  # most mass on key 3 (small value, not its own): low-norm keys
    ]
    assert label_names(head(rows, VALUES)) == ["on", "on", "cancellation", "self_small_value", "bos_sink",
                                               "low_norm_keys"]  # fmt: skip


def test_bos_partial_below_the_hard_sink_cut():
    """Small values reached mostly, but not ≥ 1 − δ, through BOS; the large v_1 sets the visible mean."""
    rows = [[1, 0, 0, 0], [0.6, 0.4, 0, 0], [0.6, 0, 0.4, 0], [0.7, 0, 0.1, 0.2]]
    values = [[0.01, 0], [1, 0], [0, 0.01], [0.01, 0]]
    # t = 1 reads the large v_1 (on); t = 2, 3: w ≤ 0.01 < τ · mean (0.034, 0.026), BOS the largest mass.
    assert label_names(head(rows, values))[1:] == ["on", "bos_partial", "bos_partial"]


def test_labels_match_a_per_query_loop():
    """Random heads (two with a sink, one with diagonal attention) against a plain Python loop of the rules."""
    generator = torch.Generator().manual_seed(3)
    B, H, T = 3, 4, 12
    logits = torch.randn(B, H, T, T, generator=generator, dtype=torch.float64) * 3
    logits[:, 0, :, 0] += 6  # a sink head
    logits[:, 1, :, 0] += 2
    logits[:, 2] += torch.eye(T, dtype=torch.float64) * 5  # a diagonal head
    attn = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf).softmax(-1)
    values = torch.randn(B, H, T, 3, generator=generator, dtype=torch.float64)
    values[..., 0, :] *= 0.02
    values[:, 2, 5:9] *= 0.05
    out = torch.einsum("bhtj,bhjd->bhtd", attn, values).norm(dim=-1)
    labels = classify(RouteInputs(attn, values.norm(dim=-1), out), 0.3, DELTA)
    counts = torch.zeros(len(ROUTES) + 1, dtype=torch.long)
    for b in range(B):
        for h in range(H):
            norms = values[b, h].norm(dim=-1).tolist()
            for t in range(T):
                a = attn[b, h, t].tolist()
                limit = 0.3 * sum(norms[: t + 1]) / (t + 1)
                if t == 0 or out[b, h, t] > limit:
                    expected = NOT_OFF
                elif a[0] >= 1 - DELTA:
                    expected = 0
                elif sum(a[j] * norms[j] for j in range(t + 1)) > limit:
                    expected = 1
                elif a[0] >= a[t] and a[0] >= sum(a[1:t]):
                    expected = 2
                elif a[t] >= sum(a[1:t]):
                    expected = 3
                else:
                    expected = 4
                assert int(labels[b, h, t]) == expected, (b, h, t)
                if expected >= 0:
                    counts[expected] += 1
    assert (counts[:-1] > 0).sum() >= 3  # the draw exercises several routes
    assert torch.equal(route_counts(labels, len(ROUTES)).sum((0, 1)), counts)


def test_a_query_block_with_an_offset_reads_the_same_labels():
    generator = torch.Generator().manual_seed(1)
    T = 10
    attn = torch.rand(2, T, T, generator=generator, dtype=torch.float64).tril()
    attn[:, :, 0] += 3 * torch.rand(2, T, 1, generator=generator, dtype=torch.float64).squeeze(-1)
    attn = attn / attn.sum(-1, keepdim=True)
    norms = torch.rand(2, T, generator=generator, dtype=torch.float64)
    norms[:, 0] = 0.01
    out = attn[..., 0] * 0.01 + 0.05 * torch.rand(2, T, generator=generator, dtype=torch.float64)
    whole = classify(RouteInputs(attn, norms, out), 0.5, DELTA)
    block = classify(RouteInputs(attn[:, 4:], norms, out[:, 4:], start=4), 0.5, DELTA)
    assert torch.equal(whole[:, 4:], block)


def test_an_added_route_with_an_optional_input():
    """A route that needs an input the caller does not pass is skipped; passed, it takes its queries first."""
    gated = Route("output_gate", lambda m, th: m.extra["gate"] <= th["tau"], needs=("gate",))
    routes = (gated, *ROUTES)
    rows = [[1, 0, 0], [0.99, 0.01, 0], [0.3, 0, 0.7]]
    values = [[0.01, 0], [1, 0], [0, 0.01]]
    inputs = head(rows, values)
    assert label_names(inputs, routes)[1:] == ["bos_sink", "self_small_value"]
    with_gate = RouteInputs(inputs.attn, inputs.value_norms, inputs.out_norms,
                            extra={"gate": torch.tensor([1.0, 0.0, 1.0])})  # fmt: skip
    assert label_names(with_gate, routes)[1:] == ["output_gate", "self_small_value"]


def test_a_partition_of_the_switched_off_queries():
    rows = [[1, 0, 0], [1, 0, 0], [0, 0.5, 0.5]]
    values = [[0.01, 0], [1, 0], [-1, 0]]
    inputs = head(rows, values)
    labels = classify(inputs, TAU, DELTA)
    counts = route_counts(labels, len(ROUTES))
    assert counts.tolist() == [1, 1, 0, 0, 0, 0]  # t = 1 sinks, t = 2 cancels, nothing unexplained
    assert NAMES.index("bos_sink") == 0
