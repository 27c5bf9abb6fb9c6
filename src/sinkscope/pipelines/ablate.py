"""Head ablations: switch chosen heads off and measure the change of next-token loss (issue 3, part 3).

Two interventions, both on the input of the attention output projection (`o_proj`, GPT-2's `c_proj`), whose
input is the concatenation of the per-head outputs `o_t = Σ_j A[t,j] v_j` (SPEC §3), `dh` columns per head:

- `zero`: the head's slice is set to 0 (its output is switched off exactly — the paper's hard switch);
- `bos`: the slice is set to `v_0`, the value of position 0 of the head's kv group, i.e. the output the head
  would have with all attention on BOS (Guo et al. 2024). `v_0` comes from a forward hook on the value
  projection (GPT-2's fused `c_attn`: the value block follows the query and key blocks).

Heads are chosen by list, by class, by a score (the k% with the lowest AHON-LN or the highest hard-sink
fraction, as Sandoval-Segura et al. 2025 do), or at random (the baseline reported beside every score).
Per-head scores come from a previous `sinkscope analyze` run (heads.parquet) or from `head_scores`, a short
pass over a few windows. Loss is the mean cross-entropy of the full causal LM over every position's next token
(targets at positions 1..T-1), the same windows for every head set, so differences are paired per window.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module, projection_channels
from sinkscope.models.load import LoadedModel
from sinkscope.report.plots import no_mathtext
from sinkscope.staging import check_replaceable, staged_directory

Head = tuple[int, int]  # (layer, head)
MODES = ("zero", "bos")
SCORE_SELECTIONS = {
    # selection name: (heads.parquet column, True when the lowest scores are removed first)
    "lowest-ahon-ln": ("ahon_ln", True),
    "highest-hard-sink": ("hard_sink_frac", False),
}
HARD_SINK_DELTA = 0.1  # SPEC §2: a query is hard-sink when A[t,0] ≥ 1 - δ


@contextmanager
def head_ablation(lm: LoadedModel, heads: Iterable[Head], mode: str = "zero") -> Iterator[None]:
    """Inside the block, the given heads' outputs are zeroed (`zero`) or replaced by `v_0` (`bos`).

    Hooks: a forward pre-hook on each affected layer's output projection (and, for `bos`, a forward hook on its
    value projection); all removed in `finally`, so the model is unchanged afterwards. Raises if a forward pass
    of the base model ran but an affected layer was never reached (also when none of them was).
    """
    if mode not in MODES:
        raise SinkscopeError(f"ablation mode {mode!r} is not one of {', '.join(MODES)}")
    layout, family, blocks = lm.layout, lm.family, lm.layers
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, head in heads:
        if not (0 <= layer < len(blocks) and 0 <= head < layout.n_heads):
            raise SinkscopeError(
                f"head {layer}.{head} does not exist: the model has layers 0..{len(blocks) - 1} and heads "
                f"0..{layout.n_heads - 1}"
            )
        by_layer[layer].append(head)
    dh, group = layout.head_dim, layout.group
    value_channels = projection_channels(family, layout, "v").to(lm.device)  # of the value projection
    first_values: dict[int, Tensor] = {}  # layer → v_0 of every kv head, (B, n_kv, dh)
    reached: set[int] = set()
    passes: list[int] = []  # one entry per forward pass of the base model inside the block
    handles = []

    def value_hook(layer: int):
        def hook(_module, _args, output):
            values = output[..., value_channels]  # (B, T, n_kv*dh)
            first_values[layer] = values[:, 0].reshape(values.shape[0], layout.n_kv_heads, dh)

        return hook

    def output_pre_hook(layer: int, layer_heads: list[int]):
        def hook(_module, args):
            heads_out = args[0].clone()
            B, T = heads_out.shape[:2]
            per_head = heads_out.view(B, T, layout.n_heads, dh)  # (B, T, H, dh)
            for head in layer_heads:
                if mode == "zero":
                    per_head[:, :, head] = 0.0
                else:
                    per_head[:, :, head] = first_values[layer][:, head // group, None]  # (B, 1, dh) over T
            reached.add(layer)
            return (heads_out, *args[1:])

        return hook

    try:
        handles.append(lm.base.register_forward_pre_hook(lambda _module, _args: passes.append(1)))
        for layer, layer_heads in by_layer.items():
            attn = attention_module(family, blocks[layer])
            if mode == "bos":
                handles.append(getattr(attn, family.value_proj).register_forward_hook(value_hook(layer)))
            handles.append(
                getattr(attn, family.output_proj).register_forward_pre_hook(output_pre_hook(layer, layer_heads))
            )
        yield
    finally:
        for handle in handles:
            handle.remove()
    missing = sorted(set(by_layer) - reached)
    if passes and missing:
        raise SinkscopeError(f"ablation hooks of layers {missing} were never reached during the forward pass")


@torch.no_grad()
def window_losses(lm: LoadedModel, batches: Sequence[Tensor]) -> np.ndarray:
    """Mean next-token cross-entropy (nats) of each window, shape (n_windows,).

    batches: LongTensor[B, T] token ids; position t's logits predict token t+1, so T-1 targets per window.
    Runs the full causal LM (`lm.model`) with whatever hooks are active.
    """
    losses = []
    for ids in batches:
        ids = ids.to(lm.device)
        logits = lm.model(input_ids=ids, use_cache=False).logits  # (B, T, V)
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
        losses.append(ce.view(ids.shape[0], -1).mean(1).cpu())
    return torch.cat(losses).double().numpy()


def ablate(
    lm: LoadedModel,
    windows: Iterable[Tensor],
    head_sets: Mapping[str, Sequence[Head]],
    mode: str = "zero",
    progress: bool = False,
) -> pd.DataFrame:
    """Loss change when each head set is ablated (`zero` or `bos`, see `head_ablation`), one row per set.

    windows: batches LongTensor[B, T] (held in memory for the repeated passes: B·T ints each).
    Columns: set, mode, n_heads, heads ("3.1,4.2"), base_loss, loss, delta_loss (mean over windows of the
    per-window change, nats/token), delta_sem (its standard error over windows), n_windows.
    """
    batches = list(windows)
    if not batches:
        raise SinkscopeError("ablate got no windows: use a larger corpus or a smaller --seq-len")
    base = window_losses(lm, batches)
    rows = []
    from tqdm.auto import tqdm

    for name, heads in tqdm(head_sets.items(), desc="ablate", unit="set", disable=not progress):
        heads = sorted(set(heads))
        with head_ablation(lm, heads, mode):
            losses = window_losses(lm, batches)
        delta = losses - base
        sem = float(delta.std(ddof=1) / np.sqrt(len(delta))) if len(delta) > 1 else float("nan")
        rows.append(
            {
                "set": name,
                "mode": mode,
                "n_heads": len(heads),
                "heads": format_heads(heads),
                "base_loss": float(base.mean()),
                "loss": float(losses.mean()),
                "delta_loss": float(delta.mean()),
                "delta_sem": sem,
                "n_windows": len(delta),
            }
        )
    return pd.DataFrame(rows)


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


def ablation_curve(
    lm: LoadedModel,
    windows: Iterable[Tensor],
    scores: pd.DataFrame | None,
    fractions: Sequence[float],
    selections: Sequence[str] = tuple(SCORE_SELECTIONS),
    mode: str = "zero",
    n_random: int = 3,
    seed: int = 0,
    progress: bool = False,
) -> pd.DataFrame:
    """Loss change against the fraction of heads removed, per selection, with the random baseline beside it.

    Columns of `ablate`, plus selection, fraction (heads removed / all heads), seed (random draws; else -1).
    The baseline draws `n_random` seeded random sets of every head count that a selection uses.
    """
    sets, labels = head_sets_for(selections, fractions, scores, len(lm.layers), lm.layout.n_heads, n_random, seed)
    frame = ablate(lm, windows, sets, mode, progress=progress)
    frame[["selection", "fraction", "seed"]] = pd.DataFrame([labels[name] for name in frame["set"]])
    return frame


def curve_summary(curve: pd.DataFrame) -> pd.DataFrame:
    """Per (selection, fraction): mean loss change, its spread over random draws, and head count."""
    return (
        curve.groupby(["selection", "fraction"], sort=True)
        .agg(n_heads=("n_heads", "first"), delta_loss=("delta_loss", "mean"), delta_std=("delta_loss", "std"),
             delta_sem=("delta_sem", "mean"), draws=("delta_loss", "size"))
        .reset_index()
    )  # fmt: skip


@dataclass(frozen=True)
class AblateConfig:
    """One ablation experiment: which heads (`selections`, see `head_sets_for`), how many (`fractions` of all
    heads, for score selections and the random baseline), how (`mode`), and where scores come from: a previous
    analyze run (`from_run`) or a scoring pass over the first `score_windows` windows (scores use no labels,
    so sharing windows with the loss evaluation leaks nothing)."""

    selections: tuple[str, ...] = tuple(SCORE_SELECTIONS)
    fractions: tuple[float, ...] = (0.05, 0.1, 0.2)
    mode: str = "zero"
    n_random: int = 3
    seed: int = 0
    score_windows: int = 16
    from_run: str | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SinkscopeError(f"--mode {self.mode!r} is not one of {', '.join(MODES)}")
        if not self.selections:
            raise SinkscopeError("--select needs at least one selection")
        for selection in self.selections:
            kind, _, value = selection.partition(":")
            if kind == "heads":
                parse_heads(value)
            elif kind == "class" and self.from_run is None:
                raise SinkscopeError(f"--select {selection} needs head classes from an analyze run: pass --from-run")
            elif selection not in (*SCORE_SELECTIONS, "random") and kind != "class":
                raise SinkscopeError(
                    f"--select {selection!r} is not one of {', '.join(SCORE_SELECTIONS)}, random, class:NAME, "
                    "heads:L.H,..."
                )
        for fraction in self.fractions:
            count_for_fraction(1, fraction)  # validates the range
        if self.n_random < 1:
            raise SinkscopeError(f"--random-draws {self.n_random} must be at least 1 (the baseline is required)")
        if self.score_windows < 1:
            raise SinkscopeError(f"--score-windows {self.score_windows} must be at least 1")


def run_ablation(
    lm: LoadedModel, windows, config: AblateConfig, progress: bool = False
) -> tuple[pd.DataFrame, pd.DataFrame, dict]:
    """Score heads (or read a run's scores), ablate every selected set and its random baseline.

    windows: a `sinkscope.corpus.windows.Windows` (or any iterable of LongTensor[B, T] batches with
    `identity()`). Returns `(curve, scores, meta)`: the `ablation_curve` table, the per-head scores used, and
    the metadata saved beside them (config, model and corpus identity, timings).
    """
    started = time.perf_counter()
    batches = list(windows)
    if config.from_run is not None:
        scores = scores_from_run(config.from_run)
    else:
        first = torch.cat(batches)[: config.score_windows]
        scores = head_scores(lm, first.split(max(1, batches[0].shape[0])), progress=progress)
    curve = ablation_curve(
        lm, batches, scores, config.fractions, config.selections, config.mode, config.n_random, config.seed,
        progress=progress,
    )
    meta = {
        "config": asdict(config),
        "model": lm.identity,
        "corpus": windows.identity() if hasattr(windows, "identity") else {},
        "timings": {"seconds": time.perf_counter() - started},
        "base_loss": float(curve["base_loss"].iloc[0]),
    }
    return curve, scores, meta


def check_out_dir(directory: str | Path, overwrite: bool) -> None:
    """Refuse an existing non-empty output directory unless `overwrite`, and never one that is not a sinkscope
    result (check before any model work)."""
    check_replaceable(directory, overwrite)


@no_mathtext()
def save_ablation(
    directory: str | Path, curve: pd.DataFrame, scores: pd.DataFrame, meta: dict, overwrite: bool = False
) -> Path:
    """Write `ablation.parquet`, `head_scores.parquet`, `ablation.json`, `figures/ablation_curve.png` and
    `report.html` (the curve, its per-selection summary and every ablated set) into `directory`, staged in a
    temporary sibling and renamed into place."""
    from sinkscope.report.plots import figure_png
    from sinkscope.report.results_page import write_results_page
    from sinkscope.report.switch_section import ablation_figure

    directory = Path(directory)
    check_out_dir(directory, overwrite)
    png = figure_png(ablation_figure(curve))
    config = meta.get("config", {})
    settings = {
        "model": (meta.get("model") or {}).get("name", "unnamed model"),
        "corpus": (meta.get("corpus") or {}).get("source"),
        "windows": int(curve["n_windows"].iloc[0]),
        "mode": config.get("mode"),
        "head scores from": config.get("from_run") or f"a scoring pass over {config.get('score_windows')} windows",
        "base loss (nats/token)": f"{meta['base_loss']:.4f}",
        "seconds": f"{meta.get('timings', {}).get('seconds', float('nan')):.1f}",
    }
    sets = curve[["selection", "fraction", "seed", "n_heads", "heads", "delta_loss", "delta_sem"]]
    with staged_directory(directory) as staging:
        curve.to_parquet(staging / "ablation.parquet", index=False)
        scores.to_parquet(staging / "head_scores.parquet", index=False)
        (staging / "ablation.json").write_text(json.dumps(meta, indent=2, default=str))
        (staging / "figures").mkdir()
        (staging / "figures" / "ablation_curve.png").write_bytes(png)
        write_results_page(
            staging / "report.html", f"sinkscope ablate: {settings['model']}",
            "Loss change (nats/token) when the selected heads are switched off, against random head sets of the "
            "same size; definitions in docs/statistics.md.",
            settings,
            [("Per selection and fraction (random: mean and std over draws; ablation.parquet)", curve_summary(curve)),
             ("Every ablated set (ablation.parquet)", sets)],
            [("Loss change against the fraction of heads switched off", png)],
        )  # fmt: skip
    return directory
