"""Sweep the cost of sink vs diagonal patterns over T, d, margin and embedding families (SPEC §6).

One row per setting goes to `cost.parquet`; `fits.csv` holds the fitted exponents of cost ~ T^a; the figures
(`report/cost_figures.py`: cost vs T, the diagonal/sink ratio, a regime map) and the page (`report/cost_page.py`)
are drawn from them.

Embedding families: the synthetic ones of `theory/embeddings.py` (orthonormal, gaussian, shared_mean:ρ,
anti_aligned:ρ, low_rank:r), and `model:NAME`: the attention inputs z of each requested layer of a causal LM on
real windows of T+1 tokens, z_0 = BOS (one window per seed).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np
import pandas as pd

from sinkscope.errors import SinkscopeError
from sinkscope.provenance import package_versions
from sinkscope.report.cost_figures import with_keys, write_figures
from sinkscope.staging import check_replaceable, staged_directory
from sinkscope.theory.cost import InfeasiblePatternError, ProblemTooLargeError, pattern_cost
from sinkscope.theory.cost_closed_forms import COST_NORMS, PATTERNS, kappa_for_mass, orthonormal_cost
from sinkscope.theory.embeddings import SYNTHETIC_FAMILIES, synthetic_embeddings, unit_rows

# The families of attention inputs Z a sweep draws from (not the model families of `sinkscope.models.families`).
INPUT_FAMILIES = (*SYNTHETIC_FAMILIES, "model")
COLUMNS = (
    "T", "d", "family", "layer", "seed", "pattern", "norm", "causal", "kappa", "delta",
    "cost", "rank", "reduced_dim", "solver", "status", "seconds", "closed_form",
)


@dataclass(frozen=True)
class CostSweepConfig:
    """What to sweep. Margins: `kappas`, or `deltas` (κ = log(T(1-δ)/δ) per T, SPEC §6) when given.

    families: names from INPUT_FAMILIES; rho parameterises shared_mean/anti_aligned, rank low_rank.
    seeds: random draws (synthetic) or windows (model) per setting. model/layers/corpus: the `model` family
    (layers None = every layer); normalize: unit-normalise the model's z like the synthetic families.
    """

    families: tuple[str, ...] = ("orthonormal", "gaussian")
    Ts: tuple[int, ...] = (4, 8, 16, 32)
    ds: tuple[int, ...] = (8, 16, 32, 64)
    kappas: tuple[float, ...] = (1.0,)
    deltas: tuple[float, ...] = ()
    norms: tuple[str, ...] = ("nuclear", "frobenius")
    patterns: tuple[str, ...] = PATTERNS
    causal: bool = True
    seeds: int = 2
    rho: float = 0.5
    rank: int = 4
    solver: str = "auto"
    model: str = "smollm2-135m"
    layers: tuple[int, ...] | None = None
    corpus: str = "builtin:prose"
    normalize: bool = True

    def __post_init__(self) -> None:
        unknown = sorted(set(self.families) - set(INPUT_FAMILIES))
        if unknown or not self.families:
            raise SinkscopeError(f"--family {','.join(unknown) or '(none)'}: choose from {', '.join(INPUT_FAMILIES)}")
        if not self.Ts or min(self.Ts) < 1:
            raise SinkscopeError(f"--T {self.Ts}: give context lengths >= 1, e.g. --T 4,8,16,32")
        if not self.ds or min(self.ds) < 1:
            raise SinkscopeError(f"--d {self.ds}: give embedding dimensions >= 1, e.g. --d 8,32")
        if any(k <= 0 for k in self.kappas) or not (self.kappas or self.deltas):
            raise SinkscopeError(f"--kappa {self.kappas}: margins must be > 0")
        for delta in self.deltas:
            if not 0 < delta < 1 or kappa_for_mass(min(self.Ts), delta) <= 0:
                raise SinkscopeError(f"--delta {delta}: need 0 < delta < T/(T+1) for every T (else kappa <= 0)")
        if set(self.norms) - set(COST_NORMS) or set(self.patterns) - set(PATTERNS):
            raise SinkscopeError(f"--norm {self.norms}: choose from {', '.join(COST_NORMS)}")
        if self.seeds < 1:
            raise SinkscopeError(f"--seeds {self.seeds} must be at least 1")
        if not 0 < self.rho < 1:
            raise SinkscopeError(f"--rho {self.rho}: the shared-mean strength must be in (0, 1)")
        if self.rank < 1:
            raise SinkscopeError(f"--rank {self.rank} must be at least 1")

    def margins(self, T: int) -> list[tuple[float, float]]:
        """(kappa, delta) pairs for context length T; delta is NaN when kappa was given directly."""
        if self.deltas:
            return [(kappa_for_mass(T, delta), delta) for delta in self.deltas]
        return [(kappa, math.nan) for kappa in self.kappas]


def family_label(config: CostSweepConfig, family: str) -> str:
    """The family column: the name plus its parameter (`shared_mean:0.5`, `low_rank:4`, `model:smollm2-135m`)."""
    if family in ("shared_mean", "anti_aligned"):
        return f"{family}:{config.rho:g}"
    if family == "low_rank":
        return f"low_rank:{config.rank}"
    if family == "model":
        return f"model:{config.model}"
    return family


def model_embeddings(config: CostSweepConfig, T: int) -> Iterator[tuple[int, int, np.ndarray]]:
    """(layer, window index, z (T+1, d)) for the model family: attention inputs of real windows, z_0 = BOS."""
    import torch

    from sinkscope.capture.layer_inputs import layer_inputs
    from sinkscope.corpus.windows import windows

    lm = _load_model_cached(config.model)
    n_layers = len(lm.layers)
    layers = range(n_layers) if config.layers is None else config.layers
    bad = [layer for layer in layers if not 0 <= layer < n_layers]
    if bad:
        raise SinkscopeError(f"--layer {bad}: {config.model} has layers 0..{n_layers - 1}")
    batch = torch.cat(list(windows(config.corpus, lm.tokenizer, T + 1, max_windows=config.seeds)))  # (W, T+1)
    captured = layer_inputs(lm, batch, layers)
    for layer in layers:
        z = captured[layer][1].double().cpu().numpy()  # (W, T+1, d)
        for window in range(z.shape[0]):
            yield layer, window, unit_rows(z[window]) if config.normalize else z[window]


@lru_cache(maxsize=1)
def _load_model_cached(name: str):
    """Load once per process: a sweep over several T reuses the model."""
    from sinkscope.models.load import load_model

    return load_model(name)


def _settings(config: CostSweepConfig) -> Iterator[tuple[str, int, int, int | None, int, np.ndarray]]:
    """(family label, T, d, layer, seed, Z) for every embedding draw of the sweep."""
    for family in config.families:
        label = family_label(config, family)
        for T in config.Ts:
            if family == "model":
                for layer, window, Z in model_embeddings(config, T):
                    yield label, T, Z.shape[1], layer, window, Z
            elif family == "orthonormal":  # rotation-invariant: one draw in d = T+1 covers every d
                yield label, T, T + 1, None, 0, synthetic_embeddings(family, T, T + 1, 0)
            else:
                for d in config.ds:
                    for seed in range(config.seeds):
                        yield label, T, d, None, seed, synthetic_embeddings(
                            family, T, d, seed, config.rho, config.rank
                        )


def cost_rows(config: CostSweepConfig, progress: bool = False) -> pd.DataFrame:
    """Solve every setting of the sweep; one row per (embedding draw, margin, pattern, norm), columns COLUMNS.

    Infeasible settings have cost = inf and status "infeasible"; problems too large for an exact solve have
    cost NaN and status "too_large" (with the closed form, where one exists, in `closed_form`).
    """
    from tqdm import tqdm

    rows = []
    for label, T, d, layer, seed, Z in tqdm(list(_settings(config)), disable=not progress, desc="cost"):
        for kappa, delta in config.margins(T):
            for pattern in config.patterns:
                for norm in config.norms:
                    row = dict(
                        T=T, d=d, family=label, layer=layer, seed=seed, pattern=pattern, norm=norm,
                        causal=config.causal, kappa=kappa, delta=delta, closed_form=math.nan,
                    )
                    if label == "orthonormal" and config.causal:
                        row["closed_form"] = orthonormal_cost(T, pattern, norm, kappa)
                    rows.append(row | solve_row(Z, pattern, norm, config.causal, kappa, config.solver))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({"layer": "Int64"})


def solve_row(Z: np.ndarray, pattern: str, norm: str, causal: bool, kappa: float, solver: str) -> dict:
    """One solve of `theory.cost.pattern_cost` on Z (row 0 the sink, rows 1..T the contexts): the columns cost,
    rank, reduced_dim, solver, status and seconds of a row (infeasible: cost inf; too large: cost NaN)."""
    start = time.perf_counter()
    try:
        result = pattern_cost(Z[0], Z[1:], pattern, norm, causal, kappa, solver)
    except InfeasiblePatternError:
        status, cost, rank, r, used = "infeasible", math.inf, 0, 0, solver
    except ProblemTooLargeError:
        status, cost, rank, r, used = "too_large", math.nan, 0, 0, "none"
    else:
        status, cost, rank, r, used = result.status, result.value, result.rank, result.reduced_dim, result.solver
    seconds = time.perf_counter() - start
    return dict(cost=cost, rank=rank, reduced_dim=r, solver=used, status=status, seconds=seconds)


def fit_exponents(frame: pd.DataFrame) -> pd.DataFrame:
    """Exponent a of cost ≈ c·T^a per (family, d, layer, pattern, norm, causal, margin), from finite median costs.

    Least squares of log(median over seeds) on log T over the T whose median is finite (≥ 2 needed).
    `dim` is d, or 0 for the orthonormal family (d = T+1).
    """
    frame = with_keys(frame)
    keys = ["family", "dim", "layer", "pattern", "norm", "causal", "margin"]
    medians = frame.groupby([*keys, "T"], dropna=False)["cost"].median().reset_index()
    fits = []
    for key, group in medians.groupby(keys, dropna=False):
        group = group[np.isfinite(group["cost"])]
        if group["T"].nunique() >= 2:
            slope, intercept = np.polyfit(np.log(group["T"]), np.log(group["cost"]), 1)
            fits.append(dict(zip(keys, key)) | dict(exponent=slope, prefactor=math.exp(intercept), points=len(group)))
    return pd.DataFrame(fits, columns=[*keys, "exponent", "prefactor", "points"])


def run_cost_sweep(
    config: CostSweepConfig, out: Path, overwrite: bool = False, progress: bool = False
) -> pd.DataFrame:
    """Run the sweep and write `out/` atomically: cost.parquet, fits.csv, run.json, figures/*.png and report.html
    (SPEC §6)."""
    from sinkscope.report.cost_page import write_cost_page

    out = Path(out)
    check_replaceable(out, overwrite)
    start = time.perf_counter()
    frame = cost_rows(config, progress=progress)
    fits = fit_exponents(frame)
    with staged_directory(out) as staging:
        frame.to_parquet(staging / "cost.parquet", index=False)
        fits.to_csv(staging / "fits.csv", index=False)
        figures = write_figures(frame, staging / "figures")
        record = dict(
            config=asdict(config), versions=package_versions(), seconds=time.perf_counter() - start,
            rows=len(frame), statuses=frame["status"].value_counts().to_dict(),
        )
        if "model" in config.families:  # SPEC §8: model identity (file sha256) and corpus identity
            record["model"] = _load_model_cached(config.model).identity
            record["corpus"] = dict(source=config.corpus, windows=config.seeds, seq_lens=[T + 1 for T in config.Ts])
        (staging / "run.json").write_text(json.dumps(record, indent=2, default=str))
        write_cost_page(staging / "report.html", record["config"], frame, fits, figures, record["seconds"])
    return frame
