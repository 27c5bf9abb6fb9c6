"""Draw 51's survivors in `capture/` and `functional/`, each closed as a kind (docs/testing.md, "Mutation tool").

- Device propagation: every capture path and streaming sum runs on `meta` inputs (a tensor made on the CPU, the
  default device, then mixes with meta ones and torch raises, or comes back on the CPU), and on CPU inputs under a
  `meta` default device (a tensor made without `device=` lands on meta and comes back there); the CPU run is also
  checked against float64 eager attention, with B, H, KV, T, D, Dv all distinct and several query blocks.
- The flex path's block masks as CUDA's fused kernels read them (CPU flex_attention applies `mask_mod` densely and
  ignores the block tables, so only the tables themselves show a table built for the wrong batch).
- Every numeric default of a public function of `functional/` and `capture/` against its documented value, at
  inputs where that value decides the result.
- Every bad-input message of `functional/` and of the model-free parts of `capture/`, read whole.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from sinkscope.capture import blocks, flex
from sinkscope.capture import flex_masks as flex_masks_module
from sinkscope.capture.attention import attention_precision
from sinkscope.capture.blocks import blocked_attention, row_attention
from sinkscope.capture.feed import Feed
from sinkscope.capture.flex_masks import additive_parts, flex_masks
from sinkscope.capture.fused import fused_attention
from sinkscope.capture.head_ablation import head_ablation
from sinkscope.capture.learned_sink import learned_sink_attention
from sinkscope.capture.readout import READOUT_FIELDS
from sinkscope.capture.text_maps import MAX_TOKENS, _bos_window, check_length
from sinkscope.errors import SinkscopeError
from sinkscope.functional import patterns, switch
from sinkscope.functional.head_classes import HeadThresholds, classify_head
from sinkscope.functional.learned_sink import hard_learned_sink_frac, learned_sink_block_sums
from sinkscope.functional.patterns import (
    entropy_weights,
    exceed_counts,
    hard_diag_frac,
    hard_sink_frac,
    head_class,
    pattern_block_sums,
    prev_score,
    sink_rate,
)
from sinkscope.functional.query_mask import masked_query_mean
from sinkscope.functional.switch import switch_block_sums, switched_off, visible_value_mean
from sinkscope.functional.switch_routes import RouteInputs, classify
from sinkscope.functional.weights import probe_alignment
from sinkscope.statistics.pattern_scores import PatternScores

B, H, KV, T, D, DV = 2, 6, 3, 7, 4, 5  # all distinct (GQA groups of 2), so no axis can stand in for another
STEP = 3  # query rows per block: blocks start at 0, 3, 6 (the last one a single row)
SCALE, SOFTCAP = 0.7, 2.5


def _inputs(dv: int = DV) -> tuple[torch.Tensor, ...]:
    generator = torch.Generator().manual_seed(51)
    q = torch.randn(B, H, T, D, generator=generator)
    k = torch.randn(B, KV, T, D, generator=generator)
    v = torch.randn(B, KV, T, dv, generator=generator)
    causal = torch.ones(T, T, dtype=torch.bool).tril()  # transformers' masks hold causality themselves
    bias = torch.randn(B, 1, T, T, generator=generator).masked_fill(~causal, torch.finfo(torch.float32).min)
    keep = causal.expand(B, 1, T, T).clone()
    keep[1, :, :, :2] = False  # window 1 left-padded by two tokens ...
    keep[1, :, :2, 0] = True  # ... whose own rows still see key 0 (no empty row)
    sinks = torch.linspace(-1.0, 2.0, H)
    return q, k, v, bias, keep, sinks


def _eager(q, k, v, *, mask=None, softcap=None, sinks=None, window=None) -> dict[str, torch.Tensor]:
    """Float64 eager attention: `A = softmax(S)` over keys j ≤ t (and M's, and t − j < W), S = s q·k (capped,
    plus the bias), a learned sink as one more column dropped after the softmax; output `A V` as (B, T, H, Dv)."""
    group = q.shape[1] // k.shape[1]
    keys, values = (x.double().repeat_interleave(group, 1) for x in (k, v))
    logits = SCALE * q.double() @ keys.transpose(-1, -2)
    if softcap is not None:
        logits = softcap * torch.tanh(logits / softcap)
    visible = torch.ones(T, T, dtype=torch.bool).tril()
    if window is not None:
        visible = visible & ~torch.ones(T, T, dtype=torch.bool).tril(-window)
    if mask is not None and mask.dtype == torch.bool:
        visible = visible & mask
    elif mask is not None:
        logits = logits + mask.double()
    logits = logits.masked_fill(~visible, -torch.inf)
    if sinks is not None:
        logits = torch.cat([logits, sinks.double().view(1, -1, 1, 1).expand(*logits.shape[:3], 1)], -1)
    full = torch.softmax(logits, -1)
    probs = full[..., :T]
    out = probs @ values
    return {"probs": probs, "out": out.transpose(1, 2), "entropy": -torch.special.xlogy(probs, probs).sum(-1),
            "mass": full[..., T] if sinks is not None else None, "out_norms": out.norm(dim=-1)}  # fmt: skip


def _readout_reference(ref: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    probs = ref["probs"]
    prev = torch.zeros(B, H, T, dtype=torch.float64)
    prev[..., 1:] = probs.diagonal(-1, -2, -1)
    weights = torch.tensor([0.0] + [1 / math.log(t + 1) for t in range(1, T)], dtype=torch.float64)
    return {"sink": probs[..., 0], "diag": probs.diagonal(0, -2, -1), "prev": prev, "columns": probs.sum(-2),
            "entropy": (ref["entropy"] * weights).sum(-1), "out_norms": ref["out_norms"]}  # fmt: skip


def _blocks_run(q, k, v, mask, softcap, sinks=None):
    """A path's output and its blocks reassembled: probs (B, H, T, T), entropy (B, H, T), block outputs."""
    seen: dict[str, list] = {"probs": [], "entropy": [], "block": [], "mass": [], "starts": []}

    def observe(start, probs, entropy, block, mass=None):
        seen["starts"].append(start)
        seen["probs"].append(torch.nn.functional.pad(probs, (0, T - probs.shape[-1])))
        seen["entropy"].append(entropy)
        seen["block"].append(block)
        if mass is not None:
            seen["mass"].append(mass)

    if sinks is None:
        out = blocked_attention(q, k, v, mask, SCALE, softcap, observe)
    else:
        out = learned_sink_attention(q, k, v, mask, SCALE, sinks, STEP, observe)
    got = {name: torch.cat(seen[name], 2) for name in ("probs", "entropy", "block")}
    got["out"] = out
    if sinks is not None:
        got["mass"] = torch.cat(seen["mass"], 2)
    got["starts"] = seen["starts"]
    return got


PATHS = ("blocks plain", "blocks softcap+padding", "blocks additive", "learned sink", "rows", "fused")
# CUDA's path, run eagerly on the CPU (flex_attention refuses meta inputs: these run under a meta default only).
FLEX = ("flex window", "flex softcap+padding+sinks", "flex additive")


def _form(path: str, bias, keep, sinks) -> dict:
    return {"blocks plain": {}, "blocks softcap+padding": {"mask": keep, "softcap": SOFTCAP},
            "blocks additive": {"mask": bias}, "learned sink": {"sinks": sinks}, "flex window": {"window": 3},
            "flex softcap+padding+sinks": {"mask": keep, "softcap": SOFTCAP, "sinks": sinks},
            "flex additive": {"bias": bias}}.get(path, {})  # fmt: skip


def _run_path(path: str, q, k, v, bias, keep, sinks) -> dict[str, torch.Tensor]:
    """What the path returns (its output and readout, or its output and blocks reassembled), by name."""
    if path in FLEX:
        form = _form(path, bias, keep, sinks)
        out, packed = flex.flex_parts(q, k, v, SCALE, form.pop("window", None), **form)
        readout = packed.unpack(packed.parts)
        return {"out": out, **{name: getattr(readout, name) for name in READOUT_FIELDS}}
    if path in ("rows", "fused"):
        value = v[..., :D] if path == "fused" else v  # the fused kernel needs equal q and v head sizes
        out, readout = (row_attention if path == "rows" else fused_attention)(q, k, value, SCALE)
        return {"out": out, **{name: getattr(readout, name) for name in ("sink", "diag", "prev", "columns", "entropy",
                                                                         "out_norms")}}  # fmt: skip
    form = _form(path, bias, keep, sinks)
    got = _blocks_run(q, k, v, form.get("mask"), form.get("softcap"), form.get("sinks"))
    assert got.pop("starts") == [0, 3, 6]  # three blocks: B·H·T·3 logits each under the patched budget
    return got


def _reference(path: str, q, k, v, bias, keep, sinks) -> dict[str, torch.Tensor]:
    """The float64 eager numbers of the same names."""
    if path in FLEX:
        form = _form(path, bias, keep, sinks)
        ref = _eager(q, k, v, mask=form.get("mask", form.get("bias")), softcap=form.get("softcap"),
                     sinks=form.get("sinks"), window=form.get("window"))  # fmt: skip
        return {"out": ref["out"], **_readout_reference(ref)}
    if path in ("rows", "fused"):
        ref = _eager(q, k, v[..., :D] if path == "fused" else v)
        return {"out": ref["out"], **_readout_reference(ref)}
    ref = _eager(q, k, v, **_form(path, bias, keep, sinks))
    ref["block"] = ref["out"].transpose(1, 2)
    return ref


@pytest.fixture(autouse=True)
def fresh_caches():
    """The per-shape caches of `capture/` and `functional/` emptied, so each test makes its tensors anew (a tensor
    cached by an earlier CPU call would hide one made on the default device)."""
    cached = (flex._kernels, flex._row_constants, flex._kv_heads, flex._row_keys, flex._x_column,
              flex_masks_module._block_masks, flex_masks_module._outside_window, patterns.count_down,
              patterns.later_queries, patterns._entry_weights, switch._counts)  # fmt: skip
    for function in cached:
        function.cache_clear()
    flex_masks_module._last_tensor_masks = flex_masks_module._last_additive = None
    yield


@pytest.fixture
def small_blocks(monkeypatch):
    """A block budget of `STEP` query rows on every device (B·H·T·STEP logits), so each path runs in blocks."""
    monkeypatch.setattr(blocks, "BLOCK_ELEMENTS", B * H * T * STEP)
    monkeypatch.setattr(blocks, "DEVICE_BLOCK_ELEMENTS", B * H * T * STEP)


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("path", PATHS + FLEX)
def test_every_capture_path_follows_its_inputs_device_and_equals_float64_eager(path, small_blocks):
    """On CPU inputs under a meta default device, every tensor a path makes must follow `query.device` (one made
    without it would land on meta and the output with it); the numbers equal float64 eager attention. On meta
    inputs, one made on the CPU would meet meta tensors (torch raises) or come back on the CPU."""
    inputs = _inputs()
    with torch.device("meta"):
        got = _run_path(path, *inputs)
    ref = _reference(path, *inputs)
    for name, tensor in got.items():
        assert tensor.device.type == "cpu", name
        torch.testing.assert_close(tensor.double(), ref[name], rtol=1e-5, atol=1e-6, msg=f"{path}: {name}")
    if path in FLEX:
        return
    got_meta = _run_path(path, *(x.to("meta") for x in inputs))
    for name, tensor in got_meta.items():
        assert (tensor.device.type, tensor.shape) == ("meta", got[name].shape), name
        assert tensor.dtype == got[name].dtype, name


def _flex_helpers(device: str) -> dict[str, torch.Tensor]:
    weights, factors = flex._row_constants(4, device)
    return {"weights": weights, "factors": factors, "kv_heads": flex._kv_heads(6, 2, device),
            "row_keys": flex._row_keys(3, False, device), "centred_row_keys": flex._row_keys(3, True, device),
            "x_column": flex._x_column(device), "outside_window": flex_masks_module._outside_window(4, 2, device)}  # fmt: skip


def test_the_flex_paths_per_shape_tensors_are_made_on_the_device_asked_for():
    """flex_attention refuses meta inputs, so the flex path's per-shape tensors (cached per device) are asked for
    directly: on "meta" they are meta; on "cpu" under a meta default device they are CPU tensors of the values
    worked out by hand (T = 4 or 3, H = 6 in groups of 2, window 2)."""
    on_meta = _flex_helpers("meta")
    with torch.device("meta"):
        on_cpu = _flex_helpers("cpu")
    factors = torch.ones(4, 3)
    factors[0, 2] = 0.0  # row 0 has no previous key
    outside = torch.zeros(4, 5, dtype=torch.bool)
    outside[2:, 0] = True  # key 0 is outside the window of queries t ≥ 2
    expected = {
        "weights": torch.tensor(
            [0.0, 1 / math.log(2), 1 / math.log(3), 1 / math.log(4)], dtype=torch.float64
        ),
        "factors": factors,
        "kv_heads": torch.tensor([0, 0, 1, 1, 2, 2]),
        "row_keys": torch.tensor([0, 0, 0, 0, 1, 0, 0, 2, 1]),  # k_0, k_t, k_{t-1} (k_0 at t = 0)
        "centred_row_keys": torch.tensor(
            [0, 0, 0, 6, 3, 0, 1, 0, 6, 4, 0, 2, 1, 6, 5]
        ),  # then k̄ (row 2T), ō_t
        "x_column": torch.tensor([False, False, False, True, False]),
        "outside_window": outside,
    }
    for name, value in expected.items():
        assert on_meta[name].device.type == "meta", name
        assert on_cpu[name].device.type == "cpu", name
        torch.testing.assert_close(on_cpu[name], value, msg=name)


def _streaming_inputs(device: str) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(5)
    mass = torch.rand(B, H, 3, generator=generator, dtype=torch.float64)
    named = {"mass": mass, "probs": torch.rand(B, H, 3, T, generator=generator),
             "value_norms": torch.rand(B, H, T, generator=generator), "hard": mass > 0.5, "bias": torch.zeros(B, 1, T, T)}  # fmt: skip
    return {name: x.to(device) for name, x in named.items()}


def _streaming_sums(mass, probs, value_norms, hard, bias) -> dict[str, torch.Tensor]:
    """The streaming sums of `functional/` and the flex path's mask tensors over one block of queries 2..4."""
    start, device = 2, mass.device
    sums, silent = learned_sink_block_sums(mass, mass.float(), value_norms, hard, ~hard, start, 0.3, 0.9)
    pattern, hard_sink, hard_diag = pattern_block_sums(probs, start, 0.1)
    switch = switch_block_sums(mass.float(), value_norms, hard, start, 0.9)
    labels = classify(RouteInputs(probs, value_norms, mass.float(), start), 0.9, 0.1)
    full, entries = additive_parts(bias, B, H)
    window_hidden = flex_masks(T, device, 3, None, B)[2]
    named = {f"learned {k}": v for k, v in sums.items()} | {f"pattern {k}": v for k, v in pattern.items()}
    named |= {f"switch {k}": v for k, v in switch.items()}
    return named | {"silent": silent, "hard_sink": hard_sink, "hard_diag": hard_diag, "labels": labels,
                    "entries": entries, "window_hidden": window_hidden, **dict(zip(("bias", "shift", "seen"), full))}  # fmt: skip


def test_the_streaming_sums_follow_their_inputs_device():
    """As above for the functions the capture feeds each block to: under a meta default device they return CPU
    tensors equal to the same call without the context; on meta inputs meta tensors of the same shapes."""
    plain = _streaming_sums(**_streaming_inputs("cpu"))
    inputs = _streaming_inputs("cpu")
    with torch.device("meta"):
        under_meta = _streaming_sums(**inputs)
    on_meta = _streaming_sums(**_streaming_inputs("meta"))
    for name, tensor in plain.items():
        assert under_meta[name].device.type == "cpu", name
        torch.testing.assert_close(under_meta[name], tensor, msg=name)
        assert (on_meta[name].device.type, on_meta[name].shape, on_meta[name].dtype) == ("meta", tensor.shape,
                                                                                         tensor.dtype), name  # fmt: skip


def test_learned_sink_block_sums_by_hand_with_distinct_batch_heads_and_queries():
    """B = 2, H = 3, Q = 4 queries 0..3 (query 0 never counts): hard = m ≥ 0.7, off = ||o|| ≤ τ mean_{j≤t} ||v_j||
    (τ = 1, ||v|| = 1 everywhere: off ⇔ ||o|| ≤ 1), counted per head by a Python loop."""
    mass = torch.tensor([[[0.9, 0.9, 0.1, 0.8], [0.2, 0.7, 0.75, 0.1], [0.95, 0.0, 0.9, 0.9]],
                         [[0.8, 0.1, 0.9, 0.9], [0.9, 0.9, 0.9, 0.9], [0.0, 0.1, 0.2, 0.3]]], dtype=torch.float64)  # fmt: skip
    out_norms = torch.tensor([[[0.5, 2.0, 0.5, 0.5], [0.5, 0.5, 2.0, 0.5], [2.0, 0.5, 0.5, 0.5]],
                              [[0.5, 0.5, 0.5, 2.0], [2.0, 0.5, 0.5, 0.5], [0.5, 0.5, 2.0, 0.5]]])  # fmt: skip
    hard_sink = torch.zeros(2, 3, 4, dtype=torch.bool)
    hard_sink[0, 1, 3] = hard_sink[1, 2, 1] = True
    hard_diag = torch.zeros(2, 3, 4, dtype=torch.bool)
    hard_diag[0, 1, 1:] = hard_diag[1, 2, 2:] = True
    sums, silent = learned_sink_block_sums(
        mass, out_norms, torch.ones(2, 3, 4), hard_sink, hard_diag, 0, 0.3, 1.0
    )
    expect = {key: [0.0] * 3 for key in ("hard", "n_off", "n_off_learned", "n_off_any_sink")}
    every = [0.0, 0.0]
    for b in range(2):
        for t in range(1, 4):
            all_heads = True
            for h in range(3):
                hard, off = mass[b, h, t] >= 0.7, out_norms[b, h, t] <= 1.0
                expect["hard"][h] += hard
                expect["n_off"][h] += off
                expect["n_off_learned"][h] += off and hard
                expect["n_off_any_sink"][h] += off and (hard or hard_sink[b, h, t])
                all_heads &= bool(hard or hard_sink[b, h, t] or hard_diag[b, h, t])
            every[b] += all_heads
    for key, values in expect.items():
        assert sums[key].tolist() == values, key
    assert sums["mass"].tolist() == pytest.approx(mass.sum((0, 2)).tolist())
    assert silent.tolist() == every == [1.0, 2.0]


def _block_visibility(block_mask, batch: int, size: int) -> torch.Tensor:
    """Which (query, key) pairs CUDA's fused kernel lets through for window `batch`: every pair of a full block,
    `mask_mod` in a partial block, none elsewhere (the tables' batch axis broadcast when it is 1)."""
    from torch.nn.attention.flex_attention import BlockMask

    b = batch if block_mask.kv_num_blocks.shape[0] > 1 else 0
    tables = [(block_mask.kv_num_blocks, block_mask.kv_indices), (block_mask.full_kv_num_blocks,
                                                                  block_mask.full_kv_indices)]  # fmt: skip
    partial, full = (BlockMask.from_kv_blocks(n[b : b + 1], i[b : b + 1], BLOCK_SIZE=block_mask.BLOCK_SIZE,
                                              seq_lengths=(size, size)).to_dense()[0, 0] for n, i in tables)  # fmt: skip
    rows, cols = torch.arange(size)[:, None], torch.arange(size)[None, :]
    inside = block_mask.mask_mod(torch.tensor(batch), torch.tensor(0), rows, cols)
    expand = lambda x: x.repeat_interleave(128, 0).repeat_interleave(128, 1)[:size, :size].bool()  # noqa: E731
    return expand(full) | (expand(partial) & inside)


def test_flex_block_masks_hold_each_windows_own_blocks():
    """T = 256 (two 128-row blocks). Window 0 is unpadded, window 1 left-padded by 5 tokens: for window 0 the
    block (queries 128.., keys ..127) is full, for window 1 partial; a table built for window 0 alone would let
    window 1's later queries read its padding on CUDA. Call 1's and call 2's (transposed) block masks must give
    exactly `M[b] ∧ j ≤ t` and its transpose for every window."""
    size, pad = 256, 5
    keep = torch.ones(2, 1, size, size, dtype=torch.bool)
    keep[1, :, :, :pad] = False
    keep[1, :, :pad, 0] = True
    call_1, call_2, hidden = flex_masks(size, torch.device("cpu"), None, keep, 2)
    for b in range(2):
        visible = keep[b, 0] & torch.ones(size, size, dtype=torch.bool).tril()
        assert torch.equal(_block_visibility(call_1, b, size), visible), b
        assert torch.equal(_block_visibility(call_2, b, size), visible.T), b
        assert torch.equal(hidden[b, 0, :, 0], ~keep[b, 0, :, 0]), b


# Each default against its documented value, at an input where that value decides: (name, call with the
# default, call with the documented value, the hand result).
_ROWS = torch.tensor(
    [[1.0, 0, 0, 0], [0.9, 0.1, 0, 0], [0.89, 0.01, 0.1, 0], [0.2, 0.2, 0.2, 0.4]], dtype=torch.float64
)
# _ROWS: A[t,0] for t ≥ 1 is 0.9 (≥ 1 − 0.1), 0.89, 0.2 → 1/3; A[t,t−1] is 0.9, 0.01, 0.2.
# _DIAG: A[t,t] for t ≥ 1 is 0.95, 0.85, 0.9 → 2/3. _MASS: m_t for t ≥ 1 is 0.9, 0.89, 0.95, 0.1 → 2/4.
_DIAG = torch.tensor(
    [[1.0, 0, 0, 0], [0.05, 0.95, 0, 0], [0.05, 0.1, 0.85, 0], [0.02, 0.03, 0.05, 0.9]], dtype=torch.float64
)
_MASS = torch.tensor([0.0, 0.9, 0.89, 0.95, 0.1], dtype=torch.float64)
_SCORES = torch.tensor([0.3, 0.31, 0.29, 0.5])  # as (2, 2): column 0 never above 0.3, column 1 twice
DEFAULTS = [
    (
        "hard_sink_frac delta=0.1",
        lambda: hard_sink_frac(_ROWS),
        lambda: hard_sink_frac(_ROWS, delta=0.1),
        1 / 3,
    ),
    (
        "hard_diag_frac delta=0.1",
        lambda: hard_diag_frac(_DIAG),
        lambda: hard_diag_frac(_DIAG, delta=0.1),
        2 / 3,
    ),
    (
        "hard_learned_sink_frac delta=0.1",
        lambda: hard_learned_sink_frac(_MASS),
        lambda: hard_learned_sink_frac(_MASS, delta=0.1),
        2 / 4,
    ),
    ("sink_rate epsilon=0.3", lambda: sink_rate(_SCORES), lambda: sink_rate(_SCORES, 0.3), 2 / 4),
    (
        "prev_score offset=1",
        lambda: prev_score(_ROWS),
        lambda: prev_score(_ROWS, offset=1),
        (0.9 + 0.01 + 0.2) / 3,
    ),
    (
        "exceed_counts dim=0",
        lambda: exceed_counts(_SCORES.view(2, 2), torch.tensor([0.3]))[0],
        lambda: exceed_counts(_SCORES.view(2, 2), torch.tensor([0.3]), dim=0)[0],
        [0.0, 2.0],
    ),
    (
        "entropy_weights device=cpu",
        lambda: entropy_weights(0, 3),
        lambda: entropy_weights(0, 3, "cpu"),
        [0.0, 1 / math.log(2), 1 / math.log(3)],
    ),
    (
        "switched_off q_start=0",
        lambda: switched_off(torch.tensor([1.0, 1.5]), torch.tensor([2.0, 1.0]), 0.5),
        lambda: switched_off(torch.tensor([1.0, 1.5]), torch.tensor([2.0, 1.0]), 0.5, q_start=0),
        [True, False],
    ),
    (
        "visible_value_mean stop=T",
        lambda: visible_value_mean(torch.tensor([2.0, 1.0, 3.0])),
        lambda: visible_value_mean(torch.tensor([2.0, 1.0, 3.0]), 3),
        [2.0, 1.5, 2.0],
    ),
    (
        "head_class epsilon=0.3 (0.3 is not a sink)",
        lambda: head_class(0.3, 0.0, 0.0, 0.0),
        lambda: head_class(0.3, 0.0, 0.0, 0.0, epsilon=0.3),
        "mixed",
    ),
    (
        "head_class epsilon=0.3 (0.31 is)",
        lambda: head_class(0.31, 0.0, 0.0, 0.0),
        lambda: head_class(0.31, 0.0, 0.0, 0.0, epsilon=0.3),
        "sink",
    ),
    (
        "head_class learned_sink=0",
        lambda: head_class(0.0, 0.0, 0.0, 0.0, epsilon=-1.0),
        lambda: head_class(0.0, 0.0, 0.0, 0.0, epsilon=-1.0, learned_sink=0.0),
        "learned sink",
    ),
    (
        "classify_head row_mass=1, gate=NaN",
        lambda: classify_head(0.0, 0.0, 0.0, 0.0),
        lambda: classify_head(0.0, 0.0, 0.0, 0.0, row_mass=1.0, gate=math.nan),
        "mixed",
    ),
    (
        "classify_head learned_sink=0",
        lambda: classify_head(0.0, 0.0, 0.0, 0.0, thresholds=HeadThresholds(learned_sink=-1.0)),
        lambda: classify_head(
            0.0, 0.0, 0.0, 0.0, thresholds=HeadThresholds(learned_sink=-1.0), learned_sink=0.0
        ),
        "learned sink",
    ),  # fmt: skip
    (
        "HeadThresholds (docs/statistics.md)",
        lambda: HeadThresholds(),
        lambda: HeadThresholds(0.3, 0.5, 0.5, 0.7, 0.5, 0.3, False),
        HeadThresholds(sink=0.3, diagonal=0.5, previous=0.5, dense=0.7, switched_off=0.5, learned_sink=0.3),
    ),
    (
        "classify_head thresholds=HeadThresholds() at each edge",
        lambda: (
            [
                classify_head(*x)
                for x in [
                    (0.3, 0.5, 0.5, 0.7),
                    (0.31, 0, 0, 0),
                    (0, 0.51, 0, 0),
                    (0, 0, 0.51, 0),
                    (0, 0, 0, 0.71),
                ]
            ]
            + [classify_head(0, 0, 0, 0, row_mass=0.49), classify_head(0, 0, 0, 0, gate=0.49)]
        ),
        lambda: ["mixed", "sink", "diagonal", "previous-token", "dense", "null", "gated"],
        ["mixed", "sink", "diagonal", "previous-token", "dense", "null", "gated"],
    ),  # fmt: skip
    (
        "blocks.block_rows elements=BLOCK_ELEMENTS",
        lambda: blocks.block_rows(1, 1, 1 << 10),
        lambda: blocks.block_rows(1, 1, 1 << 10, 1 << 20),
        1 << 10,
    ),
    (
        "blocks.block_rows at 4 MB of float32",
        lambda: blocks.block_rows(2, 8, 4096),
        lambda: (1 << 20) // (2 * 8 * 4096),
        16,
    ),
    ("RouteInputs start=0", lambda: RouteInputs(_ROWS, torch.ones(4), torch.ones(4)).start, lambda: 0, 0),
]


def _plain(value):
    return value.tolist() if isinstance(value, torch.Tensor) else value


def _approx(expected):
    numeric = isinstance(expected, float) or (
        isinstance(expected, list) and all(isinstance(x, float) for x in expected)
    )
    return pytest.approx(expected) if numeric else expected


@pytest.mark.parametrize("name, default, documented, expected", DEFAULTS, ids=[d[0] for d in DEFAULTS])
def test_each_default_is_its_documented_value(name, default, documented, expected):
    got = _plain(default())
    assert got == _plain(documented())
    assert got == _approx(expected)


def test_the_feeds_defaults_are_documented_ones():
    """`Feed(statistics, seq_len)`: one query head per kv head, δ = 0.1, shard (0, 1) (window i is corpus window
    i), float32 in the non-finite message."""
    feed = Feed([PatternScores(1, 2, 4, epsilon=0.3)], seq_len=4)
    assert (feed.group, feed.delta, feed.shard, feed.dtype_name) == (1, 0.1, (0, 1), "float32")


# Every bad-input message of the model-free code, read whole: (the call, the whole message).
_VALUES = torch.zeros(2, 3, 4)
MESSAGES = [
    (
        lambda: probe_alignment(torch.eye(2), torch.ones(2), torch.eye(2), torch.ones(2), "up"),
        "side must be 'left' or 'right', got 'up'",
    ),
    (
        lambda: masked_query_mean(_VALUES, torch.ones(2, 3, dtype=torch.bool)),
        "query mask of shape (2, 3) (torch.bool): expected booleans of shape (2, 4) or (4,) for values of shape "
        "(2, 3, 4)",
    ),
    (
        lambda: masked_query_mean(_VALUES, torch.ones(4)),
        "query mask of shape (4,) (torch.float32): expected booleans of shape (2, 4) or (4,) for values of shape "
        "(2, 3, 4)",
    ),
    (
        lambda: Feed([PatternScores(1, 2, 4, epsilon=0.3)] * 2, seq_len=4),
        "statistics need distinct names, got ['pattern_scores', 'pattern_scores']",
    ),
    (
        lambda: [feed.begin_batch(torch.zeros(1, 4, dtype=torch.long)) for feed in [Feed([], seq_len=4)] * 2],
        "begin_batch called twice without end_batch",
    ),
    (
        lambda: attention_precision("half").__enter__(),
        "attention precision 'half' is not one of exact, model",
    ),
    (
        lambda: head_ablation(None, [(0, 0)], mode="mean").__enter__(),
        "ablation mode 'mean' is not one of zero, bos",
    ),
    (lambda: check_length(1), f"--seq-len 1 must lie in 2..{MAX_TOKENS} (BOS plus at least one token)"),
    (
        lambda: check_length(MAX_TOKENS + 1),
        f"--seq-len {MAX_TOKENS + 1} must lie in 2..{MAX_TOKENS} (BOS plus at least one token)",
    ),
    (
        lambda: _bos_window(None, [], None, 1),
        "the text is empty: pass --text with some words or a --file that holds text",
    ),
    (
        lambda: _bos_window(None, [5] * MAX_TOKENS, None, 1),
        f"the text has more than {MAX_TOKENS} tokens with BOS, the most a page embeds: pass --seq-len N "
        f"(≤ {MAX_TOKENS}) to keep the first N",
    ),
]


@pytest.mark.parametrize("call, message", MESSAGES, ids=[m[1][:40] for m in MESSAGES])
def test_each_bad_input_message_names_the_input_whole(call, message):
    with pytest.raises((SinkscopeError, ValueError), match=f"^{re.escape(message)}$"):
        call()


def test_a_text_of_exactly_max_tokens_with_bos_is_kept():
    """The boundary of the message above: MAX_TOKENS − 1 tokens plus BOS fit."""
    assert _bos_window(None, [5] * (MAX_TOKENS - 1), None, 1).tolist() == [1] + [5] * (MAX_TOKENS - 1)
