"""Keep-the-sink evaluation (StreamingLLM, Xiao et al. 2023): next-token loss when each query sees only a recent
window of keys, the window plus the first k tokens, or the window plus the k tokens of largest column mass.

**A mask, not a loop over a cache.** A KV cache that evicts key j before query t is reached is, for query t, the set
of keys it can still see. Decoding token by token with such a cache computes each token's hidden states once, when
that token is the query, from the keys its own cache held then; a single forward pass over the whole window with the
attention of row t restricted to the same key set computes exactly the same numbers, **provided the cached keys keep
the RoPE rotation of their absolute position** — Hugging Face caches store keys after RoPE, so evicting entries from
them (and feeding the query its absolute position) is what the mask reproduces; `tests/integration/test_eviction.py`
checks it against such a decoding loop. StreamingLLM itself re-assigns positions *within the cache* (Xiao et al.
2023, §3.2: a kept first token sits at cache position i, the window right after it), which changes the relative
distance between a query and the kept first tokens once the window is full; no single mask over the full sequence
reproduces that, and this module does not implement it. What is measured here is "evict, positions kept".

Policies, each query t seeing keys j ≤ t with t − j < w (the recent window, the query included) plus a kept set S:
`full` (no eviction), `recent` (S = ∅), `first` (S = {0..k−1}: BOS is position 0) and `top-mass` (S = the k positions
of largest column mass Σ_t A[t,j], averaged over layers and heads, of the window's own full-attention pass: an oracle
that reads the whole window, H2O's accumulated-attention score). Loss is the mean cross-entropy of the targets of
queries t ≥ w, the only ones whose key set is changed.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.masked_attention import custom_attention, masked_sdpa

NAME = "sinkscope_keep"  # the attention implementation registered with transformers inside `restricted_attention`
POLICIES = ("full", "recent", "first", "top-mass")
Z95 = 1.959963984540054  # two-sided 95 % normal quantile
_KEEP: ContextVar[Tensor | None] = ContextVar("_KEEP", default=None)


@dataclass(frozen=True)
class EvictConfig:
    """window: keys a query keeps from its recent past, itself included (w ≥ 1); ks: sizes of the kept set."""

    window: int = 64
    ks: tuple[int, ...] = (0, 1, 2, 4)

    def __post_init__(self) -> None:
        if self.window < 1:
            raise SinkscopeError(f"--window {self.window} must be at least 1 (the query itself)")
        if not self.ks or any(k < 0 for k in self.ks):
            raise SinkscopeError(f"--ks {','.join(map(str, self.ks))} must be one or more sizes ≥ 0, e.g. 0,1,2,4")

    def check_seq_len(self, seq_len: int) -> None:
        """Eviction changes a query's keys only once t ≥ w; a window needs at least one such query with a target, and
        every kept set must fit in the window's T positions."""
        if seq_len - 1 <= self.window:
            raise SinkscopeError(f"--window {self.window} leaves no evicted query in windows of {seq_len} tokens: "
                                 f"use --seq-len > {self.window + 1} or a smaller --window")  # fmt: skip
        if max(self.ks) >= seq_len:  # a kept set is k of the window's own T positions
            raise SinkscopeError(f"--ks {max(self.ks)} keeps more tokens than a window of {seq_len} has: use sizes "
                                 f"below --seq-len {seq_len}")  # fmt: skip


def keep_mask(seq_len: int, window: int, kept: Tensor) -> Tensor:
    """Bool[B, T, T]: query t may see key j iff j ≤ t and (t − j < window or j ∈ kept[b]).

    kept: LongTensor[B, k] positions kept for every query of window b (k may be 0).
    """
    t = torch.arange(seq_len, device=kept.device)[:, None]
    j = torch.arange(seq_len, device=kept.device)[None, :]
    causal = j <= t
    extra = torch.zeros(kept.shape[0], seq_len, dtype=torch.bool, device=kept.device)
    extra.scatter_(1, kept, True)
    return (causal & (t - j < window))[None] | (causal[None] & extra[:, None, :])


def _keep_attention(module, query, key, value, attention_mask, **kwargs):
    """sdpa attention with the model's own mask (causal, sliding window) AND the `restricted_attention` mask."""
    keep = _KEEP.get()
    if keep is None:
        raise SinkscopeError("the keep-mask attention ran outside `restricted_attention`")
    q_len, k_len = query.shape[-2], key.shape[-2]
    if keep.shape[-2:] != (q_len, k_len):
        raise SinkscopeError(f"keep mask of {tuple(keep.shape[-2:])} for attention of {q_len}×{k_len}: the "
                             "restriction is for one forward pass over whole windows, without a cache")  # fmt: skip
    return masked_sdpa(module, query, key, value, attention_mask, keep[:, None], **kwargs)  # keep: (B, 1, T, T)


@contextmanager
def restricted_attention(lm: LoadedModel, keep: Tensor) -> Iterator[None]:
    """Inside the block, every attention layer of `lm` lets query t see key j only where `keep[b, t, j]`
    (Bool[B, T, T], from `keep_mask`); the previous attention implementation comes back in `finally`."""
    token = _KEEP.set(keep)
    try:
        with custom_attention(lm, NAME, _keep_attention):
            yield
    finally:
        _KEEP.reset(token)


@torch.no_grad()
def token_losses(lm: LoadedModel, ids: Tensor, keep: Tensor | None = None) -> Tensor:
    """Cross-entropy (nats) of every target, Float[B, T−1] (entry t: token t+1 predicted at position t), with the
    attention restricted to `keep` (Bool[B, T, T]) or, for None, the model's own."""
    if keep is None:
        logits = lm.model(input_ids=ids, use_cache=False).logits
    else:
        with restricted_attention(lm, keep):
            logits = lm.model(input_ids=ids, use_cache=False).logits  # (B, T, V)
    ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
    return ce.view(ids.shape[0], -1).cpu()


@torch.no_grad()
def column_mass(lm: LoadedModel, ids: Tensor) -> Tensor:
    """Σ_t A[t, j] averaged over layers and heads, Float[B, T], from one eager pass with the full cache."""
    previous = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation("eager")
        attentions = lm.base(input_ids=ids, output_attentions=True, use_cache=False).attentions  # L × (B, H, T, T)
    finally:
        lm.model.set_attn_implementation(previous)
    return torch.stack([a.float().sum(-2).mean(1) for a in attentions]).mean(0).cpu()


def kept_sets(config: EvictConfig, mass: Tensor) -> list[tuple[str, int, Tensor]]:
    """(policy, k, LongTensor[B, k]) for every policy but `full`: `recent` once (k = 0 in `ks`), then `first` and
    `top-mass` for each k ≥ 1."""
    B = mass.shape[0]
    sets = [("recent", 0, torch.zeros(B, 0, dtype=torch.long))] if 0 in config.ks else []
    for k in sorted(k for k in set(config.ks) if k > 0):
        sets.append(("first", k, torch.arange(k).expand(B, k)))
        sets.append(("top-mass", k, mass.topk(min(k, mass.shape[1]), dim=1).indices.sort(dim=1).values))
    return sets


def evaluate(lm: LoadedModel, batches: Iterable[Tensor], config: EvictConfig, progress: bool = False) -> pd.DataFrame:
    """One row per (window, policy, k): `loss` (mean over the targets of queries t ≥ w), `loss_all` (over every
    target), `kept` (the kept positions, "0,1"), `n_targets`."""
    from tqdm.auto import tqdm

    rows, start = [], 0
    for ids in tqdm(batches, desc="evict", unit="batch", disable=not progress):
        ids = ids.to(lm.device)
        B, T = ids.shape
        config.check_seq_len(T)
        runs = [("full", 0, None, token_losses(lm, ids))]
        done: dict[tuple, Tensor] = {}  # kept sets already evaluated: top-mass often equals first k (a sink)
        for policy, k, kept in kept_sets(config, column_mass(lm, ids)):
            key = tuple(map(tuple, kept.tolist()))
            if key not in done:
                done[key] = token_losses(lm, ids, keep_mask(T, config.window, kept.to(lm.device)))
            runs.append((policy, k, kept, done[key]))
        for policy, k, kept, ce in runs:
            for b in range(B):
                rows.append({
                    "window": start + b, "policy": policy, "k": k,
                    "kept": "" if kept is None else ",".join(str(int(p)) for p in kept[b]),
                    "loss": float(ce[b, config.window:].double().mean()), "loss_all": float(ce[b].double().mean()),
                    "n_targets": T - 1 - config.window,
                })  # fmt: skip
        start += B
    if not rows:
        raise SinkscopeError("evict got no windows: use a larger corpus or a smaller --seq-len")
    return pd.DataFrame(rows)


def paired(losses: pd.DataFrame, policy: str, k: int, against: tuple[str, int]) -> dict[str, float]:
    """Mean per-window loss difference (policy, k) − `against` with its 95 % normal interval over windows."""
    def series(p: str, kk: int) -> pd.Series:
        return losses[(losses["policy"] == p) & (losses["k"] == kk)].set_index("window")["loss"]

    delta = (series(policy, k) - series(*against)).dropna().to_numpy()
    half = Z95 * delta.std(ddof=1) / np.sqrt(len(delta)) if len(delta) > 1 else float("nan")
    mean = float(delta.mean())
    return {"mean": mean, "lo": mean - half, "hi": mean + half}


def summarize(losses: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, k): mean loss, Δ against the full cache and against the recent window alone (mean and
    95 % interval over windows, paired), and for `top-mass` the share of windows whose kept set holds position 0."""
    rows = []
    has_recent = bool(((losses["policy"] == "recent")).any())
    for (policy, k), group in losses.groupby(["policy", "k"], sort=False):
        vs_full = paired(losses, policy, k, ("full", 0))
        vs_recent = paired(losses, policy, k, ("recent", 0)) if has_recent else dict.fromkeys(("mean", "lo", "hi"))
        holds_bos = group["kept"].str.split(",").apply(lambda s: "0" in s).mean() if policy != "full" else 1.0
        rows.append({
            "policy": policy, "k": int(k), "loss": float(group["loss"].mean()),
            "delta_full": vs_full["mean"], "delta_full_lo": vs_full["lo"], "delta_full_hi": vs_full["hi"],
            "delta_recent": vs_recent["mean"], "delta_recent_lo": vs_recent["lo"],
            "delta_recent_hi": vs_recent["hi"], "bos_kept_frac": float(holds_bos), "n_windows": len(group),
        })  # fmt: skip
    return pd.DataFrame(rows)


def run_eviction(lm: LoadedModel, windows, config: EvictConfig, progress: bool = False):
    """Evaluate every policy on `windows` (batches LongTensor[B, T]); returns (losses, summary, meta)."""
    started = time.perf_counter()
    losses = evaluate(lm, windows, config, progress)
    meta = {
        "config": asdict(config),
        "model": lm.identity,
        "corpus": windows.identity() if hasattr(windows, "identity") else {},
        "seq_len": int(losses["n_targets"].iloc[0]) + 1 + config.window,
        "positions": "absolute (RoPE of the original position kept; StreamingLLM re-assigns cache positions)",
        "timings": {"seconds": time.perf_counter() - started},
    }
    return losses, summarize(losses), meta


def save_eviction(directory, losses: pd.DataFrame, summary: pd.DataFrame, meta: dict, overwrite: bool = False):
    """Write `eviction.parquet` (per window), `eviction_summary.parquet`, `eviction.json`,
    `figures/eviction.png` and `report.html` into `directory`, staged and renamed into place."""
    from sinkscope.report.eviction_section import eviction_figure
    from sinkscope.report.plots import figure_png
    from sinkscope.report.result_files import save_result_files

    window = meta["config"]["window"]
    png = figure_png(eviction_figure(summary, window))
    settings = {
        "model": (meta.get("model") or {}).get("name", "unnamed model"),
        "corpus": (meta.get("corpus") or {}).get("source"),
        "windows": int(summary["n_windows"].iloc[0]),
        "T": meta["seq_len"],
        "recent window w": window,
        "positions": meta["positions"],
        "seconds": f"{meta['timings']['seconds']:.1f}",
    }
    return save_result_files(
        directory, overwrite=overwrite,
        tables={"eviction.parquet": losses, "eviction_summary.parquet": summary}, meta_name="eviction.json",
        meta=meta, figures={"eviction.png": ("Loss change against the full cache", png)},
        title=f"sinkscope evict: {settings['model']}",
        intro="Next-token loss (nats/token, targets of queries t ≥ w) when each query keeps only its recent w keys, "
        "plus the first k tokens or the k tokens of largest column mass; Δ against the full cache and against "
        "the window alone, paired over windows, with 95 % intervals. Definitions in docs/experiments.md.",
        settings=settings, shown=[("Per policy and k (eviction_summary.parquet)", summary)],
    )  # fmt: skip
