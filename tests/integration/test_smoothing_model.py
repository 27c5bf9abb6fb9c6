"""The SPEC §5 real-model pipeline on a tiny random GQA llama, against brute-force recomputation."""

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.layer_inputs import layer_inputs
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.smoothing import LAMBDAS, smoothing_analysis
from sinkscope.theory import oversmoothing as th

N_HEADS, N_KV, HEAD_DIM, D = 4, 2, 8, 32


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=D, intermediate_size=64, num_hidden_layers=2, num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV, head_dim=HEAD_DIM, vocab_size=101, max_position_embeddings=64,
        attn_implementation="eager",
    )  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    for layer in model.model.layers:  # non-trivial norm gains, so folding them in is tested
        layer.input_layernorm.weight.uniform_(0.5, 1.5)
    lm = LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})
    ids = torch.randint(2, 101, (6, 12), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = 1  # BOS
    tables = smoothing_analysis(lm, ids.split(3))
    return lm, ids, tables


def head_map(layer, head):
    """W_V^h W_O^h in row-vector form, read from the raw projection weights (kv head h // group)."""
    kv = head // (N_HEADS // N_KV)
    w_v = layer.self_attn.v_proj.weight.double().numpy()[kv * HEAD_DIM : (kv + 1) * HEAD_DIM]  # (dh, d)
    w_o = layer.self_attn.o_proj.weight.double().numpy()[:, head * HEAD_DIM : (head + 1) * HEAD_DIM]  # (d, dh)
    return w_v.T @ w_o.T


def pairwise_cosine_loop(Y):
    values = [Y[i] @ Y[j] / np.linalg.norm(Y[i]) / np.linalg.norm(Y[j]) for i in range(len(Y)) for j in range(len(Y)) if i != j]
    return np.mean(values)


def test_traces_curves_and_reference_match_brute_force(tiny):
    lm, ids, (heads, layers, curves) = tiny
    captured = layer_inputs(lm, ids)
    mids = {}
    hooks = [
        block.post_attention_layernorm.register_forward_hook(lambda m, a, o, i=i: mids.__setitem__(i, a[0].double()))
        for i, block in enumerate(lm.layers)
    ]  # the residual after attention, h + attention output, read where the MLP's norm receives it
    lm.base(input_ids=ids)
    for hook in hooks:
        hook.remove()
    T_ctx = ids.shape[1] - 1
    for index, block in enumerate(lm.layers):
        h, z = (t.double().numpy() for t in captured[index])
        X = h[:, 1:].reshape(-1, D)
        mu, sigma = X.mean(0), np.cov(X.T, bias=True)
        s = np.sqrt(np.mean(np.sum(X**2, axis=1)) / D)
        gain = block.input_layernorm.weight.double().numpy()
        for head in range(N_HEADS):
            W = head_map(block, head)
            W_tilde = gain[:, None] * W / s
            row = heads[(heads.layer == index) & (heads["head"] == head)].iloc[0]
            assert row.smooth_b == pytest.approx(np.trace(sigma @ W_tilde), rel=1e-4, abs=1e-6)
            assert row.smooth_c == pytest.approx(np.trace(W_tilde.T @ sigma @ W_tilde), rel=1e-4)
            assert row.smooth_dense_more == (2 * row.smooth_b + row.smooth_c > 0)
            Zc = z[:, 1:].reshape(-1, D)
            cross = (X - mu).T @ (Zc - Zc.mean(0)) / len(X)  # E[(h-μ)ᵀ(z-μ_z)]
            assert row.smooth_b_measured == pytest.approx(np.trace(W @ cross), rel=1e-4, abs=1e-7)
            assert row.smooth_c_measured == pytest.approx(np.trace(W.T @ np.cov(Zc.T, bias=True) @ W), rel=1e-4)
            curve = curves[(curves.layer == index) & (curves["head"] == head)].sort_values("lam")
            brute = []
            for lam, cos_obs, cos_pred in zip(curve.lam, curve.cos_obs, curve.cos_pred):
                A = th.interpolated_attention(T_ctx, lam, causal=True)
                brute.append(np.mean([pairwise_cosine_loop(h[w, 1:] + A @ z[w, 1:] @ W) for w in range(len(ids))]))
                assert cos_obs == pytest.approx(brute[-1], abs=1e-5)
                G = th.second_moments(mu, sigma, W_tilde, A)
                assert cos_pred == pytest.approx(th.mean_expected_cosine(G), abs=1e-6)
            assert row.smooth_lambda_peak_obs == LAMBDAS[int(np.argmax(brute))]
        real = np.mean([pairwise_cosine_loop(mids[index][w, 1:].numpy()) for w in range(len(ids))])
        layer_row = layers[layers.layer == index].iloc[0]
        assert layer_row.smooth_cos_real == pytest.approx(real, abs=1e-5)
        assert layer_row.smooth_cos_input == pytest.approx(np.mean([pairwise_cosine_loop(h[w, 1:]) for w in range(len(ids))]), abs=1e-5)
        whole = sum(head_map(block, head) for head in range(N_HEADS))
        assert layer_row.smooth_b == pytest.approx(np.trace(sigma @ (gain[:, None] * whole / s)), rel=1e-4, abs=1e-6)


def test_table_shapes(tiny):
    _, _, (heads, layers, curves) = tiny
    assert len(heads) == 2 * N_HEADS and len(layers) == 2
    assert len(curves) == 2 * (N_HEADS + 1) * len(LAMBDAS)
    assert {"smooth_b", "smooth_c", "smooth_dense_more", "smooth_lambda_peak"} <= set(heads.columns)


def test_smoothing_of_chosen_layers_in_an_analysis_equals_their_own_pass(tiny):
    """analyze(smoothing=[1]) measures layer 1 only, as smoothing_analysis(layers=[1]) does in its own pass."""
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    lm, ids, _ = tiny
    alone, _, curves = smoothing_analysis(lm, ids.split(3), layers=[1])
    run = analyze(lm, TokenWindows(ids, batch_size=3), AnalyzeConfig(geometry_cap=0), progress=False, smoothing=[1])
    assert run.heads.loc[run.heads.layer == 0, "smooth_b"].isna().all()
    got = run.heads[run.heads.layer == 1].set_index("head")["smooth_b"].sort_index()
    assert got.to_numpy() == pytest.approx(alone.set_index("head")["smooth_b"].sort_index().to_numpy(), rel=1e-5)
    assert len(run.extra["smoothing_curves"]) == len(curves) and run.meta["smoothing"]["n_heads"] == N_HEADS


def test_smoothing_in_the_capture_pass_equals_its_own_pass(tiny):
    """analyze(smoothing=True) shares the forward pass that sinkscope's attention function computes; the tables
    must equal those of a separate plain pass (where the model's own eager attention runs)."""
    from sinkscope.corpus.windows import TokenWindows
    from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

    lm, ids, (heads, layers, _) = tiny
    run = analyze(lm, TokenWindows(ids, batch_size=3), AnalyzeConfig(geometry_cap=0), progress=False, smoothing=True)
    got = run.heads.set_index(["layer", "head"]).sort_index()
    expected = heads.set_index(["layer", "head"]).sort_index()
    for column in ("smooth_b", "smooth_c", "smooth_dcos_obs", "smooth_dcos_pred"):
        assert got[column].to_numpy() == pytest.approx(expected[column].to_numpy(), rel=1e-5, abs=1e-7), column
    assert run.layers["smooth_cos_real"].to_numpy() == pytest.approx(layers["smooth_cos_real"].to_numpy(), abs=1e-6)
    assert "sink_score" in run.heads and "smoothing_curves" in run.extra


def test_post_attention_norm_enters_the_value_path():
    """Gemma 3's sandwich norm: observed curves use its real per-query scale and gain, β = mean scale."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(2)
    config = Gemma3TextConfig(
        hidden_size=D, intermediate_size=64, num_hidden_layers=2, num_attention_heads=N_HEADS,
        num_key_value_heads=N_KV, head_dim=HEAD_DIM, vocab_size=101, max_position_embeddings=64,
        sliding_window=16, attn_implementation="eager",
    )  # fmt: skip
    model = Gemma3ForCausalLM(config).eval().requires_grad_(False)
    for layer in model.model.layers:
        layer.input_layernorm.weight.uniform_(-0.5, 0.5)  # Gemma's gain is 1 + w
        layer.post_attention_layernorm.weight.uniform_(-0.5, 0.5)
    lm = LoadedModel(model=model, tokenizer=None, family=family_for("gemma3_text"), identity={})
    ids = torch.randint(3, 101, (4, 10), generator=torch.Generator().manual_seed(3))
    ids[:, 0] = 2
    heads, layers, curves = smoothing_analysis(lm, ids.split(2))

    seen = {}
    hooks = []
    for i, block in enumerate(lm.layers):
        hooks.append(block.input_layernorm.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("hz", i), (a[0], o))))
        hooks.append(block.self_attn.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("o", i), o[0])))
        hooks.append(block.pre_feedforward_layernorm.register_forward_hook(lambda m, a, o, i=i: seen.__setitem__(("mid", i), a[0])))
    lm.base(input_ids=ids)
    for hook in hooks:
        hook.remove()
    index, head = 1, 3
    block = lm.layers[index]
    h, z = (t.double().numpy() for t in seen[("hz", index)])
    o = seen[("o", index)].double().numpy()[:, 1:]
    post = block.post_attention_layernorm
    r = 1 / np.sqrt(np.mean(o**2, axis=-1) + post.eps)  # (B, T'): RMSNorm's per-token scale
    g_post = 1 + post.weight.double().numpy()
    W = head_map(block, head) * g_post
    T_ctx = ids.shape[1] - 1
    curve = curves[(curves.layer == index) & (curves["head"] == head)].sort_values("lam")
    for lam, cos_obs in zip(curve.lam, curve.cos_obs):
        A = th.interpolated_attention(T_ctx, lam, causal=True)
        expected = np.mean([pairwise_cosine_loop(h[w, 1:] + r[w][:, None] * (A @ z[w, 1:] @ W)) for w in range(len(ids))])
        assert cos_obs == pytest.approx(expected, abs=1e-5)
    real = np.mean([pairwise_cosine_loop(seen[("mid", index)][w, 1:].double().numpy()) for w in range(len(ids))])
    layer_row = layers[layers.layer == index].iloc[0]
    assert layer_row.smooth_cos_real == pytest.approx(real, abs=1e-5)
    assert layer_row.smooth_value_gain == pytest.approx(r.mean(), rel=1e-4)
    X = h[:, 1:].reshape(-1, D)
    sigma = np.cov(X.T, bias=True)
    s = np.sqrt(np.mean(np.sum(X**2, axis=1)) / D)
    W_tilde = (1 + block.input_layernorm.weight.double().numpy())[:, None] * W * r.mean() / s
    row = heads[(heads.layer == index) & (heads["head"] == head)].iloc[0]
    assert row.smooth_b == pytest.approx(np.trace(sigma @ W_tilde), rel=1e-4, abs=1e-7)
    assert row.smooth_c == pytest.approx(np.trace(W_tilde.T @ sigma @ W_tilde), rel=1e-4)
