"""Which heads to ablate: head specs ("3.1,4.2"), classes, per-head scores and the random baseline (issue 3).

Heads are chosen by list, by class, by a score (the k% with the lowest AHON-LN or the highest hard-sink
fraction, as Sandoval-Segura et al. 2025 do), or at random (the baseline reported beside every score).
Per-head scores come from a previous `sinkscope analyze` run (heads.parquet) or from `head_scores`, a short
pass over a few windows.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from sinkscope.capture.head_ablation import Head
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module
from sinkscope.models.load import LoadedModel

SCORE_SELECTIONS = {
    # selection name: (heads.parquet column, True when the lowest scores are removed first)
    "lowest-ahon-ln": ("ahon_ln", True),
    "highest-hard-sink": ("hard_sink_frac", False),
}
HARD_SINK_DELTA = 0.1  # SPEC §2: a query is hard-sink when A[t,0] ≥ 1 - δ


@torch.no_grad()
def head_scores(
    lm: LoadedModel, windows: Iterable[Tensor], delta: float = HARD_SINK_DELTA, progress: bool = False
) -> pd.DataFrame:
    """Per-head AHON, AHON-LN (SPEC §3) and hard-sink fraction (SPEC §2) from a short pass over `windows`.

    AHON = mean over windows and positions of `||o_t||` (the head's slice of the output projection input);
    the attention maps come from `output_attentions` with eager attention, switched on for this pass only.
    Columns: layer, head, ahon, ahon_ln, hard_sink_frac.
    """
    from tqdm.auto import tqdm

    layout, blocks = lm.layout, lm.layers
    n_layers, H = len(blocks), layout.n_heads
    norm_sums = torch.zeros(n_layers, H, dtype=torch.float64)
    sink_sums = torch.zeros(n_layers, H, dtype=torch.float64)
    n_tokens = n_queries = 0
    handles = []

    def norm_hook(layer: int):
        def hook(_module, args):
            B, T = args[0].shape[:2]
            per_head = args[0].reshape(B, T, H, layout.head_dim)
            norm_sums[layer] += per_head.float().norm(dim=-1).sum((0, 1)).double().cpu()

        return hook

    previous = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation("eager")
        for layer, block in enumerate(blocks):
            output_proj = getattr(attention_module(lm.family, block), lm.family.output_proj)
            handles.append(output_proj.register_forward_pre_hook(norm_hook(layer)))
        for ids in tqdm(windows, desc="score heads", unit="batch", disable=not progress):
            out = lm.base(input_ids=ids.to(lm.device), use_cache=False, output_attentions=True)  # no LM head
            if out.attentions is None or len(out.attentions) != n_layers:
                raise SinkscopeError("the model returned no attention maps with eager attention; cannot score heads")
            for layer, attn in enumerate(out.attentions):  # (B, H, T, T)
                sink_sums[layer] += (attn[:, :, 1:, 0] >= 1 - delta).sum((0, 2)).double().cpu()
            n_tokens += ids.numel()
            n_queries += ids.shape[0] * (ids.shape[1] - 1)
    finally:
        for handle in handles:
            handle.remove()
        lm.model.set_attn_implementation(previous)
    if n_tokens == 0:
        raise SinkscopeError("head scoring got no windows: use a larger corpus or a smaller --seq-len")
    ahon = norm_sums / n_tokens
    layer_index, head_index = np.meshgrid(np.arange(n_layers), np.arange(H), indexing="ij")
    return pd.DataFrame(
        {
            "layer": layer_index.ravel(),
            "head": head_index.ravel(),
            "ahon": ahon.numpy().ravel(),
            "ahon_ln": (ahon / ahon.mean(1, keepdim=True)).numpy().ravel(),
            "hard_sink_frac": (sink_sums / n_queries).numpy().ravel(),
        }
    )


def scores_from_run(run_dir: str | Path) -> pd.DataFrame:
    """Per-head scores of a previous `sinkscope analyze` run: its heads.parquet (SPEC §8)."""
    path = Path(run_dir) / "heads.parquet"
    if not path.is_file():
        raise SinkscopeError(f"--from-run {run_dir}: no heads.parquet there; pass an analyze output directory")
    frame = pd.read_parquet(path)
    missing = {"layer", "head"} - set(frame.columns)
    if missing:
        raise SinkscopeError(f"{path} lacks the columns {sorted(missing)}; re-run sinkscope analyze")
    return frame


def format_heads(heads: Iterable[Head]) -> str:
    """`[(3, 1), (4, 2)]` → "3.1,4.2" (the CLI's `heads:` syntax)."""
    return ",".join(f"{layer}.{head}" for layer, head in heads)


def parse_heads(spec: str) -> list[Head]:
    """"3.1,4.2" → `[(3, 1), (4, 2)]` (layer.head, 0-indexed)."""
    heads = []
    for item in spec.split(","):
        parts = item.strip().split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise SinkscopeError(f"head {item!r} is not LAYER.HEAD (e.g. heads:3.1,4.2)")
        heads.append((int(parts[0]), int(parts[1])))
    return heads


def heads_of_class(scores: pd.DataFrame, head_class: str) -> list[Head]:
    """Every head whose `head_class` (SPEC §2, from heads.parquet) equals `head_class`."""
    if "head_class" not in scores.columns:
        raise SinkscopeError("selecting by class needs heads.parquet with a head_class column (use --from-run)")
    chosen = scores[scores["head_class"] == head_class]
    if chosen.empty:
        found = ", ".join(sorted(map(str, scores["head_class"].unique())))
        raise SinkscopeError(f"no head has class {head_class!r}; classes present: {found}")
    return list(zip(chosen["layer"].astype(int), chosen["head"].astype(int)))


def count_for_fraction(n_total: int, fraction: float) -> int:
    """Number of heads a fraction of `n_total` removes: rounded, at least 1."""
    if not 0 < fraction <= 1:
        raise SinkscopeError(f"fraction {fraction} must be in (0, 1]")
    return max(1, round(fraction * n_total))


def heads_by_score(scores: pd.DataFrame, selection: str, count: int) -> list[Head]:
    """The `count` heads ranked first by a score selection (`SCORE_SELECTIONS`); ties broken by (layer, head)."""
    if selection not in SCORE_SELECTIONS:
        raise SinkscopeError(f"selection {selection!r} is not one of {', '.join(SCORE_SELECTIONS)}")
    column, lowest_first = SCORE_SELECTIONS[selection]
    if column not in scores.columns:
        raise SinkscopeError(f"selection {selection} needs the column {column} in the head scores")
    ranked = scores.sort_values([column, "layer", "head"], ascending=[lowest_first, True, True], kind="stable")
    return list(zip(ranked["layer"].astype(int)[:count], ranked["head"].astype(int)[:count]))


def random_heads(n_layers: int, n_heads: int, count: int, seed: int) -> list[Head]:
    """`count` heads drawn uniformly without replacement (the baseline), reproducible from `seed`."""
    flat = np.random.default_rng(seed).choice(n_layers * n_heads, size=count, replace=False)
    return sorted((int(i // n_heads), int(i % n_heads)) for i in flat)


def head_sets_for(
    selections: Sequence[str],
    fractions: Sequence[float],
    scores: pd.DataFrame | None,
    n_layers: int,
    n_heads: int,
    n_random: int = 3,
    seed: int = 0,
) -> tuple[dict[str, list[Head]], dict[str, tuple[str, float, int]]]:
    """Named head sets for each selection, with `n_random` random draws of the same size beside each.

    selections: `lowest-ahon-ln`, `highest-hard-sink` (one set per fraction), `random` (baseline only),
    `class:NAME` or `heads:L.H,...` (one fixed set; its fraction is its size over all heads).
    Returns `(sets, labels)`: set name → heads, and set name → (selection, fraction, seed; -1 if not random).
    """
    total = n_layers * n_heads
    sets: dict[str, list[Head]] = {}
    labels: dict[str, tuple[str, float, int]] = {}
    counts: set[int] = set()
    for selection in selections:
        if selection in SCORE_SELECTIONS:
            if scores is None:
                raise SinkscopeError(f"selection {selection} needs head scores (a previous run or a scoring pass)")
            for fraction in fractions:
                count = count_for_fraction(total, fraction)
                sets[f"{selection}@{fraction:g}"] = heads_by_score(scores, selection, count)
                labels[f"{selection}@{fraction:g}"] = (selection, count / total, -1)
                counts.add(count)
        elif selection == "random":
            counts.update(count_for_fraction(total, fraction) for fraction in fractions)
        elif selection.startswith(("class:", "heads:")):
            kind, _, value = selection.partition(":")
            if kind == "class" and scores is None:
                raise SinkscopeError(f"selection {selection} needs head classes: pass --from-run")
            heads = heads_of_class(scores, value) if kind == "class" else parse_heads(value)
            sets[selection], labels[selection] = heads, (selection, len(set(heads)) / total, -1)
            counts.add(len(set(heads)))
        else:
            raise SinkscopeError(
                f"selection {selection!r} is not one of {', '.join(SCORE_SELECTIONS)}, random, class:NAME, "
                "heads:L.H,..."
            )
    for count in sorted(counts):
        for draw in range(n_random):
            name = f"random:{count}#{draw}"
            sets[name] = random_heads(n_layers, n_heads, min(count, total), seed + draw)
            labels[name] = ("random", count / total, seed + draw)
    return sets, labels
