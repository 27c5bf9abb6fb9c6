"""Per-head KV-cache plans read off sinkscope's statistics, in DuoAttention's format (Xiao et al. 2024).

A *streaming* KV head keeps only the first `sink_size` keys and the last `recent_size` (query t sees key j iff
j < sink_size or t − j < recent_size, itself included: `evict`'s convention); a *full* KV head keeps every key. A
plan streams every KV head but a requested share.

**The rule.** A streaming head loses, at query t, exactly the attention it puts on the evicted keys. The paper's
measures bound from below the share it keeps: `sink_score` (mass on key 0, kept when sink_size ≥ 1), `diag_score`
(key t, always in the window) and `prev_score` (key t − 1, in the window when recent_size ≥ 2). So for a query head

    kept = min(1, [sink_size ≥ 1]·sink_score + diag_score + [recent_size ≥ 2]·prev_score)

and heads with a large `kept` — the sink, diagonal and previous-token heads — lose little when streamed (rule
`measures`, the default; ties go to the lower `entropy`, the more concentrated head). The rule `far-mass` ranks by
the direct measurement instead, `streamable = 1 − far_mass` with

    far_mass = mean over windows and queries t ≥ sink_size + recent_size of Σ_{sink_size ≤ j ≤ t − recent_size} A[t, j]

(`far_mass`, one eager pass over the windows). A KV head serves its whole group of query heads (GQA: query head h
reads KV head h // (heads / num_key_value_heads)), so a KV head is as streamable as its least streamable query head:
`kept` and `streamable` take the minimum over the group, `far_mass` and `entropy` the maximum.

**The files.** `full_attention_heads.tsv` is layers × KV heads, tab-separated, higher = full cache, as DuoAttention's
`load_attn_pattern` reads it (`np.loadtxt(..., delimiter="\\t")`, clipped to [0, 1]); `config.json` holds
`sink_size` and `recent_size`. The values rank the heads: the plan's full heads hold the values in (0.5, 1] and its
streaming heads those in [0, 0.5), each by rank of need (1 − streamable), so thresholding at 0.5 (DuoAttention's
default) gives this plan and a quantile (DuoAttention's `--sparsity`, kvpress's `head_compression_ratio`) gives the
same ranking at another share. See docs/kv-plans.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.load import LoadedModel

PLAN_FILE, CONFIG_FILE, HEADS_FILE = "full_attention_heads.tsv", "config.json", "kv_plan_heads.parquet"
RULES = ("measures", "far-mass")


@dataclass(frozen=True)
class PlanConfig:
    """share: fraction of KV heads kept with a full cache, in [0, 1]; sink_size, recent_size: a streaming head's
    kept keys (first tokens, recent window with the query itself); rule: `measures` or `far-mass` (module doc)."""

    share: float = 0.5
    sink_size: int = 4
    recent_size: int = 32
    rule: str = "measures"

    def __post_init__(self) -> None:
        if not 0 <= self.share <= 1:
            raise SinkscopeError(f"--share {self.share} must lie in [0, 1] (the fraction of KV heads kept full)")
        if self.sink_size < 0 or self.recent_size < 1:
            raise SinkscopeError(f"--sink-size {self.sink_size} must be ≥ 0 and --recent-size {self.recent_size} ≥ 1")
        if self.rule not in RULES:
            raise SinkscopeError(f"--rule {self.rule} must be one of {', '.join(RULES)}")


def kv_head_count(config: object) -> tuple[int, int, int]:
    """(layers, KV heads, query heads per KV head) from a model config that names `num_key_value_heads`."""
    config = getattr(config, "text_config", None) or config
    n_kv = getattr(config, "num_key_value_heads", None)
    n_heads = getattr(config, "num_attention_heads", None)
    name = getattr(config, "name_or_path", None) or getattr(config, "model_type", "the model")
    if missing := [field for field, n in (("num_key_value_heads", n_kv), ("num_attention_heads", n_heads)) if not n]:
        raise SinkscopeError(f"the config of {name} names no {' and no '.join(missing)}: a KV plan is layers × KV "
                             f"heads; set {' and '.join(missing)} in its config.json (num_key_value_heads = "
                             "num_attention_heads for multi-head attention)")  # fmt: skip
    if n_heads % n_kv:
        raise SinkscopeError(f"the config of {name} has {n_heads} attention heads, not a multiple of its "
                             f"{n_kv} KV heads")  # fmt: skip
    return int(config.num_hidden_layers), int(n_kv), n_heads // n_kv


def far_mass(attn: Tensor, sink_size: int, recent_size: int) -> Tensor:
    """Float64[H]: mean over batch and queries t ≥ sink_size + recent_size of Σ_{sink_size ≤ j ≤ t − recent_size}
    A[t, j], the attention a streaming head would lose. attn: (B, H, T, T) rows of a causal softmax; NaN when
    T ≤ sink_size + recent_size (no query loses a key)."""
    T = attn.shape[-1]
    t = torch.arange(T, device=attn.device)[:, None]
    j = torch.arange(T, device=attn.device)[None, :]
    evicted = (j >= sink_size) & (t - j >= recent_size)  # (T, T); empty rows for t < sink_size + recent_size
    lost = (attn.double() * evicted).sum(-1)[..., sink_size + recent_size:]  # (B, H, queries)
    return lost.mean((0, 2)).cpu()


@torch.no_grad()
def measure_far_mass(lm: LoadedModel, batches: Iterable[Tensor], sink_size: int, recent_size: int) -> np.ndarray:
    """Float[L, H]: `far_mass` of every query head, averaged over the batches (one eager pass of the base model)."""
    previous, sums, n = lm.model.config._attn_implementation, None, 0
    try:
        lm.model.set_attn_implementation("eager")
        for ids in batches:
            attentions = lm.base(input_ids=ids.to(lm.device), output_attentions=True, use_cache=False).attentions
            batch = torch.stack([far_mass(a, sink_size, recent_size) for a in attentions]) * ids.shape[0]
            sums, n = (batch if sums is None else sums + batch), n + ids.shape[0]
    finally:
        lm.model.set_attn_implementation(previous)
    if sums is None:
        raise SinkscopeError("kv-plan got no windows to measure far mass on: use a larger corpus")
    return (sums / n).numpy()


def head_scores(heads: pd.DataFrame, far: np.ndarray, group: int, config: PlanConfig) -> pd.DataFrame:
    """One row per (layer, kv_head): the group's query heads, its measures (min over the group of sink, diag,
    prev and `kept`; max of entropy and far mass), `streamable` under `config.rule`, the head classes of the group,
    and `need` = 1 − streamable (what the plan keeps full). heads: analyze's heads table (layer, head, sink_score,
    diag_score, prev_score, entropy, head_class); far: Float[L, H] from `measure_far_mass`."""
    h = heads.sort_values(["layer", "head"]).reset_index(drop=True)
    kept = (h["sink_score"] * (config.sink_size >= 1) + h["diag_score"]
            + h["prev_score"] * (config.recent_size >= 2)).clip(upper=1.0)  # fmt: skip
    h = h.assign(kept=kept, far_mass=far[h["layer"].to_numpy(), h["head"].to_numpy()], kv_head=h["head"] // group)
    rows = []
    for (layer, kv), g in h.groupby(["layer", "kv_head"], sort=True):
        classes = g["head_class"].value_counts()
        rows.append({
            "layer": int(layer), "kv_head": int(kv), "query_heads": ",".join(map(str, g["head"])),
            "sink_score": float(g["sink_score"].min()), "diag_score": float(g["diag_score"].min()),
            "prev_score": float(g["prev_score"].min()), "entropy": float(g["entropy"].max()),
            "kept": float(g["kept"].min()), "far_mass": float(g["far_mass"].max()),
            "classes": ", ".join(f"{c}×{n}" for c, n in classes.items()),
        })  # fmt: skip
    table = pd.DataFrame(rows)
    table["streamable"] = table["kept"] if config.rule == "measures" else 1.0 - table["far_mass"]
    table["need"] = 1.0 - table["streamable"]
    return table


def need_order(scores: pd.DataFrame) -> np.ndarray:
    """Row indices of `scores` from the most to the least needed full cache: `need` descending, ties by entropy
    descending (a more spread head needs more), then by (layer, kv_head)."""
    return np.lexsort((scores["kv_head"], scores["layer"], -scores["entropy"], -scores["need"]))


def full_heads(order: np.ndarray, n_layers: int, n_kv: int, share: float) -> np.ndarray:
    """Bool[L, KV]: the first round(share · L · KV) heads of `order` (flat row indices, layer-major) kept full."""
    full = np.zeros(n_layers * n_kv, dtype=bool)
    full[order[: round(share * n_layers * n_kv)]] = True
    return full.reshape(n_layers, n_kv)


def plan_values(order: np.ndarray, full: np.ndarray) -> np.ndarray:
    """Float[L, KV] in [0, 1]: full heads in (0.5, 1], streaming ones in [0, 0.5), each ranked by `order` (higher =
    more needed), so `values > 0.5` is `full` and the values sort as `order`."""
    flat_full = full.reshape(-1)
    values = np.zeros(flat_full.size)
    for keep, low in ((True, 0.5), (False, 0.0)):
        ranked = [i for i in order if flat_full[i] == keep]  # most needed first
        for r, i in enumerate(ranked):
            values[i] = low + 0.5 * (len(ranked) - r) / (len(ranked) + (0 if keep else 1))
    return values.reshape(full.shape)


def write_plan(directory: str | Path, values: np.ndarray, scores: pd.DataFrame, config: PlanConfig, meta: dict,
               extra: dict[str, pd.DataFrame] | None = None, figures: dict[str, bytes] | None = None) -> Path:
    """Write the plan folder, staged and renamed into place: `full_attention_heads.tsv`, `config.json`
    (`sink_size`, `recent_size` and sinkscope's settings under `sinkscope`), `kv_plan_heads.parquet` (`scores`
    with `value` and `full`), and any `extra` tables (parquet) and `figures` (PNG under figures/)."""
    from sinkscope.staging import check_replaceable, staged_directory

    directory = Path(directory)
    check_replaceable(directory, overwrite=True)
    table = scores.assign(value=values[scores["layer"], scores["kv_head"]],
                          full=values[scores["layer"], scores["kv_head"]] > 0.5)  # fmt: skip
    table["reason"] = [_reason(row, config) for row in table.itertuples()]
    with staged_directory(directory) as staging:
        np.savetxt(staging / PLAN_FILE, values, delimiter="\t", fmt="%.6f")
        settings = {"sink_size": config.sink_size, "recent_size": config.recent_size,
                    "sinkscope": {"plan": asdict(config), **meta}}  # fmt: skip
        (staging / CONFIG_FILE).write_text(json.dumps(settings, indent=2, default=str))
        table.to_parquet(staging / HEADS_FILE, index=False)
        for name, frame in (extra or {}).items():
            frame.to_parquet(staging / name, index=False)
        if figures:
            (staging / "figures").mkdir()
            for name, png in figures.items():
                (staging / "figures" / name).write_bytes(png)
    return directory


def _reason(row, config: PlanConfig) -> str:
    """'full: kept ≥ 0.31 (sink 0.20, diag 0.08, prev 0.03), far mass 0.52; mixed×3'."""
    kind = "full" if row.full else "streaming"
    return (f"{kind}: kept ≥ {row.kept:.2f} (sink {row.sink_score:.2f}, diag {row.diag_score:.2f}, prev "
            f"{row.prev_score:.2f}), far mass {row.far_mass:.2f} [{config.rule}]; {row.classes}")  # fmt: skip


def read_plan(directory: str | Path, n_layers: int, n_kv: int) -> tuple[np.ndarray, int, int]:
    """(values Float[L, KV] clipped to [0, 1], sink_size, recent_size) of a DuoAttention-format plan folder, read as
    DuoAttention reads it; refuses a plan of another layout (layers × KV heads differ) before any work."""
    directory = Path(directory)
    tsv, cfg = directory / PLAN_FILE, directory / CONFIG_FILE
    if not tsv.is_file() or not cfg.is_file():
        raise SinkscopeError(f"--plan {directory} is not a KV plan folder (needs {PLAN_FILE} and {CONFIG_FILE})")
    try:
        # ndmin=2: a plan of one KV head per layer (or of one layer) stays a matrix, where DuoAttention gets a vector
        values = np.clip(np.loadtxt(tsv, dtype=float, delimiter="\t", ndmin=2), 0, 1)
        settings = json.loads(cfg.read_text(encoding="utf-8"))
        sink, recent = int(settings["sink_size"]), int(settings["recent_size"])
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as err:
        raise SinkscopeError(f"--plan {directory} cannot be read ({err}); write it again with sinkscope kv-plan") from None
    if values.shape != (n_layers, n_kv):
        raise SinkscopeError(f"--plan {directory} is {values.shape[0]} layers × {values.shape[1]} KV heads but the "
                             f"model has {n_layers} × {n_kv}: it is the plan of another model")  # fmt: skip
    return values, sink, recent
