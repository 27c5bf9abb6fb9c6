"""Issue 36's `reproduce` claims (`reproduction.experiment_claims`) on constructed numbers: each reaches supported,
a weaker verdict and not measurable (too few units, or an effect that does not exist), and reads what its docs say
(the sink against the control token, heads and layers, the cells where the assumptions hold, decided draws only)."""

import numpy as np
import pandas as pd

from sinkscope.reproduction import verdicts as v
from sinkscope.reproduction.claim_texts import CLAIMS, with_claim_text
from sinkscope.reproduction.experiment_claims import (
    THRESHOLDS,
    assumptions_verdict,
    cost_boundary_verdict,
    dense_causal_verdict,
    prevalence_verdict,
    sink_in_use_verdict,
)

M = "m"
S, P, N, NM = v.SUPPORTED, v.PARTLY, v.NOT_SUPPORTED, v.NOT_MEASURABLE


def losses(W=10, full=3.0, recent=6.0, sink=3.5, control=5.9):
    noise = np.random.default_rng(0).normal(0, 0.05, size=W)
    return {name: value + noise for name, value in
            (("full", full), ("recent", recent), ("sink", sink), ("control", control))}  # fmt: skip


def test_sink_in_use_reads_the_sink_against_the_control_token():
    supported = sink_in_use_verdict(M, losses())
    assert supported.verdict == S and supported.interval["effect"] == "recovered_share"  # the share the rules read
    assert abs(supported.interval["estimate"] - 2.5 / 3.0) < 1e-9 and supported.interval["over"] == "windows"
    assert abs(supported.evidence["delta_sink_kept"] - 2.5) < 1e-9
    # the control token restores as much as BOS: the sink is not special, only one more key
    assert sink_in_use_verdict(M, losses(control=3.5)).verdict == P
    assert sink_in_use_verdict(M, losses(sink=5.8)).verdict == N
    free = sink_in_use_verdict(M, losses(recent=3.0))  # eviction costs nothing: no share to recover
    assert free.verdict == NM and "recovered_share" in free.reason
    few = sink_in_use_verdict(M, losses(W=4))
    assert few.verdict == NM and few.reason.startswith("too few windows: 4")


def test_sink_in_use_interval_is_a_bootstrap_over_windows():
    """The effect's 95 % interval resamples windows: its width is close to the normal one, 2 · 1.96 · sd / √W (the
    eviction cost recent − full is 3 in every window here, so the share is the mean of (recent − sink) / 3)."""
    data = losses(W=40)
    data["sink"] = data["sink"] + np.random.default_rng(5).normal(0, 0.3, size=40)
    interval = sink_in_use_verdict(M, data).interval
    per_window = (data["recent"] - data["sink"]) / 3.0
    normal = 2 * 1.96 * per_window.std(ddof=1) / np.sqrt(40)
    assert interval["low"] < per_window.mean() < interval["high"] and interval["n"] == 40
    assert 0.7 < (interval["high"] - interval["low"]) / normal < 1.3


def cosines(rise_heads, rise_layers, W=8):
    """Per-window cosines: λ = 0 at 0.5, λ = 1 at 0.5 + rise (per head (L, H), per layer (L,)), small noise."""
    rng = np.random.default_rng(1)
    rows = []
    L, H = rise_heads.shape
    for w in range(W):
        for layer in range(L):
            for head in [*range(H), -1]:
                rise = rise_layers[layer] if head < 0 else rise_heads[layer, head]
                rows += [{"window": w, "layer": layer, "head": head, "lam": 0.0, "cos": 0.5},
                         {"window": w, "layer": layer, "head": head, "lam": 1.0,
                          "cos": 0.5 + rise + rng.normal(0, 1e-5)}]  # fmt: skip
    return pd.DataFrame(rows)


def test_dense_causal_needs_heads_and_layers_to_smooth_more():
    L, H = 3, 8
    up, down = np.full((L, H), 0.01), np.full((L, H), -0.01)
    assert dense_causal_verdict(M, cosines(up, np.full(L, 0.01))).verdict == S
    # every head smooths more, but no whole layer does: the layers' share decides the step down
    assert dense_causal_verdict(M, cosines(up, np.full(L, -0.01))).verdict == P
    assert dense_causal_verdict(M, cosines(down, np.full(L, -0.01))).verdict == N
    mixed = up.copy()
    mixed[:, :3] = -0.01  # 15 of 24 heads
    record = dense_causal_verdict(M, cosines(mixed, np.full(L, 0.01)))
    assert record.verdict == P and record.interval["effect"] == "best_share_smoothing"  # partly reads the larger
    assert record.interval["estimate"] == 1.0 and abs(record.interval["primary"]["estimate"] - 15 / 24) < 1e-9
    few = dense_causal_verdict(M, cosines(np.full((1, 8), 0.01), np.full(1, 0.01)))
    assert few.verdict == NM and few.reason.startswith("too few heads: 8")


SCORES = {"sink": (0.8, 0.05), "diagonal": (0.05, 0.8), "mixed": (0.1, 0.1), "both": (0.45, 0.45)}  # (A[t,0], A[t,t])


def classes(per_window, W=10):
    """(window, layer, head, sink_score, diag_score, class) rows: each window holds the heads of `per_window` (a
    list of names of `SCORES`: a sink, a diagonal, neither, or both scores above ε = 0.3)."""
    return pd.DataFrame([{"window": w, "layer": 0, "head": h, "sink_score": SCORES[name][0],
                          "diag_score": SCORES[name][1], "class": name}
                         for w in range(W) for h, name in enumerate(per_window)])  # fmt: skip


def test_prevalence_compares_sink_and_diagonal_shares():
    record = prevalence_verdict(M, classes(["sink"] * 7 + ["diagonal"] + ["mixed"] * 2))
    assert record.verdict == S and abs(record.interval["estimate"] - 0.6) < 1e-9
    assert prevalence_verdict(M, classes(["sink"] * 5 + ["diagonal"] * 3 + ["mixed"] * 2)).verdict == P  # ratio 5/3
    assert prevalence_verdict(M, classes(["sink"] + ["diagonal"] * 5 + ["mixed"] * 4)).verdict == N
    assert prevalence_verdict(M, classes(["mixed"] * 10)).verdict == NM  # neither class: nothing to compare
    few = prevalence_verdict(M, classes(["sink"] * 10, W=4))
    assert few.verdict == NM and few.reason.startswith("too few windows")


def test_prevalence_cuts_are_symmetric_without_precedence():
    """Six heads above ε = 0.3 on both scores, two sinks, two diagonals: a sink-first precedence would count 8
    sinks against 2 diagonals (supported); symmetric cuts count the six in neither class, 2 against 2: not
    supported. ε is varied (0.15 and 0.6 on the odds scale) and the other class cuts are recorded as not entering."""
    record = prevalence_verdict(M, classes(["both"] * 6 + ["sink"] * 2 + ["diagonal"] * 2))
    assert record.verdict == N and record.evidence["both_share"] == 0.6
    assert record.evidence["sink_share"] == record.evidence["diagonal_share"] == 0.2
    assert {(r["threshold"], r["scale"]) for r in record.sensitivity if r["verdict"] is not None} >= {
        ("epsilon", 0.5), ("epsilon", 2.0)}
    assert any(r["threshold"] == "class_cuts" and r["not_varied"] for r in record.sensitivity)


def assumption_arrays(independent_share, W=8, T=16, dh=16):
    """One layer, 4 KV heads: in every window the first round(4 · share) heads' T − 1 context values have a flat
    spectrum (independent), the others one singular value at 1e-6 of the largest (dependent)."""
    n, k = T - 1, min(T - 1, dh)
    spectrum = np.ones((W, 1, 4, k))
    spectrum[:, :, round(4 * independent_share):, -1] = 1e-6
    return {"value_sv": spectrum, "heads": np.tile([5.0, 10.0, 10.0], (W, 1, 4, 1)), "rank": np.full((W, 1), n),
            "distance": np.full((W, 1), 0.5), "n_contexts": np.array(n), "width": np.array(32),
            "head_dim": np.array(dh)}  # fmt: skip


def test_switch_assumptions_reads_the_value_space_and_can_fail():
    """The share of (window, layer, KV head) cells with independent context values decides: 1 supported, ½ partly,
    ¼ not supported; more contexts than value dimensions (T − 1 > dh) cannot decide: not measurable."""
    record = assumptions_verdict(M, assumption_arrays(1.0))
    assert record.verdict == S and record.interval["estimate"] == 1.0
    assert record.evidence["input_space_share"] == 1.0 and record.evidence["switch_implies_sink_where_independent"] == 0.5
    assert assumptions_verdict(M, assumption_arrays(0.5)).verdict == P
    assert assumptions_verdict(M, assumption_arrays(0.25)).verdict == N
    wide = assumptions_verdict(M, assumption_arrays(1.0, T=20, dh=16))
    assert wide.verdict == NM and "dimension count" in wide.reason
    few = assumptions_verdict(M, assumption_arrays(1.0, W=4))
    assert few.verdict == NM and few.reason.startswith("too few windows")


def boundary(agree_share, n=24, undecided=10, vocabulary_match=1.0):
    rows = []
    for i in range(n):
        cell = i % 3
        rows.append({"T": 4 + 4 * cell, "d": 16, "rank": 2 + cell, "seed": i // 3, "cheaper_predicted": "diagonal",
                     "agree": i < round(agree_share * n)})  # fmt: skip
    rows += [{"T": 4, "d": 16, "rank": 4, "seed": s, "cheaper_predicted": "undecided", "agree": False}
             for s in range(undecided)]  # fmt: skip
    vocabulary = pd.DataFrame({"cheaper_closed": ["sink"] * 10,
                               "cheaper_exact": ["sink"] * round(10 * vocabulary_match) +
                               ["tie"] * (10 - round(10 * vocabulary_match))})  # fmt: skip
    return vocabulary, pd.DataFrame(rows)


def test_cost_boundary_counts_decided_draws_against_the_exact_winner():
    record = cost_boundary_verdict(*boundary(1.0))
    assert record.verdict == S and record.interval["n"] == 24 and "within strata" in record.interval["over"]
    assert record.evidence["undecided_draws"] == 10
    assert cost_boundary_verdict(*boundary(0.7)).verdict == P
    assert cost_boundary_verdict(*boundary(0.25)).verdict == N
    assert cost_boundary_verdict(*boundary(1.0, vocabulary_match=0.5)).verdict == P  # the closed forms miss
    few = cost_boundary_verdict(*boundary(1.0, n=9))
    assert few.verdict == NM and few.reason.startswith("too few random embedding draws: 9")


def test_every_new_claim_has_its_words_and_its_thresholds_vary():
    for claim in THRESHOLDS:
        assert claim in CLAIMS
    record = with_claim_text(sink_in_use_verdict(M, losses()).to_dict())
    assert record["paper_claim"] == CLAIMS["sink_in_use"].paper_claim and record["table"] == "eviction"
    records = sink_in_use_verdict(M, losses()).sensitivity
    assert {r["threshold"] for r in records if r["verdict"] is not None} == set(THRESHOLDS["sink_in_use"])
    assert {r["threshold"] for r in records if r["verdict"] is None} == {"T", "recent_window"}  # recorded, with why


def test_sink_in_use_pairs_each_window_s_losses():
    """The windows' losses are paired: the interval is that of the per-window differences recent − sink, which vary
    here (2.5 ± 2) although each loss series alone, sorted, would pair into a constant 2.5 (the mutant that sorted
    each series independently gave a zero-width interval). The effect is the ratio of means R = mean(recent − sink)
    / mean(recent − full) = 2.5 / 3; its normal width by the delta method, 2 · 1.96 · sd(A − R·B) / (mean(B) √W)
    with A = 2.5 + 2s and B = 3 + s per window, A − R·B = (7/6) s."""
    spread = np.linspace(-1, 1, 12)
    data = {"full": np.full(12, 3.0), "recent": 6.0 + spread, "sink": 3.5 - spread, "control": 5.9 + spread}
    interval = sink_in_use_verdict(M, data).interval
    normal = 2 * 1.96 * (7 / 6) * spread.std(ddof=1) / (3.0 * np.sqrt(12))
    assert abs(interval["estimate"] - 2.5 / 3) < 1e-9 and interval["low"] < 2.5 / 3 < interval["high"]
    assert 0.7 < (interval["high"] - interval["low"]) / normal < 1.3
