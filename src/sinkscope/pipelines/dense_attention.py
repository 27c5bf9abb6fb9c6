"""Dense attention inside the model's own forward pass (the oversmoothing claim, measured causally).

For a head h of layer l the intervention replaces its attention A by `A_λ = (1−λ) A + λ U`, U causal uniform
(U[t, j] = 1/(t+1) for j ≤ t), keeping everything else of the model (values, W_O, skip, norms, later layers). Since
the head's output `o_t = Σ_j A[t,j] v_j` is linear in A, `o_t(λ) = (1−λ) o_t + λ mean_{j≤t} v_j`: the hook rewrites
the head's slice of the output projection's input, with v from the value projection (GQA: the head's kv group).
λ = 1 is uniform causal attention. Measured per head and λ, on the same windows:

- `dcos`: the change of the mean pairwise cosine (over context tokens 1..T−1, pairs i ≠ j) of the residual stream
  leaving layer l (the next layer's input), from a re-run of layer l alone on its recorded inputs;
- per layer (all heads of l mixed at once) the same, and the change of next-token loss from full forward passes,
  paired over windows with a 95 % interval.

The prediction beside it is the paper's condition on the head's traces b = tr(ΣW̃), c = tr(W̃ᵀΣW̃) (SPEC §5, from
`pipelines.smoothing.smoothing_analysis` on the same windows), sorted into the regimes of
`theory.smoothing_regimes`. The prediction is about the identity → uniform path; the intervention here moves the
model's own attention towards uniform, which is the practical question ("does dense attention smooth more than
what the head does?").
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from sinkscope.capture.head_outputs import edited_head_outputs
from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel
from sinkscope.statistics.smoothing_curves import causal_uniform_mix, mean_pairwise_cosine
from sinkscope.theory.smoothing_regimes import REGIMES, smoothing_regime

Z95 = 1.959963984540054


@dataclass(frozen=True)
class DenseConfig:
    """lambdas: the mix weights of uniform attention for the cosine (per head and layer); loss_lambdas: those of
    the per-layer loss passes (one full pass per layer and λ)."""

    lambdas: tuple[float, ...] = (0.25, 0.5, 0.75, 1.0)
    loss_lambdas: tuple[float, ...] = (1.0,)

    def __post_init__(self) -> None:
        for name in ("lambdas", "loss_lambdas"):
            values = getattr(self, name)
            if any(not 0 < lam <= 1 for lam in values):
                raise SinkscopeError(f"--{name.replace('_', '-')} {','.join(map(str, values))}: each λ must be in "
                                     "(0, 1] (λ = 0 is the model itself, always measured)")  # fmt: skip


@contextmanager
def mixed_attention(lm: LoadedModel, heads: Sequence[tuple[int, int]], lam: float) -> Iterator[None]:
    """Inside the block, each (layer, head) attends with `(1−λ) A + λ U` (U causal uniform); hooks removed in
    `finally`. Raises if a forward pass ran and a hooked layer was not reached."""
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, head in heads:
        by_layer[layer].append(head)
    group = lm.layout.group

    def uniform_values(values: Tensor) -> Tensor:  # (B, T, n_kv, dh) → (B, n_kv, T, dh): mean_{j≤t} v_j
        return causal_uniform_mix(values.transpose(1, 2))

    def edit(_layer: int, head: int, output: Tensor, uniform: Tensor) -> Tensor:
        return (1 - lam) * output + lam * uniform[:, head // group]

    with edited_head_outputs(lm, by_layer, edit, uniform_values):
        yield


@contextmanager
def recorded_layer_calls(lm: LoadedModel) -> Iterator[dict[int, tuple]]:
    """Inside the block, every decoder layer's call (args, kwargs) of the last forward pass is kept by layer, so
    `rerun_layer` can run that layer alone on the same inputs (residual, position embeddings, mask)."""
    calls: dict[int, tuple] = {}
    handles = []
    for index, block in enumerate(lm.layers):
        def hook(_module, args, kwargs, index=index):
            calls[index] = (args, kwargs)

        handles.append(block.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        yield calls
    finally:
        for handle in handles:
            handle.remove()


def rerun_layer(lm: LoadedModel, layer: int, call: tuple) -> Tensor:
    """The residual stream leaving `layer` (B, T, d) when it runs again on its recorded `call`."""
    args, kwargs = call
    out = lm.layers[layer](*args, **kwargs)
    return out[0] if isinstance(out, tuple) else out


def context_cosine(h: Tensor) -> Tensor:
    """Mean pairwise cosine over context tokens 1..T−1 of each window: (B, T, d) → (B,)."""
    return mean_pairwise_cosine(h[:, 1:].double())


def check_uniform_reach(lm: LoadedModel, seq_len: int) -> None:
    """Causal uniform is over every key j ≤ t only if no sliding window hides keys in windows of `seq_len`."""
    window = getattr(lm.config, "sliding_window", None)
    if window is not None and seq_len > window:
        raise SinkscopeError(f"--seq-len {seq_len} exceeds the model's sliding window of {window}: uniform causal "
                             f"attention would differ between layers; use --seq-len ≤ {window}")  # fmt: skip


@torch.no_grad()
def head_cosines(lm: LoadedModel, batches: Sequence[Tensor], config: DenseConfig,
                 layers: Sequence[int] | None = None) -> pd.DataFrame:  # fmt: skip
    """Per (window, layer, head, λ): `cos` of the residual leaving the layer (λ = 0: the model's own); head −1
    mixes every head of the layer. One base pass per batch, then one single-layer re-run per (layer, head, λ), for
    every layer or those of `layers`."""
    L, H = len(lm.layers), lm.layout.n_heads
    rows, start = [], 0
    for ids in batches:
        ids = ids.to(lm.device)
        check_uniform_reach(lm, ids.shape[1])
        with recorded_layer_calls(lm) as calls:
            lm.base(input_ids=ids, use_cache=False)
        for layer in range(L) if layers is None else layers:
            base = context_cosine(rerun_layer(lm, layer, calls[layer]))
            for head in [*range(H), -1]:
                heads = [(layer, h) for h in range(H)] if head < 0 else [(layer, head)]
                values = {0.0: base}
                for lam in config.lambdas:
                    with mixed_attention(lm, heads, lam):
                        values[lam] = context_cosine(rerun_layer(lm, layer, calls[layer]))
                for lam, cos in values.items():
                    rows += [{"window": start + b, "layer": layer, "head": head, "lam": lam, "cos": float(cos[b])}
                             for b in range(len(ids))]  # fmt: skip
        start += len(ids)
    return pd.DataFrame(rows)


@torch.no_grad()
def window_losses(lm: LoadedModel, batches: Sequence[Tensor]) -> np.ndarray:
    """Mean next-token cross-entropy of each window (n_windows,) with whatever hooks are active."""
    out = []
    for ids in batches:
        ids = ids.to(lm.device)
        logits = lm.model(input_ids=ids, use_cache=False).logits
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
        out.append(ce.view(len(ids), -1).mean(1).double().cpu())
    return torch.cat(out).numpy()


def layer_losses(lm: LoadedModel, batches: Sequence[Tensor], config: DenseConfig) -> pd.DataFrame:
    """Per (layer, λ): Δ loss when all heads of the layer attend with `A_λ`, mean and 95 % interval over windows."""
    base = window_losses(lm, batches)
    rows = []
    H = lm.layout.n_heads
    for layer in range(len(lm.layers)):
        for lam in config.loss_lambdas:
            with mixed_attention(lm, [(layer, h) for h in range(H)], lam):
                delta = window_losses(lm, batches) - base
            half = Z95 * delta.std(ddof=1) / np.sqrt(len(delta)) if len(delta) > 1 else float("nan")
            rows.append({"layer": layer, "lam": lam, "base_loss": float(base.mean()), "dloss": float(delta.mean()),
                         "dloss_lo": float(delta.mean() - half), "dloss_hi": float(delta.mean() + half),
                         "n_windows": len(delta)})  # fmt: skip
    return pd.DataFrame(rows)


def head_table(cosines: pd.DataFrame, predicted: pd.DataFrame) -> pd.DataFrame:
    """One row per (layer, head; head −1 = whole layer): observed Δcos at each λ (mean over windows) and at λ = 1
    with its 95 % interval, the observed peak λ on the grid, and the prediction (b, c, regime, λ*)."""
    lam0 = cosines[cosines["lam"] == 0].set_index(["window", "layer", "head"])["cos"]
    rows = []
    for (layer, head), group in cosines.groupby(["layer", "head"]):
        curve = group.groupby("lam")["cos"].mean()
        row = {"layer": int(layer), "head": int(head), "cos_own": float(curve.loc[0.0])}
        for lam in curve.index[1:]:
            row[f"dcos_{lam:g}"] = float(curve.loc[lam] - curve.loc[0.0])
        last = group[group["lam"] == curve.index[-1]].set_index(["window", "layer", "head"])["cos"]
        delta = (last - lam0.reindex(last.index)).to_numpy()
        half = Z95 * delta.std(ddof=1) / np.sqrt(len(delta)) if len(delta) > 1 else float("nan")
        row.update(dcos=float(delta.mean()), dcos_lo=float(delta.mean() - half), dcos_hi=float(delta.mean() + half),
                   lambda_peak_obs=float(curve.idxmax()))  # fmt: skip
        rows.append(row)
    table = pd.DataFrame(rows)
    keep = ["layer", "head", "smooth_b", "smooth_c", "smooth_dense_more", "smooth_lambda_peak"]
    table = table.merge(predicted[keep], on=["layer", "head"], how="left")
    table["regime"] = [smoothing_regime(b, c) if b == b and c == c else None
                       for b, c in zip(table["smooth_b"], table["smooth_c"])]  # fmt: skip
    return table


def regime_counts(heads: pd.DataFrame) -> pd.DataFrame:
    """Heads per predicted regime, and how many of them smooth more under uniform attention than with their own."""
    single = heads[heads["head"] >= 0]
    rows = []
    for regime in REGIMES:
        group = single[single["regime"] == regime]
        rows.append({"regime": regime, "heads": len(group), "share": len(group) / max(len(single), 1),
                     "uniform_smooths_more": int((group["dcos"] > 0).sum()),
                     "significantly_more": int((group["dcos_lo"] > 0).sum()),
                     "significantly_less": int((group["dcos_hi"] < 0).sum())})  # fmt: skip
    return pd.DataFrame(rows)


def run_dense(lm: LoadedModel, windows, config: DenseConfig, progress: bool = False) -> dict:
    """Every table of the experiment on `windows` (batches LongTensor[B, T], held in memory): `heads`, `curves`
    (per window), `layers` (loss), `regimes`, and `meta`."""
    from sinkscope.pipelines.smoothing import smoothing_analysis

    started = time.perf_counter()
    batches = list(windows)
    if not batches:
        raise SinkscopeError("dense got no windows: use a larger corpus or a smaller --seq-len")
    tables = smoothing_analysis(lm, batches)
    predicted = pd.concat([tables.heads, tables.layers.assign(head=-1)])  # head −1: the layer's W = Σ_h W^h
    cosines = head_cosines(lm, batches, config)
    heads = head_table(cosines, predicted)
    losses = layer_losses(lm, batches, config)
    meta = {"config": asdict(config), "model": lm.identity,
            "corpus": windows.identity() if hasattr(windows, "identity") else {},
            "seq_len": int(batches[0].shape[1]), "timings": {"seconds": time.perf_counter() - started}}  # fmt: skip
    return {"heads": heads, "curves": cosines, "layers": losses, "regimes": regime_counts(heads), "meta": meta}


def save_dense(directory, result: dict, overwrite: bool = False):
    """Write `dense_heads.parquet`, `dense_curves.parquet` (per window), `dense_layers.parquet`,
    `dense_regimes.parquet`, `dense.json`, `figures/dense.png` and `report.html`, staged and renamed into place."""
    from sinkscope.report.dense_section import dense_figure
    from sinkscope.report.plots import figure_png
    from sinkscope.report.result_files import save_result_files

    meta = result["meta"]
    png = figure_png(dense_figure(result["heads"], result["layers"]))
    settings = {"model": (meta.get("model") or {}).get("name", "unnamed model"),
                "corpus": (meta.get("corpus") or {}).get("source"), "T": meta["seq_len"],
                "windows": int(result["curves"]["window"].nunique()),
                "λ (cosine)": ", ".join(map(str, meta["config"]["lambdas"])),
                "λ (loss)": ", ".join(map(str, meta["config"]["loss_lambdas"])),
                "seconds": f"{meta['timings']['seconds']:.1f}"}  # fmt: skip
    return save_result_files(
        directory, overwrite=overwrite,
        tables={f"dense_{name}.parquet": result[name] for name in ("heads", "curves", "layers", "regimes")},
        meta_name="dense.json", meta=meta, figures={"dense.png": ("Uniform attention inside the model", png)},
        title=f"sinkscope dense: {settings['model']}",
        intro="Each head's (or layer's) attention replaced inside the real forward pass by (1−λ) A + λ U, U causal "
        "uniform: change of the mean pairwise cosine of the residual leaving the layer (context tokens) and of "
        "the loss, beside the regime its traces b, c predict. Definitions in docs/experiments.md.",
        settings=settings,
        shown=[("Heads per predicted regime (dense_regimes.parquet)", result["regimes"]),
               ("Per layer, all heads mixed (dense_layers.parquet)", result["layers"]),
               ("Per head; head −1 = the whole layer (dense_heads.parquet)", result["heads"])],
    )  # fmt: skip
