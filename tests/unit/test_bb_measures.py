"""The lab's measures (its own and `sinkscope.functional`' with the non-trigger query mask) on hand-made tensors,
against brute-force loops and scipy."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import torch
from scipy import stats

from sinkscope.functional.patterns import diag_score, entropy_score, prev_score, sink_score
from sinkscope.functional.switch import value_drain
from sinkscope.synthetic.bigram_backcopy import GBBConfig, GBBTask
from sinkscope.synthetic.measures import (
    copy_accuracy,
    copy_attention,
    excess_loss,
    pattern_margins,
    qk_norms,
    switch_off_frac,
)
from sinkscope.synthetic.summary import cost_predictions, row_pattern


def pattern_masses(probs, batch):
    """The masses `evaluation.evaluate` reports: stats' scores over non-trigger queries, copy attention."""
    plain = batch.is_plain
    return {"bos_attn": sink_score(probs, plain), "diag_attn": diag_score(probs, plain),
            "prev_attn": prev_score(probs, plain, offset=batch.copy_offset), "copy_attn": copy_attention(probs, batch)}


def row_entropy(probs, mask):
    """The entropy `evaluation.evaluate` reports: rows renormalised (sink logit, ReLU), then stats' score."""
    return entropy_score(probs / probs.sum(-1, keepdim=True).clamp_min(1e-30), mask)


def classify_pattern(bos, diag, prev, row_mass, entropy, gate=math.nan):
    return row_pattern(SimpleNamespace(bos_attn=bos, diag_attn=diag, prev_attn=prev, row_mass=row_mass,
                                       entropy=entropy, gate_plain=gate))


def small_batch():
    return GBBTask(GBBConfig(vocab_size=8, n_triggers=2, length=20)).sample(6, torch.Generator().manual_seed(0))


def test_pattern_masses_of_pure_patterns() -> None:
    batch = small_batch()
    b, t = batch.inputs.shape
    sink = torch.zeros(b, 1, t, t)
    sink[..., 0] = 1.0
    diag = torch.eye(t).expand(b, 1, t, t)
    copy = torch.zeros(b, 1, t, t)
    for i in range(b):
        for p in range(t):
            copy[i, 0, p, batch.copy_key[i, p] if batch.is_copy[i, p] else p] = 1.0
    m = pattern_masses(torch.cat([sink, diag, copy], dim=1), batch)  # three heads
    torch.testing.assert_close(m["bos_attn"], torch.tensor([1.0, 0.0, 0.0]))
    torch.testing.assert_close(m["diag_attn"], torch.tensor([0.0, 1.0, 1.0]))
    assert m["copy_attn"][2] == 1.0 and m["copy_attn"][0] < 1.0


def test_pattern_masses_match_loop_on_random_rows() -> None:
    batch = small_batch()
    b, t = batch.inputs.shape
    probs = torch.softmax(torch.randn(b, 2, t, t).masked_fill(torch.ones(t, t).triu(1).bool(), -math.inf), -1)
    m = pattern_masses(probs, batch)
    for h in range(2):
        prev = [probs[i, h, p, p - 1] for i in range(b) for p in range(1, t) if batch.is_plain[i, p]]
        assert abs(float(m["prev_attn"][h]) - float(np.mean(prev))) < 1e-6  # k = 1
        bos = [probs[i, h, p, 0] for i in range(b) for p in range(t) if batch.is_plain[i, p]]
        src = [probs[i, h, p, batch.copy_key[i, p]] for i in range(b) for p in range(t) if batch.is_copy[i, p]]
        assert abs(float(m["bos_attn"][h]) - float(np.mean(bos))) < 1e-6
        assert abs(float(m["copy_attn"][h]) - float(np.mean(src))) < 1e-6


def test_margins_are_logit_gaps_for_softmax() -> None:
    batch = small_batch()
    b, t = batch.inputs.shape
    logits = torch.full((b, 1, t, t), 0.0)
    logits[..., 0] = 3.0  # every query: BOS logit 3, every other visible logit 0
    probs = torch.softmax(logits.masked_fill(torch.ones(t, t).triu(1).bool(), -math.inf), -1)
    margins = pattern_margins(probs, batch)
    assert abs(float(margins["sink_margin"][0]) - 3.0) < 1e-4
    assert abs(float(margins["diag_margin"][0]) - -3.0) < 1e-4


def test_excess_loss_is_kl_and_vanishes_at_the_oracle() -> None:
    batch = small_batch()
    mask = torch.ones_like(batch.is_copy)
    assert abs(excess_loss(batch.oracle.clamp_min(1e-12).log(), batch.oracle, mask)) < 1e-6
    logits = torch.randn(batch.oracle.shape, dtype=torch.float64)
    q = torch.softmax(logits, -1).numpy()
    kl = [stats.entropy(batch.oracle[i, p].numpy(), q[i, p]) for i in range(6) for p in range(batch.oracle.shape[1])]
    assert abs(excess_loss(logits, batch.oracle, mask) - float(np.mean(kl))) < 1e-9


def test_copy_accuracy_counts_argmax_on_source() -> None:
    batch = small_batch()
    logits = torch.nn.functional.one_hot(batch.targets, 8).double()  # p_copy = 1: target = source at copies
    assert copy_accuracy(logits, batch) == 1.0
    assert copy_accuracy(-logits, batch) == 0.0


def test_value_drain_and_qk_norms_by_loop() -> None:
    values = torch.rand(3, 2, 5, 4)
    drain = value_drain(values.norm(dim=-1)).mean(0)  # as evaluation.evaluate: per window, then the mean
    loop = [np.mean([values[b, h, 0].norm() / values[b, h, 1:].norm(dim=-1).mean() for b in range(3)]) for h in range(2)]
    torch.testing.assert_close(drain, torch.tensor(loop, dtype=torch.float32))
    w = torch.randn(2, 6, 6)
    nuc, fro = qk_norms(w)
    for h in range(2):
        sv = np.linalg.svd(w[h].numpy(), compute_uv=False)
        assert abs(float(nuc[h]) - sv.sum()) < 1e-4 and abs(float(fro[h]) - np.sqrt((sv**2).sum())) < 1e-4


def test_pattern_classes_and_cost_ratio() -> None:
    assert classify_pattern(0.9, 0.05, 0.0, 1.0, 0.2) == "sink"
    assert classify_pattern(0.1, 0.8, 0.1, 1.0, 0.3) == "diagonal"
    assert classify_pattern(0.1, 0.1, 0.7, 1.0, 0.3) == "previous"
    assert classify_pattern(0.3, 0.3, 0.3, 1.0, 0.6) == "mixed"
    assert classify_pattern(0.13, 0.12, 0.1, 1.0, 0.98) == "dense"
    assert classify_pattern(0.1, 0.1, 0.0, 0.2, 0.9) == "null"
    pred = cost_predictions(64, 3)
    n, v = 61, 64  # SPEC §7 closed forms, written out
    assert abs(pred["pred_sink_nuclear_per_kappa"] - math.sqrt(n * v / (v + 1))) < 1e-9
    assert abs(pred["pred_diag_nuclear_per_kappa"] - (n - 1 + math.sqrt(1 - n / (v + 1)))) < 1e-9


def test_row_entropy_of_one_hot_uniform_and_loop() -> None:
    batch = small_batch()
    b, t = batch.inputs.shape
    causal = torch.ones(t, t).tril()
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(b, 1, t, t)
    one_hot = torch.eye(t).expand(b, 1, t, t)
    probs = torch.softmax(torch.randn(b, 1, t, t).masked_fill(causal == 0, -math.inf), -1) * 0.5  # rows sum 0.5
    ent = row_entropy(torch.cat([uniform, one_hot, probs], dim=1), batch.is_plain)
    assert abs(float(ent[0]) - 1.0) < 1e-5 and abs(float(ent[1])) < 1e-5
    loop = [stats.entropy(probs[i, 0, p, : p + 1].numpy()) / math.log(p + 1)
            for i in range(b) for p in range(1, t) if batch.is_plain[i, p]]
    assert abs(float(ent[2]) - float(np.mean(loop))) < 1e-5


def test_without_bos_position_zero_is_no_query() -> None:
    """Hand-built attention: position 0 attends to itself (BOS and diagonal at once), every later query spreads
    uniformly; the masses must be the mean over non-trigger queries at positions ≥ 1 only, by a loop."""
    batch = GBBTask(GBBConfig(vocab_size=8, n_triggers=2, length=20, bos=False)).sample(
        6, torch.Generator().manual_seed(0))
    b, t = batch.inputs.shape
    assert not batch.is_plain[:, 0].any() and batch.is_plain[:, 1:].any()
    causal = torch.ones(t, t).tril()
    uniform = (causal / causal.sum(-1, keepdim=True)).expand(b, 1, t, t)
    m = pattern_masses(uniform, batch)
    queries = [p for i in range(b) for p in range(1, t) if batch.is_plain[i, p]]
    expected = float(np.mean([1 / (p + 1) for p in queries]))  # A[p, 0] = A[p, p] = 1/(p+1)
    assert abs(float(m["bos_attn"][0]) - expected) < 1e-6 and abs(float(m["diag_attn"][0]) - expected) < 1e-6
    assert abs(float(row_entropy(uniform, batch.is_plain)[0]) - 1.0) < 1e-5
    # a head whose only non-uniform row is position 0 is indistinguishable from the uniform one
    changed = uniform.clone()
    changed[:, :, 0, 0] = 1.0
    assert torch.equal(pattern_masses(changed, batch)["bos_attn"], m["bos_attn"])


def test_switch_off_fraction_by_loop() -> None:
    batch = small_batch()
    b, t = batch.inputs.shape
    values = torch.randn(b, 2, t, 4)
    values[:, 0, 0] = 0.0  # head 0: a sink whose value is 0, so every query that sinks is switched off
    sink = torch.zeros(b, 1, t, t)
    sink[..., 0] = 1.0
    causal = torch.ones(t, t).tril()
    probs = torch.cat([sink, torch.softmax(torch.randn(b, 1, t, t).masked_fill(causal == 0, -math.inf), -1)], 1)
    gates = torch.rand(b, 2, t)
    off = switch_off_frac(probs, values, None, batch.is_plain)
    assert float(off[0]) == 1.0
    gated = switch_off_frac(probs, values, gates, batch.is_plain)
    loop = []
    for i in range(b):
        for p in range(t):
            if batch.is_plain[i, p]:
                o = gates[i, 1, p] * (probs[i, 1, p] @ values[i, 1])
                loop.append(float(o.norm() <= 0.1 * values[i, 1, : p + 1].norm(dim=-1).mean()))  # visible keys
    assert abs(float(gated[1]) - np.mean(loop)) < 1e-9


def test_gated_head_is_switched_off() -> None:
    assert classify_pattern(0.3, 0.1, 0.1, 1.0, 0.6, gate=0.01) == "gated"
    assert classify_pattern(0.9, 0.0, 0.0, 1.0, 0.2, gate=0.9) == "sink"
