"""Evaluate per-head KV-cache plans with the masks `evict` trusts: streaming KV heads see the first `sink_size` keys
and the recent window (`eviction.keep_mask`, checked there against a decoding loop over an evicting cache: "evict,
positions kept"), full KV heads every key; each query head takes its KV head's mask. One forward pass per plan.

**Probe windows.** Each corpus window x (T tokens, BOS first) becomes `x[:P] ++ x[a:a+m]` with m = `span`,
P = T − m and a = max(sink_size, 1): its opening span copied at the end, P − a − 1 ≥ recent_size tokens away, so a
streaming head cannot see the first copy from any copy query. Two numbers per window and plan:

- `loss`: mean next-token cross-entropy (nats) of the natural text's targets beyond the window, queries
  recent_size ≤ t < P − 1 (the first queries whose keys a streaming head drops);
- `accuracy`: share of the copy's tokens 1..m−1 that are the argmax of the logits at the query before them
  (retrieval of a far span: induction over the evicted middle).

**Memory.** A full head keeps T keys, a streaming one min(T, sink_size + recent_size); `memory` is the kept share of
the full cache, Σ_heads kept / (KV heads · T), at the probe length T. Equal memory is an equal count of full heads.

**Policies** at each count of full KV heads: `sinkscope` (the `measures` rule of `pipelines.kv_plan`), `far-mass`,
`random` (`draws` uniform draws of which heads stay full), `oracle` (full for the heads whose own streaming, every
other head full, raises the loss most, measured on these same windows), `plan` (a given plan folder, at its own
share); `streaming` (every head streamed: StreamingLLM's cache with positions kept) and `full` close the curve.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.eviction import Z95, keep_mask
from sinkscope.pipelines.masked_attention import custom_attention, masked_sdpa

if TYPE_CHECKING:
    from matplotlib.figure import Figure

NAME = "sinkscope_kv_plan"  # the attention implementation registered inside `plan_attention`
_MASKS: ContextVar[Tensor | None] = ContextVar("_MASKS", default=None)


@dataclass(frozen=True)
class EvalConfig:
    """shares: fractions of full KV heads to compare at; draws: random plans per share; span: copied tokens; seed:
    the random plans' seed."""

    shares: tuple[float, ...] = (0.25, 0.5, 0.75)
    draws: int = 20
    span: int = 16
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.shares or any(not 0 <= s <= 1 for s in self.shares):
            raise SinkscopeError(f"--shares {','.join(map(str, self.shares))} must be fractions in [0, 1]")
        if self.draws < 1 or self.span < 2:
            raise SinkscopeError(f"--draws {self.draws} must be ≥ 1 and --span {self.span} ≥ 2")

    def check_lengths(self, seq_len: int, sink_size: int, recent_size: int) -> None:
        """The first copy must lie beyond every copy query's window, and some natural target beyond the window."""
        start, P = max(sink_size, 1), seq_len - self.span
        if P - start - 1 < recent_size or P - 1 <= recent_size:
            raise SinkscopeError(f"--seq-len {seq_len} leaves the copied span (--span {self.span}) within "
                                 f"--recent-size {recent_size} of its copy: use --seq-len ≥ "
                                 f"{self.span + start + 1 + recent_size}")  # fmt: skip


def plan_masks(full: np.ndarray, group: int, seq_len: int, sink_size: int, recent_size: int) -> Tensor:
    """Bool[L, H, T, T]: query head h of layer l sees key j from query t iff j ≤ t and, when its KV head h // group
    is streamed (`full[l, h // group]` False), j < sink_size or t − j < recent_size."""
    streaming = keep_mask(seq_len, recent_size, torch.arange(sink_size)[None])[0]  # (T, T)
    causal = torch.ones(seq_len, seq_len, dtype=torch.bool).tril()
    keep = torch.as_tensor(np.asarray(full, dtype=bool))[..., None, None]  # (L, KV, 1, 1)
    return torch.where(keep, causal, streaming).repeat_interleave(group, dim=1)


def _plan_attention(module, query, key, value, attention_mask, **kwargs):
    """sdpa attention with the model's own mask AND this layer's per-head plan mask (1, H, T, T)."""
    masks = _MASKS.get()
    if masks is None or getattr(module, "layer_idx", None) is None:
        raise SinkscopeError("the KV-plan attention ran outside `plan_attention` or on a module without layer_idx")
    allowed = masks[module.layer_idx][None].to(query.device)
    if allowed.shape[-2:] != (query.shape[-2], key.shape[-2]):
        raise SinkscopeError(f"plan mask of {tuple(allowed.shape[-2:])} for attention of {query.shape[-2]}×"
                             f"{key.shape[-2]}: the plan is for one forward pass over whole windows")  # fmt: skip
    return masked_sdpa(module, query, key, value, attention_mask, allowed, **kwargs)


@contextmanager
def plan_attention(lm: LoadedModel, masks: Tensor) -> Iterator[None]:
    """Inside the block every attention layer l of `lm` restricts query head h to `masks[l, h]` (Bool[L, H, T, T]);
    the previous attention implementation comes back in `finally`."""
    token = _MASKS.set(masks)
    try:
        with custom_attention(lm, NAME, _plan_attention):
            yield
    finally:
        _MASKS.reset(token)


def probe(ids: Tensor, span: int, sink_size: int) -> Tensor:
    """LongTensor[B, T]: `ids[:, :T−span]` followed by a copy of `ids[:, a:a+span]`, a = max(sink_size, 1)."""
    start = max(sink_size, 1)
    return torch.cat([ids[:, : ids.shape[1] - span], ids[:, start:start + span]], 1)


@torch.no_grad()
def window_scores(lm: LoadedModel, probes: list[Tensor], masks: Tensor | None, span: int, recent_size: int) -> np.ndarray:
    """Float64[W, 2]: (loss, accuracy) of every probe window (module doc) with the attention restricted to `masks`
    (None: the model's own)."""
    rows = []
    for ids in probes:
        ids = ids.to(lm.device)
        T, P = ids.shape[1], ids.shape[1] - span
        if masks is None:
            logits = lm.model(input_ids=ids, use_cache=False, logits_to_keep=T - recent_size).logits
        else:
            with plan_attention(lm, masks):
                logits = lm.model(input_ids=ids, use_cache=False, logits_to_keep=T - recent_size).logits
        logits, targets = logits[:, :-1].float(), ids[:, recent_size + 1:]  # queries recent_size .. T−2
        ce = F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")  # (B, T − 1 − recent_size)
        natural, copy = slice(0, P - 1 - recent_size), slice(P - recent_size, None)
        correct = (logits.argmax(-1) == targets).double()
        rows.append(torch.stack([ce[:, natural].double().mean(1), correct[:, copy].mean(1)], 1).cpu())
    return torch.cat(rows).numpy()


def memory_share(n_full: int, n_heads: int, seq_len: int, sink_size: int, recent_size: int) -> float:
    """Σ kept keys / (KV heads · T): full heads keep T, streaming ones min(T, sink_size + recent_size)."""
    return (n_full * seq_len + (n_heads - n_full) * min(seq_len, sink_size + recent_size)) / (n_heads * seq_len)


def compare(lm: LoadedModel, probes: list[Tensor], orders: dict[str, np.ndarray], shape: tuple[int, int, int],
            sink_size: int, recent_size: int, config: EvalConfig, plan: np.ndarray | None = None,
            progress: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:  # fmt: skip
    """(rows, oracle): one row per (policy, draw, n_full, window) with `loss`, `accuracy`, `memory`; and the
    oracle's table of every KV head's own loss increase. orders: policy → flat head indices, most needed first
    (`kv_plan.need_order`); shape: (layers, KV heads, group); plan: Bool[L, KV] of a given plan folder."""
    from tqdm.auto import tqdm

    L, KV, group = shape
    N, T = L * KV, probes[0].shape[1]
    done: dict[bytes, np.ndarray] = {}

    def run(full: np.ndarray) -> np.ndarray:
        key = full.tobytes()
        if key not in done:
            all_full = bool(full.all())
            masks = None if all_full else plan_masks(full, group, T, sink_size, recent_size)
            done[key] = window_scores(lm, probes, masks, config.span, recent_size)
        return done[key]

    def flat(indices) -> np.ndarray:
        full = np.zeros(N, dtype=bool)
        full[list(indices)] = True
        return full.reshape(L, KV)

    counts = sorted({round(s * N) for s in config.shares} - {0, N})
    rng = np.random.default_rng(config.seed)
    jobs = [("full", 0, N, flat(range(N))), ("streaming", 0, 0, flat([]))]
    total = N + len(counts) * (len(orders) + 1 + config.draws) + (plan is not None)
    bar = tqdm(total=total, desc="kv-plan eval", disable=not progress)
    base = run(jobs[0][3])
    increase = []
    for i in range(N):  # the oracle: stream one KV head, keep every other full
        increase.append(float((run(flat(set(range(N)) - {i}))[:, 0] - base[:, 0]).mean()))
        bar.update()
    orders = {**orders, "oracle": np.argsort(-np.asarray(increase), kind="stable")}
    for n in counts:
        jobs += [(policy, 0, n, flat(order[:n])) for policy, order in orders.items()]
        jobs += [("random", d, n, flat(rng.permutation(N)[:n])) for d in range(config.draws)]
    if plan is not None:
        jobs.append(("plan", 0, int(plan.sum()), np.asarray(plan, dtype=bool)))
    rows = []
    for policy, draw, n, full in jobs:
        scores = run(full)
        bar.update(policy not in ("full", "streaming"))
        memory = memory_share(n, N, T, sink_size, recent_size)
        rows += [{"policy": policy, "draw": draw, "n_full": n, "share": n / N, "memory": memory, "window": w,
                  "loss": float(s[0]), "accuracy": float(s[1])} for w, s in enumerate(scores)]  # fmt: skip
    bar.close()
    oracle = pd.DataFrame({"layer": np.arange(N) // KV, "kv_head": np.arange(N) % KV, "loss_increase": increase})
    return pd.DataFrame(rows), oracle


def summarize(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per (policy, n_full): mean loss and accuracy over windows (random: over windows and draws, with the
    2.5–97.5 % range of the draws' means), Δ loss against the full cache with a 95 % interval over windows (paired;
    random: the draws' range), and for `sinkscope`, `far-mass` and `oracle` the share of random draws at the same
    memory whose loss is higher (`beats_random`)."""
    full = rows[rows["policy"] == "full"].set_index("window")["loss"]
    out = []
    for (policy, n), g in rows.groupby(["policy", "n_full"], sort=False):
        per_draw = g.groupby("draw")[["loss", "accuracy"]].mean()
        delta = g.groupby("draw").apply(lambda d: (d.set_index("window")["loss"] - full).mean(), include_groups=False)
        row = {"policy": policy, "n_full": int(n), "share": float(g["share"].iloc[0]),
               "memory": float(g["memory"].iloc[0]), "loss": float(per_draw["loss"].mean()),
               "accuracy": float(per_draw["accuracy"].mean()), "delta_full": float(delta.mean())}  # fmt: skip
        if policy == "random":
            lo, hi = np.percentile(delta, [2.5, 97.5])
            acc_lo, acc_hi = np.percentile(per_draw["accuracy"], [2.5, 97.5])
            row.update(delta_lo=float(lo), delta_hi=float(hi), accuracy_lo=float(acc_lo), accuracy_hi=float(acc_hi),
                       draws=len(per_draw))  # fmt: skip
        else:
            d = (g.set_index("window")["loss"] - full).to_numpy()
            half = Z95 * d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
            row.update(delta_lo=float(d.mean() - half), delta_hi=float(d.mean() + half), draws=1)
        out.append(row)
    table = pd.DataFrame(out)
    random = rows[rows["policy"] == "random"].groupby(["n_full", "draw"])["loss"].mean()
    table["beats_random"] = [float((random.loc[n] > loss).mean()) if n in random.index.get_level_values(0)
                             and p in ("sinkscope", "far-mass", "oracle", "plan") else float("nan")
                             for p, n, loss in zip(table["policy"], table["n_full"], table["loss"])]  # fmt: skip
    return table.sort_values(["n_full", "policy"]).reset_index(drop=True)


def figure(summary: pd.DataFrame, title: str) -> Figure:
    """Loss (left) and copy accuracy (right) against the share of KV memory kept: one line per ranked policy, the
    random draws' mean with their 2.5–97.5 % band, `streaming` and `full` as the curve's ends."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9, 3.6))
    axes = fig.subplots(1, 2)
    ends = summary[summary["policy"].isin(["streaming", "full"])]
    styles = {"sinkscope": "#c0392b", "far-mass": "#d68910", "oracle": "#2471a3", "random": "#777777",
              "plan": "#1e8449"}  # fmt: skip
    for ax, column in zip(axes, ("loss", "accuracy")):
        for policy, color in styles.items():
            rows = pd.concat([ends, summary[summary["policy"] == policy]]).sort_values("memory")
            if (summary["policy"] == policy).any():
                ax.plot(rows["memory"], rows[column], "o-", color=color, label=policy, ms=3)
        rand = summary[summary["policy"] == "random"].sort_values("memory")
        band = ("delta_lo", "delta_hi") if column == "loss" else ("accuracy_lo", "accuracy_hi")
        if len(rand):
            shift = rand["loss"] - rand["delta_full"] if column == "loss" else 0.0
            ax.fill_between(rand["memory"], rand[band[0]] + shift, rand[band[1]] + shift, color="#bbbbbb", alpha=0.5)
        ax.set_xlabel("share of KV memory kept")
        ax.set_ylabel("loss beyond the window (nats)" if column == "loss" else "copy accuracy")
    axes[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig
