"""Every family's form of the flex path (what CUDA runs, compiled) on the CPU, where flex_attention runs eagerly:
logit softcaps (Gemma-2), boolean attention masks (padding, with and without a sliding window) and learned sinks
(gpt-oss), alone and together, each against float64 softmax maps of the same q, k, v for every `AttentionReadout`
field, the output and the learned sink's mass, on uneven shapes (T not a power of two, batch > 1, GQA, value heads
narrower and wider than the key heads); then whole analyses of tiny Gemma-2 (softcap) and gpt-oss-like padded
inputs through CUDA's routing against the block path.
"""

import pandas as pd
import pytest
import torch
from transformers import Gemma2Config, Gemma2ForCausalLM

import sinkscope.capture.attention as attention
from sinkscope.capture import flex
from sinkscope.capture.flex_masks import flex_masks
from sinkscope.corpus.windows import TokenWindows
from sinkscope.models.families import attention_module, family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_capture_families import COMMON, token_windows


@pytest.fixture(autouse=True)
def eager_flex_without_tracing(monkeypatch):
    """Eager flex_attention (the CPU) runs the same math without first tracing each new `score_mod` and shape with
    dynamo (about 2 s each, most of these tests' time otherwise)."""
    import torch.nn.attention.flex_attention as flex_module

    monkeypatch.setattr(flex_module, "_FLEX_ATTENTION_DISABLE_COMPILE_DEBUG", True, raising=False)


def float64_rows(q, k, v, scale, *, softcap=None, mask=None, sinks=None, bias=None) -> dict[str, torch.Tensor]:
    """Every `AttentionReadout` field, the output and the learned sink's mass from float64 maps: logits
    `S = s q·k` (`c·tanh(S/c)` under a softcap) plus an additive `bias` as eager adds it, keys `j ≤ t` where
    `mask[b,0,t,j]`, softmax over them and the sink column σ_h (whose mass is `m_t`); a query that sees no key has
    a row of zeros (a boolean mask) or, with every bias the float32 minimum, a uniform row over the keys j ≤ t."""
    B, H, n = q.shape[:3]
    group = H // k.shape[1]
    S = scale * q.double() @ k.double().repeat_interleave(group, 1).transpose(-1, -2)
    if softcap is not None:
        S = softcap * torch.tanh(S / softcap)
    if bias is not None:
        S = S + bias.double()
    seen = torch.ones(n, n, dtype=torch.bool).tril().expand(B, 1, n, n)
    if mask is not None:
        seen = seen & mask
    S = S.masked_fill(~seen, -torch.inf)
    if sinks is not None:
        S = torch.cat([S, sinks.double().view(1, H, 1, 1).expand(B, H, n, 1)], -1)
    A = torch.nan_to_num(S.softmax(-1), nan=0.0)  # a row with no visible key: zeros
    mass = A[..., n] if sinks is not None else torch.zeros(B, H, n, dtype=torch.float64)
    A = A[..., :n]
    t = torch.arange(n)
    out = A @ v.double().repeat_interleave(group, 1)
    plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
    entropy = (-plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()).sum(-1)
    prev = torch.cat([torch.zeros_like(A[..., :1, 0]), A[..., t[1:], t[:-1]]], -1)
    return dict(out=out, sink=A[..., 0], diag=A[..., t, t], prev=prev, columns=A.sum(-2), entropy=entropy,
                out_norms=out.norm(dim=-1), mass=mass, A=A)  # fmt: skip


def padding_mask(B: int, n: int, window: int | None = None) -> torch.Tensor:
    """A boolean (B, 1, T, T) mask as transformers' sdpa mask function builds it: causal, keys of padding tokens
    hidden (window 0 padded on the left by 3, window 1 on the right by 4, the rest none), within `window`."""
    keep = torch.ones(B, n, dtype=torch.bool)
    keep[0, :3] = False
    if B > 1:
        keep[1, -4:] = False
    t = torch.arange(n)
    seen = (t[:, None] >= t[None, :]).expand(B, 1, n, n) & keep[:, None, None, :]
    if window is not None:
        seen = seen & (t[:, None] - t[None, :] < window)
    return seen


def inputs(B, H, kv, n, D, Dv, seed=0, sharpness=4.0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, H, n, D, generator=g) * sharpness
    k = torch.randn(B, kv, n, D, generator=g) + torch.randn(D, generator=g)  # a common part, as massive activations
    k[:, :, 0] *= 3  # a key that draws attention, as BOS does
    return q, k, torch.randn(B, kv, n, Dv, generator=g)


SHAPES = [(2, 4, 2, 41, 16, 24), (3, 2, 1, 23, 8, 8), (1, 3, 3, 13, 16, 8)]  # (B, H, KV, T, D, Dv)
FORMS = {
    "softcap": dict(softcap=5.0),
    "padding": dict(mask="padding"),
    "padding+window": dict(mask="window"),
    "sinks": dict(sinks=(-3.0, 0.0, 2.0, 6.0)),
    "softcap+padding+sinks": dict(softcap=5.0, mask="padding", sinks=(1.0, -1.0, 4.0, 0.0)),
    "alibi+padding": dict(bias="alibi"),
    "shared-bias+softcap+sinks": dict(bias="shared", softcap=5.0, sinks=(1.0, -1.0, 4.0, 0.0)),
}


def additive_mask(B: int, H: int, n: int, per_head: bool) -> torch.Tensor:
    """A float mask as Falcon builds it: ALiBi `slope_h · j` (slopes 2^(−8h/H), scaled by 1/√4) where the padding
    mask of `padding_mask` lets key j in (window 0's first 3 queries see no key: every bias the float32 minimum),
    the float32 minimum where not; or (`per_head` False) one random bias (1, 1, T, T) shared by every window and
    head, the minimum above the diagonal."""
    low = torch.finfo(torch.float32).min
    if not per_head:
        bias = torch.randn(1, 1, n, n, generator=torch.Generator().manual_seed(n)) * 3
        return bias.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), low)
    slopes = 2.0 ** (-8.0 * torch.arange(1, H + 1) / H)
    alibi = (slopes.view(1, H, 1, 1) * torch.arange(n).view(1, 1, 1, n) / 2.0).expand(B, H, n, n)
    return alibi.masked_fill(~padding_mask(B, n), low)


def form_arguments(form: dict, B: int, H: int, n: int) -> dict:
    args = dict(form)
    if "mask" in args:
        args["mask"] = padding_mask(B, n, 5 if args["mask"] == "window" else None)
    if "sinks" in args:
        args["sinks"] = torch.tensor(args["sinks"][:H])
    if "bias" in args:
        args["bias"] = additive_mask(B, H, n, args["bias"] == "alibi")
    return args


def assert_rows_equal(out, rows, ref, n, mass=None):
    torch.testing.assert_close(out.double(), ref["out"].transpose(1, 2), atol=1e-4, rtol=1e-4)
    for name in ("sink", "diag", "prev", "columns", "out_norms"):
        torch.testing.assert_close(getattr(rows, name).double(), ref[name], atol=1e-5, rtol=1e-5, msg=name)
    torch.testing.assert_close(rows.entropy, ref["entropy"], atol=1e-5 * n, rtol=1e-5)
    if mass is not None:
        torch.testing.assert_close(mass.double(), ref["mass"], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(FORMS))
def test_flex_forms_equal_float64_maps(name, shape):
    B, H, kv, n, D, Dv = shape
    q, k, v = inputs(B, H, kv, n, D, Dv, seed=n)
    args = form_arguments(FORMS[name], B, H, n)
    scale = D**-0.5
    out, packed = flex.flex_parts(q, k, v, scale, **args)
    rows = flex.unpack_rows(packed.parts)
    ref = float64_rows(q, k, v, scale, **args)
    assert_rows_equal(out, rows, ref, n, flex.learned_sink_mass(packed.parts) if "sinks" in args else None)
    if "sinks" in args:  # the sink took mass from nearly nothing to nearly all
        assert ref["mass"].amin() < 0.05 and ref["mass"].amax() > 0.95
    if "mask" in args:  # left padding: rows of zeros; sink entries outside the window where there is one
        assert (rows.sink[0, :, :3] == 0).all() and (rows.out_norms[0, :, :3] == 0).all()
    if name == "alibi+padding":  # left padding under an additive mask: uniform rows over the keys j ≤ t
        torch.testing.assert_close(rows.sink[0, :, :3], (1 / torch.arange(1.0, 4.0)).expand(H, 3))


def test_stacked_layers_of_a_learned_sink_unpack_as_each_layer():
    """`unpack_rows` of two layers' packed rows stacked (what the feed does once per batch) equals each layer's."""
    q, k, v = inputs(2, 4, 2, 19, 16, 16)
    sinks = torch.tensor([-1.0, 0.0, 1.0, 3.0])
    parts = [flex.flex_parts(q * s, k, v, 0.25, sinks=sinks)[1].parts for s in (1.0, 0.5)]
    stacked = flex.unpack_rows(torch.stack(parts))
    for i, layer in enumerate(parts):
        alone = flex.unpack_rows(layer)
        for name in ("sink", "columns", "entropy", "out_norms"):
            torch.testing.assert_close(getattr(stacked, name)[i], getattr(alone, name))


def gemma2() -> LoadedModel:
    """Gemma-2 with a logit softcap that bites (logits sharpened by 6× against a cap of 4) and a sliding window of
    5 in one of its three layers."""
    torch.manual_seed(0)
    config = Gemma2Config(**COMMON, num_key_value_heads=2, head_dim=16, sliding_window=5, attn_logit_softcapping=4.0,
                          layer_types=["sliding_attention", "full_attention", "sliding_attention"])  # fmt: skip
    model = Gemma2ForCausalLM(config)
    with torch.no_grad():
        for module in model.modules():
            for attr in ("q_proj", "k_proj"):
                if hasattr(module, attr):
                    getattr(module, attr).weight.mul_(6.0)
    model.set_attn_implementation("eager")
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("gemma2"), identity={"name": "gemma2"})


def test_a_softcapped_model_on_cudas_routing_equals_its_block_path(monkeypatch):
    """Gemma-2 (softcap in every layer, a sliding window in two) through CUDA's routing — every layer on the flex
    path, the sliding ones with their window — equals the block path (itself tested against eager maps)."""
    lm = gemma2()
    ids = token_windows(6)
    config = AnalyzeConfig(epsilon=0.25, delta=0.5, geometry_cap=0)
    blocked = analyze(lm, TokenWindows(ids, batch_size=3), config, progress=False)
    forms = []
    flex_parts = flex.flex_parts
    monkeypatch.setattr(attention, "_flex_here", lambda query: True)
    monkeypatch.setattr(flex, "flex_parts", lambda *a, **kw: forms.append((a[4], kw["softcap"])) or flex_parts(*a, **kw))
    fused = analyze(lm, TokenWindows(ids, batch_size=3), config, progress=False)
    assert forms == [(5, 4.0), (None, 4.0), (5, 4.0)] * 2  # three layers, two batches
    numeric = blocked.heads.select_dtypes("number").columns
    pd.testing.assert_frame_equal(blocked.heads[numeric], fused.heads[numeric], atol=1e-5, rtol=1e-5)
    pd.testing.assert_frame_equal(blocked.layers, fused.layers, atol=1e-5, rtol=1e-5)
    assert blocked.heads["sink_score"].max() > 0.25  # the thresholds were crossed


@pytest.mark.parametrize("name", ["llama", "gemma2"])
def test_a_padded_forward_pass_on_cudas_routing_equals_eager_maps(name):
    """A forward pass with an attention mask (window 1 padded on the right by 4 tokens; Gemma-2: softcap and a
    sliding window too) through CUDA's routing: every layer takes the flex path with the mask's form, the model's
    logits equal those of its eager attention, and each layer's rows equal the eager maps of the same pass."""
    from .test_capture_families import build

    lm = gemma2() if name == "gemma2" else build("llama", attn="eager")
    ids = token_windows(2)
    keep = torch.ones_like(ids)
    keep[1, -4:] = 0
    eager = lm.model(input_ids=ids, attention_mask=keep, output_attentions=True, use_cache=False)
    maps = [a.double() for a in eager.attentions]
    modules = {i: attention_module(lm.family, layer) for i, layer in enumerate(lm.layers)}
    rows, forms = {}, []
    flex_parts = flex.flex_parts
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention, "_flex_here", lambda query: True)
        patch.setattr(flex, "flex_parts", lambda *a, **kw: forms.append(kw["mask"] is not None) or flex_parts(*a, **kw))
        with attention.watch_attention(lm.model, modules, None, lambda *a: None,
                                       lambda layer, packed: rows.__setitem__(layer, packed.unpack(packed.parts))):
            logits = lm.model(input_ids=ids, attention_mask=keep, use_cache=False).logits
    assert forms == [True] * len(lm.layers)
    torch.testing.assert_close(logits, eager.logits, atol=1e-4, rtol=1e-4)
    n, t = ids.shape[1], torch.arange(ids.shape[1])
    for layer, A in enumerate(maps):
        got = rows[layer]
        torch.testing.assert_close(got.sink.double(), A[..., 0], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.diag.double(), A[..., t, t], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.prev.double()[..., 1:], A[..., t[1:], t[:-1]], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.columns, A.sum(-2), atol=1e-5, rtol=1e-5)
        plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
        entropy = (-plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()).sum(-1)
        torch.testing.assert_close(got.entropy, entropy, atol=1e-5 * n, rtol=1e-5)
    assert (maps[0][1, :, :, -4:] == 0).all()  # the padding's keys were hidden


def test_the_cuda_kernels_of_every_form_trace_into_whole_graphs(monkeypatch):
    """What CUDA compiles for the new forms — a softcap `score_mod` in all three calls, call 3's entropy `score_mod`,
    a padding mask's `mask_mod` reading a tensor — traces with fullgraph=True (a graph break would fail) under the
    "aot_eager" backend, and equals the eager calls."""
    monkeypatch.setattr(flex, "COMPILE_BACKEND", "aot_eager")
    compiled = flex._kernels.__wrapped__("cuda")
    eager = flex._kernels.__wrapped__("cpu")
    q, k, v = inputs(2, 4, 2, 29, 16, 16, seed=7)
    mask = padding_mask(2, 29)
    causal, anti_causal, _ = flex_masks(29, q.device, None, mask, 2)
    keys = k.repeat_interleave(2, 1)
    results = []
    for forward, log_column_sums, log_entropies in (compiled, eager):
        out, lse = forward(q, k, v, 0.25, causal, 5.0)
        norm = torch.logaddexp(lse, torch.tensor([-1.0, 0.0, 1.0, 2.0]).view(1, 4, 1))  # with learned sinks
        results.append((out, lse, log_column_sums(keys, q, norm, 0.25, anti_causal, 5.0),
                        log_entropies(q, k, lse, 0.25, causal, 5.0)))  # fmt: skip
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected)


def test_the_cuda_kernels_of_an_additive_mask_trace_into_whole_graphs(monkeypatch):
    """The additive mask's `score_mod` (a bias, a row shift and a seen-row factor read from tensors, in all three
    calls) traces with fullgraph=True under "aot_eager" and equals the eager calls."""
    from sinkscope.capture.flex_masks import additive_parts

    monkeypatch.setattr(flex, "COMPILE_BACKEND", "aot_eager")
    compiled, eager = flex._kernels.__wrapped__("cuda"), flex._kernels.__wrapped__("cpu")
    q, k, v = inputs(2, 4, 2, 29, 16, 16, seed=8)
    additive, _ = additive_parts(additive_mask(2, 4, 29, True), 2, 4)
    causal, anti_causal, _ = flex_masks(29, q.device, None, None, 2)
    results = []
    for forward, log_column_sums, log_entropies in (compiled, eager):
        out, lse = forward(q, k, v, 0.25, causal, None, additive)
        results.append((out, lse, log_column_sums(k.repeat_interleave(2, 1), q, lse, 0.25, anti_causal, None, additive),
                        log_entropies(q, k, lse, 0.25, causal, None, additive)))  # fmt: skip
    for got, expected in zip(*results):
        torch.testing.assert_close(got, expected)


def test_an_alibi_model_on_cudas_routing_equals_eager_maps():
    """Falcon with ALiBi (an additive float mask in every layer), left- and right-padded, through CUDA's routing:
    every layer takes the flex path with the mask as its bias, the logits of every query that sees a key equal
    eager attention's, and so do each layer's rows. (A query that sees no key — window 0's first three — gets a
    uniform row over the keys j ≤ t; eager's additive mask makes it uniform over all T keys, future ones too, so
    window 0's column sums and entropy are left out.)"""
    from .test_capture_more_families import tiny

    lm = tiny("falcon_alibi")
    lm.model.set_attn_implementation("eager")
    ids = token_windows(2)
    keep = torch.ones_like(ids)
    keep[0, :3], keep[1, -4:] = 0, 0
    eager = lm.model(input_ids=ids, attention_mask=keep, output_attentions=True, use_cache=False)
    modules = {i: attention_module(lm.family, layer) for i, layer in enumerate(lm.layers)}
    rows, forms = {}, []
    flex_parts = flex.flex_parts
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention, "_flex_here", lambda query: True)
        patch.setattr(flex, "flex_parts", lambda *a, **kw: forms.append(kw.get("bias") is not None and
                                                                        kw["bias"].is_floating_point())
                      or flex_parts(*a, **kw))  # fmt: skip
        with attention.watch_attention(lm.model, modules, None, lambda *a: None,
                                       lambda layer, packed: rows.__setitem__(layer, packed.unpack(packed.parts))):
            logits = lm.model(input_ids=ids, attention_mask=keep, use_cache=False).logits
    assert forms == [True] * len(lm.layers)
    torch.testing.assert_close(logits[0, 3:], eager.logits[0, 3:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits[1], eager.logits[1], atol=1e-4, rtol=1e-4)
    n, t = ids.shape[1], torch.arange(ids.shape[1])
    for layer, A in enumerate(a.double() for a in eager.attentions):
        got = rows[layer]
        for name, expected in (("sink", A[..., 0]), ("diag", A[..., t, t]),
                               ("prev", torch.cat([A[..., :1, 0] * 0, A[..., t[1:], t[:-1]]], -1))):  # fmt: skip
            torch.testing.assert_close(getattr(got, name).double()[0, :, 3:], expected[0, :, 3:], atol=1e-5, rtol=1e-5)
            torch.testing.assert_close(getattr(got, name).double()[1], expected[1], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(got.columns[1], A[1].sum(-2), atol=1e-5, rtol=1e-5)
        plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
        entropy = (-plogp.sum(-1)[..., 1:] / torch.log(t[1:] + 1.0).double()).sum(-1)
        torch.testing.assert_close(got.entropy[1], entropy[1], atol=1e-5 * n, rtol=1e-5)
        torch.testing.assert_close(got.sink[0, :, 2].double(), torch.full_like(A[0, :, 2, 0], 1 / 3))  # sees no key
        assert (A[1, :, :, -4:] == 0).all()  # the right padding's keys were hidden
