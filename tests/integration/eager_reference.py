"""An independent float64 reference for every documented column of a run (docs/statistics.md).

It shares no statistics code with sinkscope: the model runs once with plain `transformers` eager attention
(`output_attentions=True`), forward hooks on HF modules give each layer's residual input `h` (block pre-hook), its
attention input `z` (input-norm output) and its value vectors (value-projection output), and every column of
`heads`, `layers`, `positions`, `tokens`, `token_layers` and the summary is computed from those in float64, with
the formulas of docs/statistics.md written out again here (switch-off in SPEC §3's visible-key form
`||o_t|| ≤ τ · mean_{j≤t} ||v_j||`). `compare` checks a run against it column by column, and fails on any column
either side has and the other lacks.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np
import pandas as pd
import torch

# Where each architecture keeps its blocks, the input norm whose output is z (None: z = h), the attention module,
# the projection that outputs the values and how (separate: [v]; concat: [q | k | v]; per_head: [q k v] per head);
# written here, not read from sinkscope's family table.
SEPARATE = ("layers", "input_layernorm", "self_attn", "v_proj", "separate")
ARCHITECTURES = {
    **{t: SEPARATE for t in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma",
                             "gemma2", "gemma3_text", "phi", "olmoe")},
    "olmo2": ("layers", None, "self_attn", "v_proj", "separate"),
    "opt": ("decoder.layers", "self_attn_layer_norm", "self_attn", "v_proj", "separate"),
    "phi3": ("layers", "input_layernorm", "self_attn", "qkv_proj", "concat"),
    "gpt2": ("h", "ln_1", "attn", "c_attn", "concat"),
    "falcon": ("h", "input_layernorm", "self_attention", "query_key_value", "concat"),  # multi-query: KV = 1
    "gpt_neox": ("layers", "input_layernorm", "attention", "query_key_value", "per_head"),
}  # fmt: skip
CERTIFICATES = ("gamma1", "gamma2", "sink_margin", "sink_representable", "h1", "h2", "context_rank",
                "sink_span_distance")
SPAN_RTOL = 1e-4  # docs/theory/geometry.md: singular values above 1e-4 × the largest count towards the rank
HULL_TOL = 1e-6  # a distance to a hull below this (on unit vectors) counts as "inside"


@dataclass
class Reference:
    """The expected tables of a run; `exercised` says which thresholds the inputs actually crossed."""

    heads: pd.DataFrame
    layers: pd.DataFrame
    positions: pd.DataFrame
    tokens: pd.DataFrame
    token_layers: pd.DataFrame
    summary: dict
    exercised: dict = field(default_factory=dict)
    windows: pd.DataFrame | None = None  # per-window summary numbers (statistics/window_summary.py)


def head_class(sink: float, diag: float, prev: float, entropy: float, epsilon: float) -> str:
    """docs/statistics.md: first match of sink (α > ε), diagonal (> 0.5), previous-token (> 0.5), dense (> 0.7)."""
    for name, value, threshold in (("sink", sink, epsilon), ("diagonal", diag, 0.5), ("previous-token", prev, 0.5),
                                   ("dense", entropy, 0.7)):  # fmt: skip
        if value > threshold:
            return name
    return "mixed"


@torch.no_grad()
def capture(model: torch.nn.Module, ids: torch.Tensor) -> tuple[list, list, list, list]:
    """Eager attention maps (N, H, T, T) (the model's dtype), h and z (N, T, d) and value vectors (N, KV, T, dh)
    (float64) of every layer."""
    config = getattr(model.config, "text_config", None) or model.config
    blocks_name, norm_name, attention_name, value_name, layout = ARCHITECTURES[config.model_type]
    base = model.base_model
    blocks = list(functools.reduce(getattr, blocks_name.split("."), base))
    H = config.num_attention_heads
    dh = getattr(config, "head_dim", None) or config.hidden_size // H
    h, z, values = [None] * len(blocks), [None] * len(blocks), [None] * len(blocks)
    handles = []

    def to_values(out: torch.Tensor) -> torch.Tensor:  # projection output (N, T, ·) -> values (N, KV, T, dh)
        if layout == "per_head":
            v = out.unflatten(-1, (H, 3 * dh))[..., 2 * dh :]
        else:
            width = out.shape[-1] if layout == "separate" else (out.shape[-1] - H * dh) // 2
            v = out[..., out.shape[-1] - width :].unflatten(-1, (-1, dh))
        return v.transpose(1, 2).double()

    def keep(store, index, fn):
        def hook(_module, args, kwargs_or_output):
            store[index] = fn(args, kwargs_or_output)

        return hook

    for i, block in enumerate(blocks):
        handles.append(block.register_forward_pre_hook(
            keep(h, i, lambda args, kwargs: (args[0] if args else kwargs["hidden_states"]).double()),
            with_kwargs=True))  # fmt: skip
        if norm_name is not None:
            handles.append(getattr(block, norm_name).register_forward_hook(keep(z, i, lambda _a, out: out.double())))
        projection = getattr(getattr(block, attention_name), value_name)
        handles.append(projection.register_forward_hook(keep(values, i, lambda _a, out: to_values(out))))
    previous = model.config._attn_implementation
    model.set_attn_implementation("eager")
    try:
        out = base(input_ids=ids, output_attentions=True, use_cache=False)
    finally:
        model.set_attn_implementation(previous)
        for handle in handles:
            handle.remove()
    return list(out.attentions), h, (h if norm_name is None else z), values


def min_distance_to_hull(points: np.ndarray, target: np.ndarray) -> float:
    """`dist(target, conv(points))` as a second-order cone program (cvxpy, Clarabel): no NNLS, no LP."""
    w = cp.Variable(points.shape[0], nonneg=True)
    problem = cp.Problem(cp.Minimize(cp.norm(points.T @ w - target)), [cp.sum(w) == 1])
    problem.solve(solver=cp.CLARABEL)
    return max(float(problem.value), 0.0)


def certificates(z0: np.ndarray, contexts: np.ndarray) -> dict:
    """SPEC §4 on unit-normalised inputs: γ1, γ2 (0 when the condition fails), margin, H1/H2, rank, span distance."""
    unit = contexts / np.linalg.norm(contexts, axis=1, keepdims=True)
    sink = z0 / np.linalg.norm(z0)
    gamma1 = min_distance_to_hull(unit, np.zeros_like(sink))
    gamma2 = min_distance_to_hull(unit, sink)
    h1, h2 = gamma1 > HULL_TOL, gamma2 > HULL_TOL
    gamma1, gamma2 = (gamma1 if h1 else 0.0), (gamma2 if h2 else 0.0)
    eigenvalues, vectors = np.linalg.eigh(unit.T @ unit)  # singular values² of the context matrix
    kept = eigenvalues > (SPAN_RTOL**2) * eigenvalues.max()
    basis = vectors[:, kept]  # (d, rank)
    return {"gamma1": gamma1, "gamma2": gamma2, "sink_margin": gamma1 * gamma2 if h1 and h2 else 0.0,
            "sink_representable": bool(h1 and h2), "h1": bool(h1), "h2": bool(h2), "context_rank": int(kept.sum()),
            "sink_span_distance": float(np.linalg.norm(sink - basis @ (basis.T @ sink)))}  # fmt: skip


def eager_reference(
    model: torch.nn.Module,
    ids: torch.Tensor,
    epsilon: float = 0.3,
    delta: float = 0.1,
    tau: float = 0.1,
    epsilons: tuple[float, ...] = (),
    geometry: bool = True,
    tokenizer=None,
) -> Reference:
    """Every documented column for windows `ids` (N, T) (BOS first), from plain eager maps in float64.

    `geometry`: also the certificate columns, over every context input (a run's sample equals them when its
    `--geometry-cap` ≥ N·(T−1)).
    """
    maps, hs, zs, values = capture(model, ids)
    N, T = ids.shape
    L, H = len(maps), maps[0].shape[1]
    t = torch.arange(T)
    head_rows, layer_rows, position_rows = [], [], []
    alphas, receiveds = [], []  # (N, H) per-window α and (N, H, T-2) received of each layer
    window_diag, window_mlp = torch.zeros(N, dtype=torch.float64), torch.zeros(N, dtype=torch.float64)
    exercised = {"hard_sink": 0, "hard_diag": 0, "off": 0, "on": 0, "cos_nonpos": 0}
    for layer in range(L):
        A = maps[layer].double()  # (N, H, T, T)
        group = H // values[layer].shape[1]
        v = values[layer].repeat_interleave(group, dim=1)  # (N, H, T, dh)
        o = A @ v  # the head outputs before the output projection
        out_norms, value_norms = o.norm(dim=-1), v.norm(dim=-1)  # (N, H, T)
        col0, diag, prev = A[..., :, 0], A[..., t, t], A[..., t[1:], t[:-1]]
        alpha = col0.mean(-1)  # (N, H): α^w
        alphas.append(alpha)
        plogp = torch.where(A > 0, A * A.clamp_min(1e-300).log(), torch.zeros_like(A))
        entropy = (-plogp.sum(-1))[..., 1:] / torch.log(t[1:] + 1.0).double()
        hard_sink, hard_diag = col0[..., 1:] >= 1 - delta, diag[..., 1:] >= 1 - delta  # (N, H, T-1)
        visible_mean = value_norms.cumsum(-1) / (t + 1.0)  # mean_{j≤t} ||v_j||
        off = (out_norms <= tau * visible_mean)[..., 1:]
        window_diag += diag[..., 1:].mean(-1).sum(-1)  # Σ_h mean_{t≥1} A[t,t], per window
        window_mlp += (hard_sink | hard_diag).all(dim=1).sum(-1)  # queries t ≥ 1 where every head is hard
        exercised["hard_sink"] += int(hard_sink.sum())
        exercised["hard_diag"] += int(hard_diag.sum())
        exercised["off"] += int(off.sum())
        exercised["on"] += int((~off).sum())
        ahon = out_norms.mean((0, 2))
        for head in range(H):
            row = {
                "layer": layer, "head": head,
                "sink_score": float(alpha[:, head].mean()),
                "sink_rate": float((alpha[:, head] > epsilon).double().mean()),
                "diag_score": float(diag[:, head, 1:].mean()),
                "prev_score": float(prev[:, head].mean()),
                "entropy": float(entropy[:, head].mean()),
                "hard_sink_frac": float(hard_sink[:, head].double().mean()),
                "hard_diag_frac": float(hard_diag[:, head].double().mean()),
                "ahon": float(ahon[head]),
                "ahon_ln": float(ahon[head] / ahon.mean()),
                "value_drain": float((value_norms[:, head, 0] / value_norms[:, head, 1:].mean(-1)).mean()),
            }  # fmt: skip
            counts = {f"switch_n_{state}_{sink}": int((o_mask & s_mask).sum())
                      for state, o_mask in (("off", off[:, head]), ("on", ~off[:, head]))
                      for sink, s_mask in (("sink", hard_sink[:, head]), ("nosink", ~hard_sink[:, head]))}  # fmt: skip
            n_off = counts["switch_n_off_sink"] + counts["switch_n_off_nosink"]
            row["switch_off_frac"] = n_off / (N * (T - 1))
            row["switch_agreement"] = counts["switch_n_off_sink"] / n_off if n_off else math.nan
            row["head_class"] = head_class(row["sink_score"], row["diag_score"], row["prev_score"], row["entropy"],
                                           epsilon)
            head_rows.append(row | counts)
        layer_row = {
            "layer": layer,
            "sink_rate": float((alpha > epsilon).double().mean()),
            "sink_rate_of_mean": float((alpha.mean(0) > epsilon).double().mean()),
            "mlp_like_frac": float((hard_sink | hard_diag).all(1).double().mean()),
        }
        for kind, x in (("h", hs[layer]), ("z", zs[layer])):
            cos = torch.nn.functional.cosine_similarity(x[:, :1], x[:, 1:], dim=-1)  # (N, T-1)
            norms = x.norm(dim=-1)
            exercised["cos_nonpos"] += int((cos <= 0).sum())
            layer_row |= {f"bos_cos_mean_{kind}": float(cos.mean()), f"bos_cos_max_{kind}": float(cos.max()),
                          f"bos_cos_nonpos_frac_{kind}": float((cos <= 0).double().mean()),
                          f"bos_norm_ratio_{kind}": float((norms[:, 0] / norms[:, 1:].mean(-1)).mean())}  # fmt: skip
        layer_row |= massive_row(hs[layer])
        if geometry:
            z = zs[layer]
            layer_row |= certificates(z[0, 0].numpy(), z[:, 1:].reshape(-1, z.shape[-1]).numpy())
        layer_rows.append(layer_row)
        # α^w_k = mean_{t≥k} A[t,k] and received^w_k = mean_{t>k} A[t,k], as masked means over the rows t
        at_or_after, after = (t[:, None] >= t[None, :]).double(), (t[:, None] > t[None, :]).double()  # [t ≥ k], [t > k]
        key_scores = torch.einsum("nhtk,tk->nhk", A, at_or_after) / at_or_after.sum(0)  # (N, H, T)
        for k in range(T):
            mean_k = key_scores[..., k].mean(0)  # (H,)
            position_rows.append({"layer": layer, "position": k,
                                  "sink_rate": float((key_scores[..., k] > epsilon).double().mean()),
                                  "sink_rate_of_mean": float((mean_k > epsilon).double().mean()),
                                  "mean_key_score": float(mean_k.mean()), "max_key_score": float(mean_k.max())})  # fmt: skip
        receiveds.append(torch.einsum("nhtk,tk->nhk", A, after)[..., 1 : T - 1] / after.sum(0)[1 : T - 1])
    heads = pd.DataFrame(head_rows)
    tokens, token_layers = key_token_tables(ids, torch.stack(receiveds), epsilon, tokenizer)
    alpha_all = torch.stack(alphas)  # (L, N, H)
    summary = {
        "sink_rate": float((alpha_all > epsilon).double().mean()),
        "sink_rate_of_mean": float((heads["sink_score"] > epsilon).mean()),
        "epsilon": epsilon,
        "sink_rates": {str(e): float((alpha_all > e).double().mean()) for e in dict.fromkeys((epsilon, *epsilons))},
        "sink_rates_of_mean": {str(e): float((heads["sink_score"] > e).mean())
                               for e in dict.fromkeys((epsilon, *epsilons))},
        "mean_sink_score": float(heads["sink_score"].mean()),
        "mean_diag_score": float(heads["diag_score"].mean()),
        "head_classes": {k: int(v) for k, v in heads["head_class"].value_counts().items()},
    }  # fmt: skip
    exercised["sink_frac"] = float(tokens["sink_frac"].max()) if len(tokens) else 0.0
    windows = pd.DataFrame({"window": np.arange(N), "sink_rate": (alpha_all > epsilon).double().mean((0, 2)).numpy(),
                            "mean_sink_score": alpha_all.mean((0, 2)).numpy(), "mean_diag_score": (window_diag / (L * H)).numpy(),
                            "mlp_like_frac": (window_mlp / (L * (T - 1))).numpy(),
                            "tokens_hash": [sum(int(i) * pow(31, t, 2**31 - 1) for t, i in enumerate(row)) % (2**31 - 1)
                                            for row in ids.tolist()]})  # fmt: skip
    return Reference(heads, pd.DataFrame(layer_rows), pd.DataFrame(position_rows), tokens, token_layers, summary,
                     exercised, windows)


def key_token_tables(ids: torch.Tensor, received: torch.Tensor, epsilon: float, tokenizer) -> tuple:
    """`tokens` and `token_layers` from `received` (L, N, H, T-2) = mean_{t>k} A[t,k] for keys k = 1..T-2, by loops."""
    L, N, H, _ = received.shape
    entries: dict[int, dict] = {}
    for w in range(N):
        for k in range(1, ids.shape[1] - 1):
            entry = entries.setdefault(int(ids[w, k]), {"n": 0, "sum": np.zeros(L), "over": np.zeros(L)})
            entry["n"] += 1
            entry["sum"] += received[:, w, :, k - 1].sum(-1).numpy()
            entry["over"] += (received[:, w, :, k - 1] > epsilon).sum(-1).double().numpy()
    rows, long_rows = [], []
    for token_id, e in sorted(entries.items()):
        name = str(token_id) if tokenizer is None else tokenizer.decode([token_id])
        rows.append({"token_id": token_id, "token": name, "n": e["n"], "received_mean": e["sum"].sum() / (e["n"] * L * H),
                     "sink_frac": e["over"].sum() / (e["n"] * L * H)})  # fmt: skip
        for layer in range(L):
            long_rows.append({"token_id": token_id, "layer": layer, "n": e["n"],
                              "received_mean": e["sum"][layer] / (e["n"] * H),
                              "sink_frac": e["over"][layer] / (e["n"] * H)})  # fmt: skip
    return (pd.DataFrame(rows, columns=["token_id", "token", "n", "received_mean", "sink_frac"]),
            pd.DataFrame(long_rows, columns=["token_id", "layer", "n", "received_mean", "sink_frac"]))


def analyze_on_path(lm, windows, config, path: str, monkeypatch, block_elements: int | None = None) -> tuple:
    """`analyze` through one routing — "default", "fused" (`ROWS_UP_TO_SEQ_LEN` 0) or "blocks" (every layer) —
    with the CPU block budget `block_elements` if given. Returns the run, the path of every attention call and the
    first query of every block the feed received from the block path."""
    import sinkscope.capture.attention as attention
    import sinkscope.capture.blocks as blocks
    from sinkscope.capture.feed import Feed
    from sinkscope.pipelines.analysis import analyze

    taken: list[str] = []
    starts: list[int] = []
    route, on_block = attention.attention_path, Feed.on_block

    def spy(*args, **kwargs):
        taken.append("blocks" if path == "blocks" else route(*args, **kwargs))
        return taken[-1]

    def block_spy(self, layer, start, *args):
        starts.append(start)
        return on_block(self, layer, start, *args)

    with monkeypatch.context() as patch:
        patch.setattr(attention, "attention_path", spy)
        patch.setattr(Feed, "on_block", block_spy)
        if block_elements is not None:
            patch.setattr(blocks, "BLOCK_ELEMENTS", block_elements)
        if path == "fused":
            patch.setattr(attention.fused_cpu, "available", lambda: False)  # the compiled kernel would take it
            patch.setattr(attention, "ROWS_UP_TO_SEQ_LEN", 0)
        run = analyze(lm, windows, config, progress=False)
    return run, taken, starts


def massive_row(h: torch.Tensor) -> dict:
    """Massive activations of one layer's residual inputs h (N, T, d), from the whole tensor: the largest |h| and
    where (over windows, then the first position and channel), BOS's and the rest's maxima, and the exact median
    reported as the centre of its 1/8-octave bin (the statistic's resolution). Ties at BOS go to BOS."""
    a = h.abs().double()
    N, T, _ = a.shape
    c = int(a.amax((0, 1)).argmax())
    bos, rest = float(a[:, 0].max()), float(a[:, 1:].max())
    # ties (one token at two positions): the first window, then the first position, reaching the maximum
    t = 0 if float(a[:, 0, c].max()) >= float(a[:, 1:, c].max()) else int(np.argmax(a[:, 1:, c].flatten().numpy())) % (T - 1) + 1
    median = float(a.flatten().median())
    centre = 2.0 ** (-20 + (math.floor((math.log2(median) + 20) * 8) + 0.5) / 8)
    return {"massive_max": float(a.max()), "massive_position": t, "massive_channel": c, "massive_median": centre,
            "massive_ratio": float(a.max()) / centre, "massive_bos_max": bos, "massive_rest_max": rest,
            "massive_on_bos": bos >= rest}  # fmt: skip


KEYS = {"heads": ["layer", "head"], "layers": ["layer"], "positions": ["layer", "position"], "tokens": ["token_id"],
        "token_layers": ["token_id", "layer"], "windows": ["window"]}  # fmt: skip
# Counts and booleans must match exactly; γ and the span distance come from different solvers (tolerance 1e-5).
TOLERANCE = 2e-5


def compare(tables: dict[str, pd.DataFrame], summary: dict, ref: Reference, label: str = "") -> None:
    """Assert that every table of a run equals the reference column by column; a column on one side only fails."""
    for name, key in KEYS.items():
        got, expected = tables[name], getattr(ref, name)
        assert set(got.columns) == set(expected.columns), (
            f"{label} {name}: columns without a reference {sorted(set(got.columns) - set(expected.columns))}, "
            f"reference columns the run lacks {sorted(set(expected.columns) - set(got.columns))}"
        )
        assert len(got) == len(expected), f"{label} {name}: {len(got)} rows, expected {len(expected)}"
        got = got.sort_values(key, ignore_index=True)
        expected = expected.sort_values(key, ignore_index=True)
        for column in expected.columns:
            a, b = got[column].to_numpy(), expected[column].to_numpy()
            where = f"{label} {name}.{column}"
            if b.dtype.kind in "biuOU" or column in ("context_rank",) or column.startswith("switch_n_"):
                assert [str(x) for x in a] == [str(x) for x in b], f"{where}: {a} != {b}"
            else:
                # residual entries of 10³–10⁴ (massive activations) differ by ~2e-5 relative between batchings in
                # float32 on a real model
                rtol = 1e-4 if column.startswith("massive_") else TOLERANCE
                np.testing.assert_allclose(a.astype(float), b.astype(float), atol=TOLERANCE, rtol=rtol,
                                           equal_nan=True, err_msg=where)
    order = tables["tokens"][["sink_frac", "received_mean"]].to_numpy()
    assert all(tuple(order[i]) >= tuple(order[i + 1]) for i in range(len(order) - 1)), f"{label} tokens: not sorted"
    assert set(summary) == set(ref.summary), f"{label} summary keys {sorted(summary)} != {sorted(ref.summary)}"
    for key, expected in ref.summary.items():
        if isinstance(expected, dict) and key != "head_classes":
            assert set(summary[key]) == set(expected), f"{label} summary.{key}"
            for e, value in expected.items():
                assert math.isclose(summary[key][e], value, abs_tol=1e-12), f"{label} summary.{key}[{e}]"
        elif isinstance(expected, float):
            assert math.isclose(summary[key], expected, abs_tol=TOLERANCE), f"{label} summary.{key}"
        else:
            assert summary[key] == expected, f"{label} summary.{key}: {summary[key]} != {expected}"
