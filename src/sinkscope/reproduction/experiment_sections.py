"""The sections of issue 36's experiments inside `reproduce`, each the per-window evidence of one claim of
`reproduction.experiment_claims` (declared like `reproduction.sections`: directory, key, compute, load):

- `eviction_section` (`MODEL/evict/`): next-token loss per window with the full cache, a recent window of w keys
  alone, the window plus BOS (the sink kept), and the window plus one random early context token (the control),
  through `pipelines.eviction` (`keep_mask`, `token_losses`), on windows of 2T tokens with w = T / 4;
- `dense_section` (`MODEL/dense/`): Δ of the mean pairwise cosine of the residual leaving a layer when one head, or
  the whole layer, attends uniformly (λ = 1) instead of with its own attention, per window
  (`pipelines.dense_attention.head_cosines`);
- `prevalence_section` (`MODEL/prevalence/`): every head classified in every window (`pipelines.prevalence`);
- `assumptions_section` (`MODEL/switch-assumptions/`): per (window, layer) the switch theorem's assumption
  quantities on the attention inputs z (`theory.halfspace.span_assumptions`) and the switch 2×2 over τ and δ
  (`reproduction.switch_evidence.layer_switch_evidence`), so the switch verdict can be restricted to the cells
  where the assumptions hold;
- `cost_regimes_theory` (`theory/cost-regimes/`, once per reproduction, no model): the closed-form boundary beside
  the exact costs (`pipelines.cost_regimes`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import is_fresh, log, swapped_directory, write_key
from sinkscope.reproduction.sections import (
    CAPTURE_PASSES,
    Section,
    forward_tokens,
    inputs,
    model_directory,
    read_arrays,
    read_table,
)

if TYPE_CHECKING:
    from sinkscope.models.load import LoadedModel


def eviction_shape(config: ReproduceConfig) -> tuple[int, int]:
    """(T, w) of the eviction windows: twice the analysis length (`--quick`: once), a recent window of a quarter of
    the analysis length."""
    return (1 if config.quick else 2) * config.seq_len, max(config.seq_len // 4, 1)


def experiment_windows(config: ReproduceConfig) -> int:
    """Windows of the per-window experiments (head classes, switch assumptions): `windows`, or under `--quick` the
    ablation windows (too few for a verdict, as the ablations)."""
    return config.ablation_windows if config.quick else config.windows


def eviction_losses(lm: LoadedModel, batches, window: int, seed: int) -> dict[str, np.ndarray]:
    """Per window, the mean loss over the targets of queries t ≥ w (`pipelines.eviction`): `full`, `recent` (the
    window alone), `sink` (plus position 0), `control` (plus one random position in 1 … w − 1), and the control's
    `position`."""
    import torch

    from sinkscope.pipelines.eviction import keep_mask, token_losses

    rng = np.random.default_rng(seed)
    out: dict[str, list] = {name: [] for name in ("full", "recent", "sink", "control", "position")}
    for ids in batches:
        ids = ids.to(lm.device)
        B, T = ids.shape
        position = torch.as_tensor(rng.integers(1, max(window, 2), size=(B, 1)), dtype=torch.long)
        kept = {"recent": torch.zeros(B, 0, dtype=torch.long), "sink": torch.zeros(B, 1, dtype=torch.long),
                "control": position}  # fmt: skip
        losses = {"full": token_losses(lm, ids)}
        for name, positions in kept.items():
            losses[name] = token_losses(lm, ids, keep_mask(T, window, positions.to(lm.device)))
        for name, ce in losses.items():
            out[name].append(ce[:, window:].double().mean(1).numpy())
        out["position"].append(position[:, 0].numpy())
    return {name: np.concatenate(parts) for name, parts in out.items()}


def eviction_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """Keep-the-sink losses on `ablation_windows` windows of the first corpus (`eviction_losses`)."""
    c = config
    T, window = eviction_shape(c)
    key = {"section": "evict", **inputs(name, c.corpora[0]), "seq_len": T, "window": window,
           "windows": c.ablation_windows, "seed": c.seed, "dtype": c.dtype, "version": 1}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows

        stream = windows(c.corpora[0], lm.tokenizer, T, c.ablation_windows, seed=c.seed, batch_size=4)
        arrays = eviction_losses(lm, stream, window, c.seed)
        with swapped_directory(target) as staging:
            np.savez(staging / "eviction.npz", window=np.array(window), seq_len=np.array(T), **arrays)

    label = f"keep-the-sink eviction (T={T}, w={window}, {c.ablation_windows} windows)"
    return Section(label, model_directory(out, name) / "evict", key, compute,
                   partial(read_arrays, name="eviction.npz"), forward_tokens(4, c.ablation_windows, T))  # fmt: skip


def dense_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """Uniform attention (λ = 1) per head and per layer on `ablation_windows` windows of the first corpus, in every
    `smoothing_layer_stride`-th layer (every layer at the default 1), read back as the per-window cosines
    (`dense_cosines.parquet`: window, layer, head (−1: the layer), lam, cos)."""
    c = config
    stride = c.smoothing_layer_stride
    key = {"section": "dense", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": c.ablation_windows, "lambdas": [1.0], "seed": c.seed, "dtype": c.dtype, "version": 1,
           **({"layer_stride": stride} if stride != 1 else {})}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.dense_attention import DenseConfig, head_cosines

        batches = list(windows(c.corpora[0], lm.tokenizer, c.seq_len, c.ablation_windows, seed=c.seed))
        layers = range(0, len(lm.layers), stride)
        frame = head_cosines(lm, batches, DenseConfig(lambdas=(1.0,), loss_lambdas=(1.0,)), layers)
        with swapped_directory(target) as staging:
            frame.to_parquet(staging / "dense_cosines.parquet", index=False)

    def work(lm: LoadedModel) -> float:
        """A clean pass, then per chosen layer H + 2 re-runs of that layer alone (its own, each head, all heads)."""
        L = len(lm.layers)
        return forward_tokens(1 + len(range(0, L, stride)) * (lm.layout.n_heads + 2) / L, c.ablation_windows,
                              c.seq_len)  # fmt: skip

    label = f"uniform attention per head and layer ({c.ablation_windows} windows)"
    return Section(label, model_directory(out, name) / "dense", key, compute,
                   partial(read_table, name="dense_cosines.parquet"), work)  # fmt: skip


def prevalence_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """Head classes per window (ε = 0.3) on `experiment_windows` windows of the first corpus
    (`prevalence_windows.parquet`)."""
    c, n_windows = config, experiment_windows(config)
    key = {"section": "prevalence", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": n_windows, "epsilon": 0.3, "seed": c.seed, "dtype": c.dtype, "version": 1}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.prevalence import classify, window_scores

        frame = window_scores(lm, windows(c.corpora[0], lm.tokenizer, c.seq_len, n_windows, seed=c.seed))
        frame["class"] = classify(frame, 0.3)
        with swapped_directory(target) as staging:
            frame.to_parquet(staging / "prevalence_windows.parquet", index=False)

    label = f"head classes per window ({n_windows} windows)"
    return Section(label, model_directory(out, name) / "prevalence", key, compute,
                   partial(read_table, name="prevalence_windows.parquet"),
                   forward_tokens(CAPTURE_PASSES, n_windows, c.seq_len))  # fmt: skip


def _layer_capture(lm: LoadedModel, ids, modules: dict) -> tuple[dict, dict, dict, dict]:
    """One forward pass of `ids` through sinkscope's attention path: per layer the value norms per query head
    (B, H, T), the attention blocks `(start, probs, out norms)`, the attention input z (B, T, d) as float64 and
    the singular values of each KV head's context values (B, KV, min(T − 1, dh), `context_value_spectrum`)."""
    from sinkscope.capture.attention import watch_attention
    from sinkscope.capture.layer_inputs import layer_input_hooks
    from sinkscope.functional.switch import context_value_spectrum

    values, rows, z_in, spectra = {}, {layer: [] for layer in modules}, {}, {}

    def on_values(layer, value):
        values[layer] = value.float().norm(dim=-1).repeat_interleave(lm.layout.group, dim=1)
        spectra[layer] = context_value_spectrum(value).cpu().numpy()

    def on_block(layer, start, probs, _entropy, block):
        rows[layer].append((start, probs.float(), block.float().norm(dim=-1)))

    def on_input(layer, _h, z):
        z_in[layer] = z.detach().double().cpu().numpy()

    with layer_input_hooks(lm, on_input, list(modules)), watch_attention(lm.model, modules, on_block, on_values):
        lm.base(input_ids=ids.to(lm.device), use_cache=False)
    return values, rows, z_in, spectra


def assumption_evidence(lm: LoadedModel, batches, tau: float = 0.1, delta: float = 0.1) -> dict[str, np.ndarray]:
    """Per (window, layer): `curve` (W, L, len(GRID), len(TAU_CURVE), 4), the switch 2×2 of
    `switch_evidence.layer_switch_evidence` (hard sink at δ × GRID); `heads` (W, L, H, 3), its per-head counts at
    δ, τ; `rank` (W, L), the numerical rank of the context inputs z_1..z_{T−1}; `distance` (W, L), |z_0 − P z_0| /
    |z_0|; `value_sv` (W, L, KV, min(T − 1, dh)), the singular values of each KV head's context values;
    `n_contexts`, `width` and `head_dim`."""
    import torch

    from sinkscope.models.families import attention_module
    from sinkscope.reproduction.switch_claims import GRID
    from sinkscope.reproduction.switch_evidence import layer_switch_evidence
    from sinkscope.theory.halfspace import span_assumptions

    L, H = len(lm.layers), lm.layout.n_heads
    modules = {layer: attention_module(lm.family, block) for layer, block in enumerate(lm.layers)}
    curves, heads, spectra, ranks, distances = [], [], [], [], []
    T = 0
    with torch.no_grad():
        for ids in batches:
            B, T = ids.shape
            values, rows, z_in, batch_spectra = _layer_capture(lm, ids, modules)
            batch_heads, batch_curves, batch_rank, batch_distance = [], [], np.zeros((B, L), int), np.zeros((B, L))
            for layer in range(L):
                attn = torch.zeros(B, H, T, T, device=lm.device)
                norms = torch.zeros(B, H, T, device=lm.device)
                for start, probs, out_norms in rows[layer]:
                    Q, K = probs.shape[-2:]
                    attn[:, :, start : start + Q, :K] = probs
                    norms[:, :, start : start + Q] = out_norms
                counts = layer_switch_evidence(attn, values[layer], norms, tau, delta)
                batch_curves.append(counts["curve"].numpy())
                batch_heads.append(counts["heads"][:, GRID.index(1.0), GRID.index(1.0)].numpy())
                for b in range(B):
                    batch_rank[b, layer], batch_distance[b, layer] = span_assumptions(z_in[layer][b, 1:],
                                                                                      z_in[layer][b, 0])  # fmt: skip
            curves.append(np.stack(batch_curves, 1))
            heads.append(np.stack(batch_heads, 1))
            spectra.append(np.stack([batch_spectra[layer] for layer in range(L)], 1))
            ranks.append(batch_rank)
            distances.append(batch_distance)
    return {"curve": np.concatenate(curves), "heads": np.concatenate(heads), "value_sv": np.concatenate(spectra),
            "rank": np.concatenate(ranks), "distance": np.concatenate(distances), "n_contexts": np.array(T - 1),
            "width": np.array(lm.layout.d_model), "head_dim": np.array(lm.layout.head_dim)}  # fmt: skip


def assumptions_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """`assumption_evidence` on `experiment_windows` windows of the first corpus (the windows of its switch section
    but under `--quick`)."""
    c, n_windows = config, experiment_windows(config)
    key = {"section": "switch-assumptions", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": n_windows, "seed": c.seed, "dtype": c.dtype, "switch_tau": c.switch_tau,
           "version": 2}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows

        batches = list(windows(c.corpora[0], lm.tokenizer, c.seq_len, n_windows, seed=c.seed))
        arrays = assumption_evidence(lm, batches, tau=c.switch_tau)
        with swapped_directory(target) as staging:
            np.savez(staging / "assumptions.npz", **arrays)

    label = f"switch assumptions per layer and window ({n_windows} windows)"
    return Section(label, model_directory(out, name) / "switch-assumptions", key, compute,
                   partial(read_arrays, name="assumptions.npz"),
                   forward_tokens(CAPTURE_PASSES, n_windows, c.seq_len))  # fmt: skip


def experiment_sections(name: str, config: ReproduceConfig, out: Path) -> dict[str, Section]:
    """Issue 36's sections of model `name`, by the name `experiment_claims.judge_experiments` reads them under."""
    return {"eviction": eviction_section(name, config, out), "dense": dense_section(name, config, out),
            "prevalence": prevalence_section(name, config, out),
            "assumptions": assumptions_section(name, config, out)}  # fmt: skip


def regime_config(config: ReproduceConfig):
    """`pipelines.cost_regimes.RegimeConfig` of the boundary claim: the command's default grid with 8 draws per
    cell (`--quick`: V = 3, K = 1, T = 4, rank 8, one draw)."""
    from sinkscope.pipelines.cost_regimes import RegimeConfig

    if config.quick:
        return RegimeConfig(Vs=(3,), Ks=(1,), Ts=(4,), ranks=(8,), seeds=1)
    return RegimeConfig(seeds=8)


def cost_regimes_theory(config: ReproduceConfig, out: Path) -> dict[str, pd.DataFrame]:
    """`vocabulary` and `geometry` tables of `pipelines.cost_regimes` for `regime_config`, written to
    `out/theory/cost-regimes/` and reused from there when its key matches."""
    from dataclasses import asdict

    regimes = regime_config(config)
    key = {"section": "cost-regimes", "config": asdict(regimes), "version": 1}
    directory = out / "theory" / "cost-regimes"
    names = ("vocabulary", "geometry")
    if is_fresh(directory, key):
        log(f"theory: cost regimes: reusing {directory}")
        return {name: pd.read_parquet(directory / f"regimes_{name}.parquet") for name in names}
    from sinkscope.pipelines.cost_regimes import geometry_table, vocabulary_table

    log("theory: cost regimes (closed-form boundary and exact programs)")
    tables = {"vocabulary": vocabulary_table(regimes), "geometry": geometry_table(regimes)}
    with swapped_directory(directory) as staging:
        for name in names:
            tables[name].to_parquet(staging / f"regimes_{name}.parquet", index=False)
    write_key(directory, key)
    return tables


def boundary_lab(config: ReproduceConfig, out: Path) -> dict:
    """The lab trained on both sides of the predicted cost boundary (`synthetic.boundary_runs`, its settings, seeds
    and steps), in `out/regimes-boundary/` and reused from there when its key matches: `{"runs": table}`, or
    `{"reason": why not}` (like the regime map, not trained under `--quick` or with `regimes=False`; trained also
    with `--regimes-from`, which reads the regime map only). The key holds the first run's whole configuration,
    so a changed base (`synthetic.regimes.REGIME_BASE`, a model default) retrains the lab."""
    from sinkscope.synthetic.boundary_runs import (
        BOUNDARY_SEEDS,
        BOUNDARY_SETTINGS,
        BOUNDARY_STEPS,
        boundary_config,
        run_boundary,
    )

    key = {"section": "regimes-boundary", "settings": [[s.vocab_size, s.contexts, s.width] for s in BOUNDARY_SETTINGS],
           "seeds": list(BOUNDARY_SEEDS), "steps": BOUNDARY_STEPS, "version": 1,
           "base": boundary_config(BOUNDARY_SETTINGS[0], 0).to_dict()}  # fmt: skip
    directory = out / "regimes-boundary"
    if is_fresh(directory, key):
        log(f"regimes: trained cost boundary: reusing {directory}")
        return {"runs": pd.read_parquet(directory / "boundary_runs.parquet")}
    if config.quick or not config.regimes:
        return {"reason": "the lab is not trained on the cost boundary under --quick nor with regimes=False (12 "
                "small models, a few CPU-minutes); run without them"}  # fmt: skip
    from sinkscope.reproduction.regime_section import regime_workers

    n = len(BOUNDARY_SETTINGS) * len(BOUNDARY_SEEDS)
    workers = regime_workers(n)
    log(f"regimes: training {n} bigram-backcopy models across the predicted cost boundary, {workers} at once")
    with swapped_directory(directory) as staging:
        runs = run_boundary(staging / "runs", progress=lambda line: log(f"regimes: boundary: {line}"),
                            workers=workers)  # fmt: skip
        runs.to_parquet(staging / "boundary_runs.parquet", index=False)
    write_key(directory, key)
    return {"runs": runs}
