"""Figure 3's comparison: where a sink and where a diagonal pattern is the cheaper W_QK, over vocabulary size,
context length T, width d and rank r, with the closed forms and the exact convex programs side by side.

Two tables (SPEC §6-7):

- `vocabulary`: the generalized bigram-backcopy task at the vocabulary level (non-causal; queries the N = V − K
  non-triggers, keys every token and BOS; orthonormal token embeddings) for each (V, K): the closed forms
  (`theory.cost_closed_forms.gbb_cost`) and the exact programs (`theory.cost.gbb_pattern_cost`), nuclear and
  Frobenius, and which pattern is cheaper by each;
- `geometry`: causal sink and diagonal patterns on T + 1 unit embeddings in R^d of rank r (zero-mean Gaussian
  directions in a random r-dimensional subspace, `theory.embeddings.synthetic_embeddings("low_rank")`; r = d
  is the isotropic case), nuclear norm, several seeds: the exact costs (an infeasible sink costs ∞) and the
  predictions beside them — Wendel's probability that the contexts lie in an open half-space (P(H1), the sink's
  feasibility for iid symmetric contexts of rank r) and the orthonormal closed forms `κT/√(T+1)` (sink) and
  `κ Σ_i √(i/(i+1))` (diagonal), which hold when the embeddings are orthonormal (r ≥ T + 1).

The predicted winner in `geometry` is the diagonal where P(H1) < ½ (the sink is usually infeasible: low rank,
long context), the sink where r ≥ T + 1 (orthonormal-like: the closed forms say the sink is cheaper), and
undecided in between; `agree` compares it with the exact winner of each seed.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass

import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.cost_sweep import solve_row
from sinkscope.theory.cost import gbb_pattern_cost
from sinkscope.theory.cost_closed_forms import (
    gbb_cost,
    orthonormal_cost,
    predicted_winner,
    wendel_probability,
)
from sinkscope.theory.embeddings import synthetic_embeddings

NORMS = ("nuclear", "frobenius")


@dataclass(frozen=True)
class RegimeConfig:
    """Vs: vocabulary sizes; Ks: trigger counts (each with K < V); Ts, ds, ranks: the geometry grid (ranks above d
    are skipped); seeds: draws per geometry cell; kappa: the margin (costs are linear in it)."""

    Vs: tuple[int, ...] = (3, 4, 6, 8, 12)
    Ks: tuple[int, ...] = (1, 2)
    Ts: tuple[int, ...] = (4, 8, 12)
    ds: tuple[int, ...] = (16,)
    ranks: tuple[int, ...] = (2, 3, 4, 8, 16)
    seeds: int = 3
    kappa: float = 1.0

    def __post_init__(self) -> None:
        for name in ("Vs", "Ts", "ds", "ranks"):
            if not getattr(self, name) or min(getattr(self, name)) < 1:
                raise SinkscopeError(f"--{name.lower()} must be one or more positive integers")
        if not self.Ks or min(self.Ks) < 1:
            raise SinkscopeError("--ks must be one or more positive integers (trigger counts K)")
        if self.seeds < 1 or not 0 < self.kappa < math.inf:
            raise SinkscopeError(f"--seeds {self.seeds} must be ≥ 1 and --kappa {self.kappa} a finite number > 0")
        # each table needs one cell: a (V, K) with K < V, a (rank, d) with rank ≤ d (the others are skipped)
        if not any(K < V for V in self.Vs for K in self.Ks):
            raise SinkscopeError(
                f"--vs {','.join(map(str, self.Vs))} --ks {','.join(map(str, self.Ks))}: no vocabulary size exceeds "
                "a trigger count, so the bigram-backcopy table would be empty; give some V > K (e.g. --vs 3,4 --ks 1)"
            )
        if not any(rank <= d for d in self.ds for rank in self.ranks):
            raise SinkscopeError(
                f"--ranks {','.join(map(str, self.ranks))} --ds {','.join(map(str, self.ds))}: every rank exceeds "
                "every width d (a rank-r embedding needs r ≤ d), so the geometry table would be empty; give some "
                "rank ≤ d (e.g. --ranks 2,4 --ds 16)"
            )


def winner(sink: float, diagonal: float, rtol: float = 1e-4) -> str:
    """"sink" or "diagonal" (the cheaper), "tie" within `rtol`, "neither" when both are infeasible (∞)."""
    if math.isinf(sink) and math.isinf(diagonal):
        return "neither"
    if math.isinf(sink) or math.isinf(diagonal):
        return "sink" if math.isinf(diagonal) else "diagonal"
    if abs(sink - diagonal) <= rtol * max(abs(sink), abs(diagonal)):
        return "tie"
    return "sink" if sink < diagonal else "diagonal"


def vocabulary_table(config: RegimeConfig) -> pd.DataFrame:
    """One row per (V, K, norm): closed-form and exact costs of both patterns and the cheaper by each."""
    rows = []
    for V in config.Vs:
        for K in config.Ks:
            if K >= V:
                continue
            for norm in NORMS:
                row = {"V": V, "K": K, "N": V - K, "norm": norm}
                for pattern in ("sink", "diagonal"):
                    row[f"{pattern}_closed"] = gbb_cost(V, K, pattern, norm, config.kappa)
                    row[f"{pattern}_exact"] = gbb_pattern_cost(V, K, pattern, norm, config.kappa).value
                row["cheaper_closed"] = winner(row["sink_closed"], row["diagonal_closed"])
                row["cheaper_exact"] = winner(row["sink_exact"], row["diagonal_exact"])
                rows.append(row)
    return pd.DataFrame(rows)


def geometry_table(config: RegimeConfig) -> pd.DataFrame:
    """One row per (T, d, rank, seed): exact causal nuclear costs, the exact winner, P(H1), the orthonormal closed
    forms, the predicted winner and whether they agree (undecided cells agree with nothing)."""
    rows = []
    for T in config.Ts:
        for d in config.ds:
            for rank in config.ranks:
                if rank > d:
                    continue
                for seed in range(config.seeds):
                    Z = synthetic_embeddings("low_rank", T, d, seed, rank=rank)
                    costs = {p: solve_row(Z, p, "nuclear", True, config.kappa, "auto")
                             for p in ("sink", "diagonal")}  # fmt: skip
                    sink, diagonal = costs["sink"]["cost"], costs["diagonal"]["cost"]
                    exact, predicted = winner(sink, diagonal), predicted_winner(T, rank)
                    rows.append({"T": T, "d": d, "rank": rank, "seed": seed, "sink_exact": sink,
                                 "diagonal_exact": diagonal, "sink_status": costs["sink"]["status"],
                                 "diagonal_status": costs["diagonal"]["status"], "cheaper_exact": exact,
                                 "p_h1": wendel_probability(T, rank),
                                 "sink_orthonormal": orthonormal_cost(T, "sink", "nuclear", config.kappa),
                                 "diagonal_orthonormal": orthonormal_cost(T, "diagonal", "nuclear", config.kappa),
                                 "cheaper_predicted": predicted, "agree": exact == predicted})  # fmt: skip
    return pd.DataFrame(rows)


def regime_summary(geometry: pd.DataFrame) -> pd.DataFrame:
    """Per (T, d, rank): share of seeds where the diagonal is strictly cheaper (an infeasible sink counts), the
    sink feasible share, P(H1), the predicted winner and the share of seeds agreeing with it."""
    grouped = geometry.groupby(["T", "d", "rank"])
    return grouped.agg(diagonal_cheaper=("cheaper_exact", lambda s: float((s == "diagonal").mean())),
                       sink_feasible=("sink_status", lambda s: float((s != "infeasible").mean())),
                       p_h1=("p_h1", "first"), predicted=("cheaper_predicted", "first"),
                       agree=("agree", "mean"), seeds=("seed", "size")).reset_index()  # fmt: skip


def run_cost_regimes(config: RegimeConfig) -> dict:
    """`vocabulary`, `geometry`, `summary` tables and `meta`."""
    started = time.perf_counter()
    vocabulary = vocabulary_table(config)
    geometry = geometry_table(config)
    meta = {"config": asdict(config), "timings": {"seconds": time.perf_counter() - started}}
    return {"vocabulary": vocabulary, "geometry": geometry, "summary": regime_summary(geometry), "meta": meta}


def save_cost_regimes(directory, result: dict, overwrite: bool = False):
    """Write `regimes_vocabulary.parquet`, `regimes_geometry.parquet`, `regimes_summary.parquet`,
    `cost_regimes.json`, `figures/cost_regimes.png` and `report.html`, staged and renamed into place."""
    from sinkscope.report.cost_regimes_section import cost_regimes_figure
    from sinkscope.report.plots import figure_png
    from sinkscope.report.result_files import save_result_files

    png = figure_png(cost_regimes_figure(result["vocabulary"], result["summary"]))
    config = result["meta"]["config"]
    settings = {k: ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else v for k, v in config.items()}
    settings["seconds"] = f"{result['meta']['timings']['seconds']:.1f}"
    return save_result_files(
        directory, overwrite=overwrite,
        tables={f"regimes_{name}.parquet": result[name] for name in ("vocabulary", "geometry", "summary")},
        meta_name="cost_regimes.json", meta=result["meta"],
        figures={"cost_regimes.png": ("Sink vs diagonal cost regimes", png)},
        title="sinkscope cost-regimes",
        intro="Where the sink and where the diagonal pattern is the cheaper W_QK: the bigram-backcopy task over "
        "vocabulary sizes (closed forms beside the exact programs), and causal patterns over T and the rank "
        "of the embeddings (exact costs beside Wendel's feasibility probability and the orthonormal closed "
        "forms). Definitions in docs/experiments.md.",
        settings=settings,
        shown=[("Per (T, d, rank) (regimes_summary.parquet)", result["summary"]),
               ("Bigram-backcopy, vocabulary level (regimes_vocabulary.parquet)", result["vocabulary"])],
    )  # fmt: skip
