"""Draw 53's survivors in functional/ and the reproduction's figures, closed by kind (issue 34).

- Reductions over the wrong axes (`.mean(-1)` → `.mean(None)` survived in `hard_learned_sink_frac`): every public
  per-head reducer of `sinkscope.functional` called on a (B, H, T, T) / (B, H, T) / (B, H, T, d) input with B, H, T,
  d all distinct and > 1, every output entry compared with a plain Python loop over the documented formula.
- `route_masses` at t = 0: `RouteMasses.own` is documented "A[t,t] (0 at t = 0)"; every field checked by hand on
  a block that starts at t = 0 and on one that starts later.
- Fixed axis limits (`ylim=(-0.05, 1.05)` → `None` survived because the stored data spans [0, 1] and matplotlib's
  5 % margins give the same limits): every figure that sets fixed limits, fed data inside [0.3, 0.6] only, must
  still show its documented limits.
"""

import math

import pandas as pd
import pytest
import torch

from sinkscope.functional import geometry, learned_sink, patterns, switch, weights
from sinkscope.functional.query_mask import masked_query_mean
from sinkscope.functional.switch_routes import RouteInputs, route_masses
from sinkscope.reproduction import experiment_figures as xf
from sinkscope.reproduction import figures

B, H, T, D = 2, 3, 5, 4


def _attn() -> torch.Tensor:
    """Causal rows (B, H, T, T), float64; some rows put ≥ 0.9 on BOS or on the diagonal, so hard fractions differ
    from head to head."""
    g = torch.Generator().manual_seed(53)
    logits = torch.randn(B, H, T, T, generator=g, dtype=torch.float64)
    pick = torch.randint(0, 3, (B, H, T), generator=g)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                if pick[b, h, t] == 1:
                    logits[b, h, t, 0] += 8.0
                elif pick[b, h, t] == 2:
                    logits[b, h, t, t] += 8.0
    logits = logits.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), -math.inf)
    return logits.softmax(-1)


def _grid(fn, *shape):
    return torch.tensor([[fn(b, h) for h in range(shape[1])] for b in range(shape[0])], dtype=torch.float64)


def _mean(xs):
    xs = list(xs)
    return sum(xs) / len(xs)


def test_every_per_head_reducer_reduces_only_its_own_axis():
    A = _attn()
    a = A.tolist()
    g = torch.Generator().manual_seed(7)
    mass = torch.rand(B, H, T, generator=g, dtype=torch.float64) * 0.3 + 0.7  # straddles 1 − δ = 0.9
    m = mass.tolist()
    x = torch.randn(B, H, T, D, generator=g, dtype=torch.float64)
    xs = x.tolist()
    norms = torch.rand(B, H, T, generator=g, dtype=torch.float64) + 0.1
    n = norms.tolist()
    s = torch.rand(B, H, D, generator=g, dtype=torch.float64) + 0.05
    sv = s.tolist()

    def close(got, want):
        torch.testing.assert_close(got.double(), want.double(), rtol=1e-5, atol=1e-6)

    later = range(1, T)
    close(learned_sink.learned_sink_score(mass), _grid(lambda b, h: _mean(m[b][h]), B, H))
    for delta in (0.1, 0.2):
        close(learned_sink.hard_learned_sink_frac(mass, delta),
              _grid(lambda b, h, d=delta: _mean(m[b][h][t] >= 1 - d for t in later), B, H))  # fmt: skip
        close(
            patterns.hard_sink_frac(A, delta),
            _grid(lambda b, h, d=delta: _mean(a[b][h][t][0] >= 1 - d for t in later), B, H),
        )
        close(
            patterns.hard_diag_frac(A, delta),
            _grid(lambda b, h, d=delta: _mean(a[b][h][t][t] >= 1 - d for t in later), B, H),
        )
    close(
        learned_sink.hard_learned_sink_frac(mass),
        _grid(lambda b, h: _mean(m[b][h][t] >= 0.9 for t in later), B, H),
    )
    close(patterns.hard_sink_frac(A), _grid(lambda b, h: _mean(a[b][h][t][0] >= 0.9 for t in later), B, H))
    close(patterns.hard_diag_frac(A), _grid(lambda b, h: _mean(a[b][h][t][t] >= 0.9 for t in later), B, H))
    close(patterns.sink_score(A), _grid(lambda b, h: _mean(a[b][h][t][0] for t in range(T)), B, H))
    close(patterns.diag_score(A), _grid(lambda b, h: _mean(a[b][h][t][t] for t in later), B, H))
    close(patterns.prev_score(A), _grid(lambda b, h: _mean(a[b][h][t][t - 1] for t in later), B, H))
    close(
        patterns.prev_score(A, offset=2),
        _grid(lambda b, h: _mean(a[b][h][t][t - 2] for t in range(2, T)), B, H),
    )

    def entropy(b, h, t):
        return -sum(p * math.log(p) for p in a[b][h][t][: t + 1] if p > 0) / math.log(t + 1)

    close(
        patterns.row_entropy(A),
        torch.tensor([[[entropy(b, h, t) for t in later] for h in range(H)] for b in range(B)]),
    )
    close(patterns.entropy_score(A), _grid(lambda b, h: _mean(entropy(b, h, t) for t in later), B, H))
    close(patterns.key_scores(A),
          torch.tensor([[[sum(a[b][h][t][k] for t in range(T)) / (T - k) for k in range(T)] for h in range(H)]
                        for b in range(B)]))  # fmt: skip
    close(patterns.received_scores(A),
          torch.tensor([[[_mean(a[b][h][t][k] for t in range(k + 1, T)) for k in range(1, T - 1)] for h in range(H)]
                        for b in range(B)]))  # fmt: skip
    # query masks: (B, T) pooled over windows, per head
    qm = torch.tensor([[True, False, True, True, False], [False, True, True, False, True]])
    picked = [(b, t) for b in range(B) for t in range(T) if qm[b, t]]
    close(
        patterns.sink_score(A, qm), torch.tensor([_mean(a[b][h][t][0] for b, t in picked) for h in range(H)])
    )
    close(
        patterns.diag_score(A, qm),
        torch.tensor([_mean(a[b][h][t][t] for b, t in picked if t >= 1) for h in range(H)]),
    )
    close(
        patterns.prev_score(A, qm),
        torch.tensor([_mean(a[b][h][t][t - 1] for b, t in picked if t >= 1) for h in range(H)]),
    )
    close(
        patterns.entropy_score(A, qm),
        torch.tensor([_mean(entropy(b, h, t) for b, t in picked if t >= 1) for h in range(H)]),
    )
    close(masked_query_mean(mass, qm), torch.tensor([_mean(m[b][h][t] for b, t in picked) for h in range(H)]))
    # sink rate: over every entry of (W, L, H) scores
    scores = torch.rand(3, 4, 2, generator=g)
    for eps in (0.3, 0.6):
        assert patterns.sink_rate(scores, eps) == pytest.approx(
            _mean(v > eps for v in scores.flatten().tolist())
        )
    assert patterns.sink_rate(scores) == pytest.approx(_mean(v > 0.3 for v in scores.flatten().tolist()))

    # geometry, values, spectra
    def nrm(v):
        return math.sqrt(sum(c * c for c in v))

    close(geometry.bos_cosine(x),
          torch.tensor([[[sum(p * q for p, q in zip(xs[b][h][0], xs[b][h][t])) / nrm(xs[b][h][0]) / nrm(xs[b][h][t])
                          for t in later] for h in range(H)] for b in range(B)]))  # fmt: skip
    close(
        geometry.bos_norm_ratio(x),
        _grid(lambda b, h: nrm(xs[b][h][0]) / _mean(nrm(xs[b][h][t]) for t in later), B, H),
    )
    close(geometry.norm_ratio(norms), _grid(lambda b, h: n[b][h][0] / _mean(n[b][h][1:]), B, H))
    close(geometry.bos_dots(x),
          torch.tensor([[[sum(p * q for p, q in zip(xs[b][h][0], xs[b][h][t])) for t in range(T)] for h in range(H)]
                        for b in range(B)]))  # fmt: skip
    close(switch.value_drain(norms), _grid(lambda b, h: n[b][h][0] / _mean(n[b][h][1:]), B, H))
    close(
        switch.visible_value_mean(norms),
        torch.tensor([[[_mean(n[b][h][: t + 1]) for t in range(T)] for h in range(H)] for b in range(B)]),
    )
    close(
        switch.visible_value_mean(norms, 3),
        torch.tensor([[[_mean(n[b][h][: t + 1]) for t in range(3)] for h in range(H)] for b in range(B)]),
    )
    close(weights.nuclear_frobenius_ratio(s), _grid(lambda b, h: sum(sv[b][h]) / nrm(sv[b][h]), B, H))

    def erank(v):
        p = [c / sum(v) for c in v]
        return math.exp(-sum(q * math.log(q) for q in p))

    close(weights.effective_rank(s), _grid(lambda b, h: erank(sv[b][h]), B, H))


def test_learned_sink_block_sums_per_head_and_per_window():
    """(H,) sums over windows and queries t ≥ 1 (mass over every t), the (B,) all-heads-silent count, by loops."""
    g = torch.Generator().manual_seed(11)
    Q, q_start, delta, tau = 4, 1, 0.1, 0.5
    Tk = q_start + Q
    mass = torch.rand(B, H, Q, generator=g, dtype=torch.float64) * 0.3 + 0.7
    out = torch.rand(B, H, Q, generator=g, dtype=torch.float64)
    vn = torch.rand(B, H, Tk, generator=g, dtype=torch.float64) + 0.5
    hs = torch.rand(B, H, Q, generator=g) > 0.5
    hd = torch.rand(B, H, Q, generator=g) > 0.7
    sums, silent = learned_sink.learned_sink_block_sums(mass, out, vn, hs, hd, q_start, delta, tau)
    hard = lambda b, h, i: mass[b, h, i].item() >= 1 - delta  # noqa: E731
    off = lambda b, h, i: out[b, h, i].item() <= tau * vn[b, h, : q_start + i + 1].mean().item()  # noqa: E731
    cells = [(b, i) for b in range(B) for i in range(Q)]
    want = {
        "mass": [sum(mass[b, h, i].item() for b, i in cells) for h in range(H)],
        "hard": [sum(hard(b, h, i) for b, i in cells) for h in range(H)],
        "n_off": [sum(off(b, h, i) for b, i in cells) for h in range(H)],
        "n_off_learned": [sum(off(b, h, i) and hard(b, h, i) for b, i in cells) for h in range(H)],
        "n_off_any_sink": [
            sum(off(b, h, i) and (hard(b, h, i) or bool(hs[b, h, i])) for b, i in cells) for h in range(H)
        ],  # fmt: skip
    }
    assert sorted(sums) == sorted(want)
    for key, values in want.items():
        torch.testing.assert_close(sums[key], torch.tensor(values, dtype=torch.float64), msg=key)
    silent_want = [sum(all(hard(b, h, i) or bool(hs[b, h, i]) or bool(hd[b, h, i]) for h in range(H)) for i in range(Q))
                   for b in range(B)]  # fmt: skip
    torch.testing.assert_close(silent, torch.tensor(silent_want, dtype=torch.float64))


@pytest.mark.parametrize("start", [0, 2])
def test_route_masses_fields_by_hand_including_t0(start):
    """`RouteMasses`: bos = A[t,0]; own = A[t,t] (0 at t = 0); other = Σ_{0<j<t} A[t,j]; w_t = Σ_j A[t,j] ||v_j||;
    limit = τ mean_{j≤t} ||v_j||; off = ||o_t|| ≤ limit and t ≥ 1 — every field, every entry, by loops."""
    g = torch.Generator().manual_seed(5 + start)
    Q, tau = 3, 0.7
    Tk = start + Q
    attn = torch.rand(H, Q, Tk, generator=g, dtype=torch.float64)
    for i in range(Q):
        attn[:, i, start + i + 1 :] = 0
    vn = torch.rand(H, Tk, generator=g, dtype=torch.float64) + 0.2
    on = torch.rand(H, Q, generator=g, dtype=torch.float64)
    on[:, 0] = 0.0  # the first query's output is tiny: off if and only if its t ≥ 1
    extra = {"learned_sink": torch.rand(H, Q, generator=g)}
    r = route_masses(RouteInputs(attn, vn, on, start, extra), tau)
    cells = [(h, i, start + i) for h in range(H) for i in range(Q)]
    want = {
        "bos": {(h, i): attn[h, i, 0].item() for h, i, t in cells},
        "own": {(h, i): attn[h, i, t].item() if t >= 1 else 0.0 for h, i, t in cells},
        "other": {(h, i): sum(attn[h, i, j].item() for j in range(1, t)) for h, i, t in cells},
        "weighted_norm": {
            (h, i): sum(attn[h, i, j].item() * vn[h, j].item() for j in range(Tk)) for h, i, t in cells
        },
        "limit": {(h, i): tau * _mean(vn[h, : t + 1].tolist()) for h, i, t in cells},
    }
    for name, values in want.items():
        got = getattr(r, name)
        assert got.dtype == torch.float64 and bool(torch.isfinite(got).all()), name
        for (h, i), v in values.items():
            assert got[h, i].item() == pytest.approx(v, abs=1e-12), (name, h, i)
    for h, i, t in cells:
        assert bool(r.off[h, i]) == (t >= 1 and on[h, i].item() <= want["limit"][h, i])
    assert (not bool(r.off[:, 0].any())) if start == 0 else bool(r.off[:, 0].all())
    assert r.extra.keys() == {"learned_sink"} and r.extra["learned_sink"] is extra["learned_sink"]


# ---- fixed axis limits, on data that does not span them -------------------------------------------------------

MID = [0.3, 0.45, 0.6]  # every plotted value inside [0.3, 0.6]: autoscaling would give about (0.285, 0.615)


def _geometry():
    frame = pd.DataFrame({"layer": [0, 1, 2], "corpus": "c", "bos_cos_nonpos_frac_z": MID,
                          "nonpos_frac_bos_h": MID, "bos_cos_mean_z": MID})  # fmt: skip
    return figures.geometry_figure({"m": {"geometry": frame}})


def _switch():
    rows = [{"corpus": "c", "tau": t, "delta_scale": 1.0, "p_sink_given_off": v, "p_off_given_sink": v}
            for t, v in zip((0.05, 0.1, 0.5), MID)]  # fmt: skip
    return figures.switch_figure({"m": {"switch": pd.DataFrame(rows)}})


def _anchors():
    frame = pd.DataFrame({"corpus": ["builtin:prose", "builtin:random", "builtin:repeat"], "sink_rate": MID})
    return figures.anchors_figure({"m": {"anchors": frame}})


def _prevalence():
    frame = pd.DataFrame({"layer": [0, 1, 2], "class": ["sink", "sink", "sink"], "share": MID})
    return xf.prevalence_figure({"m": {"prevalence": frame}})


def _assumptions():
    frame = pd.DataFrame({"layer": [0, 1, 2], "span_distance_median": MID, "span_distance_min": MID,
                          "holds_frac": MID, "switched_off": [10, 20, 10], "switched_off_sink": [3, 9, 6]})  # fmt: skip
    return xf.assumptions_figure({"m": {"switch_assumptions": frame}})


def _boundary():
    runs = pd.DataFrame({"setting": ["s_a", "s_b"], "predicted": ["sink", "diagonal"], "bos_mass": [0.55, 0.35],
                         "diag_mass": [0.4, 0.6]})  # fmt: skip
    return xf.boundary_trained_figure(runs)


@pytest.mark.parametrize(
    ("build", "ylim"),
    [
        (_geometry, (-1.05, 1.05)),
        (_switch, (-0.02, 1.02)),
        (_anchors, (0.0, 1.0)),
        (_prevalence, (0.0, 1.05)),
        (_assumptions, (-0.05, 1.05)),
        (_boundary, (-0.02, 1.02)),
    ],  # fmt: skip
    ids=["geometry", "switch", "anchors", "prevalence", "assumptions", "boundary_trained"],
)
def test_fixed_limits_hold_on_data_inside_them(build, ylim):
    fig = build()
    for ax in fig.axes:
        assert ax.get_ylim() == pytest.approx(ylim)


@pytest.mark.parametrize("q_start", [0, 1])
def test_pattern_and_switch_block_sums_per_head_by_loops(q_start):
    """`pattern_block_sums` (B, H, Q, K) → (H,) sums (sink over every t, the rest over t ≥ 1), per-window
    columns and diagonal; `switch_block_sums` with a leading layer axis (L, B, H, Q) → (L, H); `exceed_counts`
    over the windows' axis — each entry by loops, B, H, Q, K, L all distinct."""
    g = torch.Generator().manual_seed(20 + q_start)
    Q, delta, tau, L = 4, 0.1, 0.6, 7
    K = q_start + Q + 1  # one key past the last query: causally masked
    logits = torch.randn(B, H, Q, K, generator=g, dtype=torch.float64)
    for i in range(Q):
        logits[:, :, i, q_start + i + 1 :] = -math.inf
    boost = torch.randint(0, 3, (B, H, Q), generator=g)
    for b in range(B):
        for h in range(H):
            for i in range(Q):
                if boost[b, h, i]:
                    logits[b, h, i, 0 if boost[b, h, i] == 1 else q_start + i] += 9.0
    p = logits.softmax(-1)
    sums, hs, hd = patterns.pattern_block_sums(p, q_start, delta)
    cells = [(b, i, q_start + i) for b in range(B) for i in range(Q)]
    later = [(b, i, t) for b, i, t in cells if t >= 1]

    def ent(b, h, i):
        return -sum(v * math.log(v) for v in p[b, h, i].tolist() if v > 0)

    want = {
        "sink": [sum(p[b, h, i, 0].item() for b, i, _ in cells) for h in range(H)],
        "diag": [sum(p[b, h, i, t].item() for b, i, t in later) for h in range(H)],
        "prev": [sum(p[b, h, i, t - 1].item() for b, i, t in later) for h in range(H)],
        "hard_sink": [sum(p[b, h, i, 0].item() >= 1 - delta for b, i, _ in later) for h in range(H)],
        "hard_diag": [sum(p[b, h, i, t].item() >= 1 - delta for b, i, t in later) for h in range(H)],
        "entropy": [sum(ent(b, h, i) / math.log(t + 1) for b, i, t in later) for h in range(H)],
        "row_total": [float(B * Q)] * H,
        "upper_mass": [0.0] * H,
    }
    for key, values in want.items():
        torch.testing.assert_close(sums[key], torch.tensor(values, dtype=torch.float64), msg=key)
    col = [
        [[sum(p[b, h, i, k].item() for i in range(Q)) for k in range(K)] for h in range(H)] for b in range(B)
    ]
    torch.testing.assert_close(sums["columns"], torch.tensor(col, dtype=torch.float64))
    torch.testing.assert_close(
        sums["diagonal"],
        torch.tensor(
            [[[p[b, h, i, q_start + i].item() for i in range(Q)] for h in range(H)] for b in range(B)],
            dtype=torch.float64,
        ),
    )
    # mass above the diagonal (a non-causal block), in one head of one window: upper_mass names that head
    leak = p.clone()
    leak[1, 2, 0, q_start + 1] = 0.25
    torch.testing.assert_close(
        patterns.pattern_block_sums(leak, q_start, delta)[0]["upper_mass"],
        torch.tensor([0.0, 0.0, 0.25], dtype=torch.float64),
    )
    for b, i, t in cells:
        for h in range(H):
            assert bool(hs[b, h, i]) == (t >= 1 and p[b, h, i, 0].item() >= 1 - delta)
            assert bool(hd[b, h, i]) == (t >= 1 and p[b, h, i, t].item() >= 1 - delta)

    out = torch.rand(L, B, H, Q, generator=g, dtype=torch.float64)
    vn = torch.rand(L, B, H, K, generator=g, dtype=torch.float64) + 0.3
    sink = torch.rand(L, B, H, Q, generator=g) > 0.5
    got = switch.switch_block_sums(out, vn, sink, q_start, tau)

    def off(layer, b, h, i):
        t = q_start + i
        return out[layer, b, h, i].item() <= tau * vn[layer, b, h, : t + 1].mean().item()

    def count(rule):
        return torch.tensor([[sum(rule(layer, b, h, i) for b, i, t in later) for h in range(H)] for layer in range(L)],
                            dtype=torch.float64)  # fmt: skip

    s = lambda layer, b, h, i: bool(sink[layer, b, h, i])  # noqa: E731
    torch.testing.assert_close(got["n_off_sink"], count(lambda *c: off(*c) and s(*c)))
    torch.testing.assert_close(got["n_off_nosink"], count(lambda *c: off(*c) and not s(*c)))
    torch.testing.assert_close(got["n_on_sink"], count(lambda *c: not off(*c) and s(*c)))
    torch.testing.assert_close(got["n_on_nosink"], count(lambda *c: not off(*c) and not s(*c)))
    torch.testing.assert_close(
        got["ahon"],
        torch.tensor(
            [[sum(out[layer, b, h, i].item() for b, i, _ in cells) for h in range(H)] for layer in range(L)],
            dtype=torch.float64,
        ),  # fmt: skip
    )

    scores = torch.rand(L, B, H, generator=g)  # windows on axis 1 (dim=1) here
    eps = torch.tensor([0.2, 0.5])
    for dim in (1, -2):
        got_counts = patterns.exceed_counts(scores, eps, dim=dim)
        want_counts = [[[sum(scores[layer, w, h].item() > e for w in range(B)) for h in range(H)] for layer in range(L)]
                       for e in (0.2, 0.5)]  # fmt: skip
        torch.testing.assert_close(got_counts, torch.tensor(want_counts, dtype=torch.float64))
