"""The per-head switch claim on tiny real `transformers` models whose heads are built by hand: a hard switch (all
mass on BOS, whose value vanishes), a sink with a non-vanishing BOS value, a diagonal head whose own value vanishes
on half the tokens, an ordinary random head.

`switch_evidence`'s per-head counts and drains must equal a brute-force loop over a float64 eager copy
(`output_attentions=True`, values from a hook on `v_proj`, outputs from a pre-hook on `o_proj`); the verdict's two
directions must equal the per-head means recomputed here from those loops, and read "supported" where the theorem's
heads are built, "not supported" where each direction is broken by construction.
"""

import copy
import math

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.reproduction.switch_claims import GRID, SWITCH, head_switch_effects, switch_verdict, weaker
from sinkscope.reproduction.switch_evidence import switch_evidence
from sinkscope.reproduction.verdicts import NOT_MEASURABLE, NOT_SUPPORTED, PARTLY, SUPPORTED

V, D, H, DH, T, W = 32, 48, 3, 16, 16, 8
TAU, DELTA = 0.1, 0.1
CONTENT = slice(2, 2 + DH)  # the residual dims the content-reading maps read
FLAGGED = slice(2 + DH, 2 + 2 * DH)  # a second content block, zero for odd token ids


def embeddings() -> torch.Tensor:
    """BOS (id 0): the unit vector e_0. Other tokens: e_1 (a constant feature every query reads) plus Gaussian
    content, whose second block is zero for odd ids."""
    g = torch.Generator().manual_seed(3)
    emb = torch.zeros(V, D)
    emb[0, 0] = 1.0
    emb[1:, 1] = 1.0
    emb[1:, 2:] = torch.randn(V - 1, D - 2, generator=g)
    emb[1::2, FLAGGED] = 0.0  # odd ids (1, 3, …): no flagged content
    return emb


def sink_qk(attn, head: int, gain: float) -> None:
    """Query along the constant feature, key along BOS's flag, both in the lowest-frequency RoPE pair (dims 7 and
    15 of the head: rope_theta = 1e9 leaves them unrotated): every query's score on BOS is large, on a context 0."""
    attn.q_proj.weight[head * DH + 7, 1] = gain
    attn.k_proj.weight[head * DH + 7, 0] = gain


def build(kind: str) -> LoadedModel:
    """One layer, three heads. `theorem`: head 0 a hard switch (sink, BOS value 0), head 1 a sink whose value
    reads BOS's flag (large v_0), head 2 random. `broken`: head 0 a diagonal head whose value is 0 on odd tokens
    (switched off without a sink), head 1 a sink with a small but non-vanishing v_0 (≈ 0.3 × the others: not
    switched off), head 2 random."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=32, num_hidden_layers=1,
                         num_attention_heads=H, num_key_value_heads=H, head_dim=DH, max_position_embeddings=64,
                         rope_theta=1e9)  # fmt: skip
    model = LlamaForCausalLM(config)
    attn = model.model.layers[0].self_attn
    with torch.no_grad():
        model.model.embed_tokens.weight.copy_(embeddings())
        for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
            proj.weight[: 2 * DH].zero_()  # heads 0 and 1 are built; head 2 keeps its random maps
        eye = torch.eye(DH)
        if kind == "theorem":
            sink_qk(attn, 0, 3.0)
            attn.v_proj.weight[:DH, CONTENT] = eye  # BOS has no content: v_0 = 0
            sink_qk(attn, 1, 3.0)
            attn.v_proj.weight[DH:2 * DH, CONTENT] = eye
            attn.v_proj.weight[DH, 0] = 3.0  # v_0 = 3 z_0[0] e_0: large
        else:
            attn.q_proj.weight[:DH, CONTENT] = 2.0 * eye  # q_t = k_t: the own key wins
            attn.k_proj.weight[:DH, CONTENT] = 2.0 * eye
            attn.v_proj.weight[:DH, FLAGGED] = eye  # 0 on odd tokens
            sink_qk(attn, 1, 2.5)
            attn.v_proj.weight[DH:2 * DH, CONTENT] = eye
            attn.v_proj.weight[DH, 0] = 0.17  # ‖v_0‖ ≈ 0.3 mean ‖v_j‖
    model.set_attn_implementation("sdpa")
    model.eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={"name": kind})


def windows() -> torch.Tensor:
    ids = torch.randint(1, V, (W, T), generator=torch.Generator().manual_seed(7))
    ids[:, 0] = 0
    return ids


def brute_force(lm: LoadedModel, ids: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """(W, 3, 3, H, 3) counts of (off ∧ sink, off, sink) over t ≥ 1 at δ × GRID, τ × GRID, and (W, H) drains, by
    loops over a float64 eager copy's attention maps, hooked values and hooked head outputs."""
    model = copy.deepcopy(lm.model).double()
    model.set_attn_implementation("eager")
    attn = model.model.layers[0].self_attn
    seen = {}
    handles = [attn.v_proj.register_forward_hook(lambda m, i, o: seen.__setitem__("v", o)),
               attn.o_proj.register_forward_pre_hook(lambda m, i: seen.__setitem__("o", i[0]))]  # fmt: skip
    try:
        maps = model.model(input_ids=ids, output_attentions=True, use_cache=False).attentions[0]
    finally:
        for handle in handles:
            handle.remove()
    v, o = seen["v"].view(W, T, H, DH), seen["o"].view(W, T, H, DH)
    counts, drains = np.zeros((W, len(GRID), len(GRID), H, 3)), np.zeros((W, H))
    for n in range(W):
        for h in range(H):
            norms = [float(v[n, j, h].norm()) for j in range(T)]
            drains[n, h] = norms[0] / (sum(norms[1:]) / (T - 1))
            for t in range(1, T):
                out = float(o[n, t, h].norm())
                for i, d in enumerate(GRID):
                    for k, s in enumerate(GRID):
                        off = out <= TAU * s * sum(norms[: t + 1]) / (t + 1)
                        sink = float(maps[n, h, t, 0]) >= 1 - DELTA * d
                        counts[n, i, k, h] += [off and sink, off, sink]
    return counts, drains


def by_hand(counts: np.ndarray, drains: np.ndarray, drain_max: float) -> tuple[float, float]:
    """Both directions at δ, τ: mean over heads with ≥ 10 off queries of P(sink | off); mean over heads with ≥ 10
    sink queries in windows where they drain of P(off | sink) there."""
    at = counts[:, GRID.index(1.0), GRID.index(1.0)]
    forward, backward = [], []
    for h in range(H):
        both, off = at[:, h, 0].sum(), at[:, h, 1].sum()
        if off >= SWITCH["min_head_queries"]:
            forward.append(both / off)
        keep = drains[:, h] <= drain_max
        both, sink = at[keep, h, 0].sum(), at[keep, h, 2].sum()
        if sink >= SWITCH["min_head_queries"]:
            backward.append(both / sink)
    return (float(np.mean(forward)) if forward else math.nan), (float(np.mean(backward)) if backward else math.nan)


@pytest.mark.parametrize("kind,drain_max,words", [("theorem", 0.1, (SUPPORTED, SUPPORTED)),
                                                  ("broken", 0.5, (NOT_SUPPORTED, NOT_SUPPORTED))])  # fmt: skip
def test_per_head_switch_against_brute_force(kind, drain_max, words):
    lm, ids = build(kind), windows()
    got = switch_evidence(lm, [ids[:4], ids[4:]], 0, tau=TAU, delta=DELTA)
    counts, drains = brute_force(lm, ids)
    np.testing.assert_array_equal(got["head_counts"][:, :, :, 0], counts, err_msg=kind)
    np.testing.assert_allclose(got["head_drain"][:, 0], drains, rtol=1e-5, atol=1e-6)
    verdict = switch_verdict("m", got, T - 1, drain_max)
    forward, backward = by_hand(counts, drains, drain_max)
    parts = verdict.evidence
    assert parts["switch_implies_sink"]["estimate"] == pytest.approx(forward)
    assert parts["sink_implies_switch"]["estimate"] == pytest.approx(backward)
    assert (parts["switch_implies_sink"]["verdict"], parts["sink_implies_switch"]["verdict"]) == words
    assert verdict.verdict == words[0] and verdict.interval["over"] == "windows"
    if kind == "theorem":  # head 0 a hard switch, head 1 a sink that never switches off
        assert (forward, backward) == (1.0, 1.0)
        assert (parts["n_sink_heads"], parts["n_sink_heads_hard_switch"], parts["hard_switch_heads"]) == (2, 1, "L0.H0")
        assert parts["sink_implies_switch_undrained"] == 0.0  # head 1: its sink queries stay on
        assert "1 of 2 sink heads are hard switches" in verdict.reason
    else:  # head 0 switches off without sinking; head 1 sinks, drains below the cut, stays on
        assert forward == 0.0 and backward == 0.0
        assert 0.1 < drains[:, 1].mean() < 0.5 and counts[:, 1, 1, 1, 2].sum() == W * (T - 1)


@pytest.mark.parametrize("a,b,word", [(SUPPORTED, SUPPORTED, SUPPORTED), (SUPPORTED, PARTLY, PARTLY),
                                      (SUPPORTED, NOT_SUPPORTED, NOT_SUPPORTED), (PARTLY, NOT_SUPPORTED, NOT_SUPPORTED),
                                      (SUPPORTED, NOT_MEASURABLE, PARTLY), (NOT_MEASURABLE, NOT_SUPPORTED, NOT_SUPPORTED),
                                      (NOT_MEASURABLE, NOT_MEASURABLE, NOT_MEASURABLE), (None, SUPPORTED, None)])  # fmt: skip
def test_an_if_and_only_if_reads_its_weaker_direction(a, b, word):
    """The truth table of `weaker`, written out: both directions must hold; one measured direction alone is at most
    partly; a record not varied stays not varied."""
    assert weaker(a, b) == word and weaker(b, a) == word


def test_head_effects_on_hand_made_counts_skip_heads_with_too_few_queries():
    """Random counts with heads of 0 … 30 switched-off or sink queries: the effects equal `by_hand`'s loops, which
    leave out the heads below `min_head_queries`."""
    rng = np.random.default_rng(5)
    counts = np.zeros((W, len(GRID), len(GRID), H, 3))
    off, sink = rng.integers(0, 4, (W, H)), rng.integers(0, 6, (W, H))
    counts[:, 1, 1, :, 0], counts[:, 1, 1, :, 1], counts[:, 1, 1, :, 2] = np.minimum(off, sink), off, sink
    drains = rng.uniform(0, 0.3, (W, H))
    got = head_switch_effects(counts[:, 1, 1][:, None], drains[:, None], 0.25, SWITCH["min_head_queries"])
    forward, backward = by_hand(counts, drains, 0.25)
    assert (got["switch_implies_sink"], got["sink_implies_switch"]) == (pytest.approx(forward), pytest.approx(backward))
    assert math.isfinite(forward) and math.isfinite(backward)
    assert 0 < got["n_heads_switching"] < H or 0 < got["n_drained_sink_heads"] < H  # the gate left a head out
