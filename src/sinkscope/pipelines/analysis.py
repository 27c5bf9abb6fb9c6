"""The analysis pipeline: stream windows through the base model, reduce attention as it is computed, tabulate.

`analyze(lm, windows)` ties capture (hooks + blocked attention) to the statistics of SPEC §2–§4 and returns a
`Run` whose tables are those of SPEC §8.
"""

from __future__ import annotations

import contextlib
import math
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from sinkscope.capture.attention import watch_attention
from sinkscope.capture.collector import StatsCollector
from sinkscope.capture.layer_inputs import layer_input_hooks
from sinkscope.corpus.windows import TokenWindows, Windows
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.checkpoint import load_checkpoint, save_checkpoint
from sinkscope.pipelines.run import Run
from sinkscope.provenance import package_versions
from sinkscope.stats.patterns import finalize_pattern_scores, head_class
from sinkscope.stats.switch import finalize_switch


@dataclass(frozen=True)
class AnalyzeConfig:
    """Thresholds of an analysis (SPEC §2–§4). `epsilon`: sink-rate threshold (Gu et al.: 0.3); `delta`:
    hard-pattern threshold; `tau`: switch threshold; `geometry_cap`: attention inputs sampled per layer for the
    half-space certificates; `seed`: that sample's seed; `epsilons`: more sink-rate thresholds counted in the
    same pass (summary `sink_rates`), so an ε sweep needs one pass and no per-window storage."""

    epsilon: float = 0.3
    delta: float = 0.1
    tau: float = 0.1
    geometry_cap: int = 256
    seed: int = 0
    epsilons: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilons", tuple(float(e) for e in self.epsilons))
        for name, value in [("epsilon", self.epsilon), ("delta", self.delta), ("tau", self.tau)] + [
            ("epsilons", e) for e in self.epsilons
        ]:
            if not 0 < value < 1:
                raise SinkscopeError(f"--{name} {value} must lie strictly between 0 and 1")

    @property
    def thresholds(self) -> tuple[float, ...]:
        """`epsilon` first, then the other `epsilons` (each once)."""
        return tuple(dict.fromkeys((self.epsilon, *self.epsilons)))
        if self.geometry_cap < 0:
            raise SinkscopeError(f"geometry_cap {self.geometry_cap} must be ≥ 0")


def check_seq_len(lm: LoadedModel, seq_len: int) -> None:
    """A clear error for a window longer than the model's context."""
    limit = lm.max_positions
    if limit is not None and seq_len > limit:
        raise SinkscopeError(f"--seq-len {seq_len} exceeds the model's context of {limit} tokens; use ≤ {limit}")


@torch.no_grad()
def analyze(
    lm: LoadedModel,
    windows: Windows | TokenWindows,
    config: AnalyzeConfig | None = None,
    *,
    progress: bool = True,
    checkpoint_dir: str | Path | None = None,
    checkpoint_every: int = 0,
    resume: bool = False,
    smoothing: bool = False,
) -> Run:
    """Per-head and per-layer statistics of a model on a corpus (SPEC §2–§4, §8), streamed over windows.

    Under `torch.distributed` (e.g. `torchrun`), each rank analyses its shard of the windows (set
    `windows.shard`) and the accumulators are all-reduced, so every rank returns the result of the whole corpus.
    With `checkpoint_dir` and `checkpoint_every` N, the streaming state is saved every N windows (per rank);
    `resume` continues from it. The checkpoint directory is removed once the run completes.
    `smoothing` also computes the SPEC §5 tables (`sinkscope.pipelines.smoothing`) in the same forward passes; their sums
    are neither all-reduced nor checkpointed, so it needs a single process and a run that is not resumed.
    """
    from tqdm.auto import tqdm

    config = config or AnalyzeConfig()
    check_seq_len(lm, windows.seq_len)
    rank, world = distributed_shard()
    layout, blocks = lm.layout, lm.layers
    collector = StatsCollector(
        len(blocks), layout.n_heads, layout.group, windows.seq_len, config.delta, config.tau,
        config.geometry_cap, config.seed, lm.device, epsilons=config.thresholds,
    )  # fmt: skip
    collector.dtype_name = lm.identity.get("dtype", "float32")
    collector.shard = (rank, world)
    fingerprint = {"config": asdict(config), "model": lm.identity, "corpus": windows.identity(), "world": world}
    fingerprint["corpus"].pop("windows", None)
    if resume and checkpoint_dir is not None:
        windows.skip = load_checkpoint(collector, Path(checkpoint_dir), rank, fingerprint)
    if smoothing and (world > 1 or windows.skip):
        raise SinkscopeError("smoothing in the capture pass needs one process and a fresh run; use add_smoothing")
    smoother = None
    if smoothing:
        from sinkscope.pipelines.smoothing import SmoothingCollector

        smoother = SmoothingCollector(lm)
    attention = {index: attention_module(lm.family, block) for index, block in enumerate(blocks)}
    total = None if windows.max_windows is None else math.ceil(windows.max_windows / world / windows.batch_size)
    started = time.perf_counter()
    analysed = 0
    with (
        layer_input_hooks(lm, collector.on_layer_input),
        watch_attention(lm.model, attention, collector.on_block, collector.on_values, collector.on_layer),
        smoother.hooks() if smoother else contextlib.nullcontext(),
    ):
        bar = tqdm(windows, total=total, desc="analyze", unit="batch", disable=not progress or rank != 0)
        for batch in bar:
            batch = batch.to(lm.device)
            collector.begin_batch(batch)
            lm.base(input_ids=batch, use_cache=False)
            collector.end_batch(len(batch))
            analysed += len(batch)
            if checkpoint_dir is not None and checkpoint_every and analysed % checkpoint_every < len(batch):
                save_checkpoint(collector, Path(checkpoint_dir), rank, fingerprint)
    seconds = time.perf_counter() - started
    if world > 1:
        collector.all_reduce()
    heads, layers, positions = tabulate(collector, windows.seq_len, config.epsilon)
    tokens, token_layers = token_tables(collector, lm.tokenizer)
    geometry_started = time.perf_counter()
    if config.geometry_cap > 0:
        certificates = sink_certificates(collector, config, progress=progress and rank == 0)
        layers = layers.merge(certificates, on="layer", how="left")
    corpus = windows.identity() | {"windows": collector.windows}
    meta = {
        "config": asdict(config),
        "model": lm.identity,
        "corpus": corpus,
        "versions": package_versions(),
        "timings": {
            "analyze_seconds": seconds,
            "tokens_per_second": analysed * world * windows.seq_len / seconds,
            "geometry_seconds": time.perf_counter() - geometry_started,
            "world_size": world,
        },
        "summary": summary(heads, collector, config.thresholds),
    }
    run = Run(meta=meta, heads=heads, layers=layers, positions=positions,
              extra={"tokens": tokens, "token_layers": token_layers})
    if smoother is not None:
        from sinkscope.pipelines.smoothing import merge_smoothing

        merge_smoothing(run, smoother.tables())
    if checkpoint_dir is not None and Path(checkpoint_dir).is_dir():
        if world > 1:
            torch.distributed.barrier()
        if rank == 0:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return run


def distributed_shard() -> tuple[int, int]:
    """(rank, world size) of the running `torch.distributed` group, (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def tabulate(collector: StatsCollector, seq_len: int, epsilon: float) -> tuple[pd.DataFrame, ...]:
    """The SPEC §8 tables from a collector's sums, after checking the captured patterns were causal softmax."""
    sums = {name: tensor.cpu() for name, tensor in collector.acc.tensors.items()}
    W, T = collector.windows, seq_len
    if W == 0:
        raise SinkscopeError("no window was analysed")
    row_error = (sums["row_total"] / (W * T) - 1).abs().max().item()
    upper = sums["upper_mass"].max().item() / (W * T)
    if row_error > 1e-4 or upper > 1e-6:
        raise SinkscopeError(
            f"captured attention is not a causal softmax (row-sum error {row_error:.2e}, mass above the "
            f"diagonal {upper:.2e}): the model's attention mask was not applied; please report this model"
        )
    L, H = sums["sink"].shape
    head_rows = []
    for layer in range(L):
        per_layer = {k: v[layer] for k, v in sums.items() if v.dim() > 0 and k != "key_exceed"}
        scores = finalize_pattern_scores(per_layer, W, T)
        switch = finalize_switch(per_layer, W, T)
        for head in range(H):
            row = {"layer": layer, "head": head}
            row |= {k: float(v[head]) for k, v in scores.items() if k != "key_scores"}
            row["head_class"] = head_class(
                row["sink_score"], row["diag_score"], row["prev_score"], row["entropy"], epsilon
            )
            row |= {k: float(v[head]) for k, v in switch.items()}
            row |= {f"switch_{k}": int(sums[k][layer, head]) for k in ("n_off_sink", "n_off_nosink", "n_on_sink",
                                                                       "n_on_nosink")}
            head_rows.append(row)
    heads = pd.DataFrame(head_rows)
    # Gu et al.'s sink rate: α^w thresholded per window, then averaged (key 0 is the head's sink score).
    window_rates = sums["key_exceed"][0] / W  # (L, H, T): mean_w [α^w_{l,h,k} > ε]
    heads["sink_rate"] = window_rates[..., 0].flatten().numpy()
    key_scores = sums["keys"] / (torch.arange(T, 0, -1, dtype=torch.float64) * W)  # (L, H, T): α_k
    layers = pd.DataFrame({"layer": np.arange(L)})
    layers["sink_rate"] = heads.groupby("layer")["sink_rate"].mean().values
    layers["sink_rate_of_mean"] = (
        heads.groupby("layer")["sink_score"].apply(lambda s: float((s > epsilon).mean())).values
    )
    layers["mlp_like_frac"] = (sums["mlp_like"] / (W * (T - 1))).numpy()
    n_ctx = W * (T - 1)
    for kind in "hz":
        layers[f"bos_cos_mean_{kind}"] = (sums[f"{kind}_cos_sum"] / n_ctx).numpy()
        layers[f"bos_cos_max_{kind}"] = sums[f"{kind}_cos_max"].numpy()
        layers[f"bos_cos_nonpos_frac_{kind}"] = (sums[f"{kind}_cos_nonpos"] / n_ctx).numpy()
        layers[f"bos_norm_ratio_{kind}"] = (sums[f"{kind}_norm_ratio_sum"] / W).numpy()
    positions = pd.DataFrame(
        {
            "layer": np.repeat(np.arange(L), T),
            "position": np.tile(np.arange(T), L),
            "sink_rate": window_rates.mean(1).flatten().numpy(),
            "sink_rate_of_mean": (key_scores > epsilon).double().mean(1).flatten().numpy(),
            "mean_key_score": key_scores.mean(1).flatten().numpy(),
            "max_key_score": key_scores.amax(1).flatten().numpy(),
        }
    )
    return heads, layers, positions


def sink_certificates(collector: StatsCollector, config: AnalyzeConfig, progress: bool = False) -> pd.DataFrame:
    """SPEC §4 half-space certificates per layer (γ1, γ2, representability, span assumptions of SPEC §3) on the
    collector's uniform sample of at most `geometry_cap` context attention inputs per layer."""
    from sinkscope.theory.halfspace import layer_geometry

    samples = {
        layer: (collector.sink_inputs[layer].double().numpy(), rows.double().numpy())
        for layer, (_, rows) in collector.samples.items()
    }
    from tqdm.auto import tqdm

    with tqdm(total=len(samples), desc="geometry", unit="layer", disable=not progress) as bar:
        table = layer_geometry(samples, cap=config.geometry_cap, seed=config.seed, on_layer=lambda _: bar.update())
    return table.drop(columns=["n_contexts"])


def token_tables(collector: StatsCollector, tokenizer) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The SPEC §2 key-token table: per token id (`tokens`) and per (token id, layer) (`token_layers`), from the
    collector's per-token sums over occurrences at positions 1..T-2; `token` is the id decoded alone."""
    table = collector.tokens
    ids = table.keys.cpu().numpy()
    n = table.tensors["n"].cpu().numpy()
    received, exceed = (table.tensors[name].cpu().numpy() for name in ("received", "received_exceed"))  # (N, L)
    L, H = received.shape[1], collector.acc.tensors["sink"].shape[1]
    decoded = [tokenizer.decode([int(i)]) if tokenizer is not None else str(int(i)) for i in ids]
    tokens = pd.DataFrame({
        "token_id": ids, "token": decoded, "n": n.astype(np.int64),
        "received_mean": received.sum(1) / (n * L * H), "sink_frac": exceed.sum(1) / (n * L * H),
    }).sort_values(["sink_frac", "received_mean"], ascending=False, ignore_index=True)  # fmt: skip
    token_layers = pd.DataFrame({
        "token_id": np.repeat(ids, L), "layer": np.tile(np.arange(L), len(ids)), "n": np.repeat(n, L).astype(np.int64),
        "received_mean": (received / (n[:, None] * H)).flatten(), "sink_frac": (exceed / (n[:, None] * H)).flatten(),
    })  # fmt: skip
    return tokens, token_layers


def summary(heads: pd.DataFrame, collector: StatsCollector, thresholds: tuple[float, ...]) -> dict:
    """Model-level numbers printed by the CLI and shown first in the report. `sink_rate` is Gu et al.'s
    (per-window threshold, SPEC §2) at `thresholds[0]`; `sink_rates` gives it at every threshold, and
    `sink_rate_of_mean` / `sink_rates_of_mean` threshold the window-mean sink score of each head instead."""
    per_window = collector.acc.tensors["key_exceed"][..., 0].cpu() / collector.windows  # (E, L, H)
    return {
        "sink_rate": float(per_window[0].mean()),
        "sink_rate_of_mean": float((heads["sink_score"] > thresholds[0]).mean()),
        "epsilon": thresholds[0],
        "sink_rates": {str(e): float(per_window[i].mean()) for i, e in enumerate(thresholds)},
        "sink_rates_of_mean": {str(e): float((heads["sink_score"] > e).mean()) for e in thresholds},
        "mean_sink_score": float(heads["sink_score"].mean()),
        "mean_diag_score": float(heads["diag_score"].mean()),
        "head_classes": {k: int(v) for k, v in heads["head_class"].value_counts().items()},
    }
