"""Sweep the cost of sink vs diagonal patterns over T, d, margin and embedding families (SPEC §6).

One row per setting goes to `cost.parquet`; `fits.csv` holds the fitted exponents of cost ~ T^a; figures show
cost vs T (log-log), the diagonal/sink ratio, and a regime map (which pattern is cheaper, or feasible at all).

Embedding families (every row unit-normalised, as attention inputs after RMSNorm lie near a sphere):
- `orthonormal`: z_0..z_T orthonormal (d = T+1; the cost is rotation-invariant, so one seed suffices);
- `gaussian`: isotropic Gaussian directions in R^d;
- `shared_mean:ρ`: `ρ μ + √(1-ρ²) g` for one random unit μ (anisotropy), z_0 included;
- `anti_aligned:ρ`: contexts as `shared_mean:ρ`, the sink `z_0 = -μ` (BOS opposite the contexts, SPEC §4);
- `low_rank:r`: isotropic Gaussian directions inside a random r-dim subspace (zero-mean, rank r);
- `model:NAME`: the attention inputs z of each requested layer of a causal LM on real windows of T+1 tokens,
  z_0 = BOS (one window per seed).
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
from matplotlib.figure import Figure

from sinkscope.errors import SinkscopeError
from sinkscope.provenance import package_versions
from sinkscope.report.plots import no_mathtext
from sinkscope.staging import check_replaceable, staged_directory
from sinkscope.theory.cost import InfeasiblePatternError, ProblemTooLargeError, pattern_cost
from sinkscope.theory.cost_closed_forms import COST_NORMS, PATTERNS, kappa_for_mass, orthonormal_cost

# The families of attention inputs Z a sweep draws from (not the model families of `sinkscope.models.families`).
INPUT_FAMILIES = ("orthonormal", "gaussian", "shared_mean", "anti_aligned", "low_rank", "model")
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


def _unit_rows(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def synthetic_embeddings(family: str, T: int, d: int, seed: int, rho: float = 0.5, rank: int = 4) -> np.ndarray:
    """(T+1, d) unit rows z_0..z_T of a synthetic family (module docstring); row 0 is the sink."""
    rng = np.random.default_rng(seed)
    if family == "orthonormal":
        if d < T + 1:
            raise SinkscopeError(f"orthonormal embeddings need d >= T+1, got d={d}, T={T}")
        q, _ = np.linalg.qr(rng.normal(size=(d, T + 1)))
        return q.T
    if family == "gaussian":
        return _unit_rows(rng.normal(size=(T + 1, d)))
    if family in ("shared_mean", "anti_aligned"):
        mean = _unit_rows(rng.normal(size=(1, d)))[0]
        noise = rng.normal(size=(T + 1, d)) / math.sqrt(d)  # rows of norm ≈ 1
        z = _unit_rows(rho * mean + math.sqrt(1 - rho**2) * noise)
        if family == "anti_aligned":
            z[0] = -mean
        return z
    if family == "low_rank":
        if rank > d:
            raise SinkscopeError(f"low_rank:{rank} needs d >= {rank}, got d={d}")
        subspace = np.linalg.qr(rng.normal(size=(d, rank)))[0].T  # (rank, d) orthonormal rows
        return _unit_rows(rng.normal(size=(T + 1, rank)) @ subspace)
    raise SinkscopeError(f"unknown synthetic family {family!r}; choose from {', '.join(INPUT_FAMILIES[:-1])}")


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
            yield layer, window, _unit_rows(z[window]) if config.normalize else z[window]


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
                    rows.append(row | _solve_row(Z, pattern, norm, config.causal, kappa, config.solver))
    frame = pd.DataFrame(rows, columns=list(COLUMNS))
    return frame.astype({"layer": "Int64"})


def _solve_row(Z: np.ndarray, pattern: str, norm: str, causal: bool, kappa: float, solver: str) -> dict:
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


def _with_keys(frame: pd.DataFrame) -> pd.DataFrame:
    """Add the grouping columns of fits and figures.

    margin: delta when the sweep was in delta (κ then varies with T), else kappa. dim: d, except 0 for the
    orthonormal family whose d = T+1 follows T. layer: -1 for synthetic families.
    """
    return frame.assign(
        margin=frame["delta"].where(frame["delta"].notna(), frame["kappa"]).round(12),
        dim=frame["d"].where(frame["family"] != "orthonormal", 0),
        layer=frame["layer"].fillna(-1),
    )


def fit_exponents(frame: pd.DataFrame) -> pd.DataFrame:
    """Exponent a of cost ≈ c·T^a per (family, d, layer, pattern, norm, causal, margin), from finite median costs.

    Least squares of log(median over seeds) on log T over the T whose median is finite (≥ 2 needed).
    `dim` is d, or 0 for the orthonormal family (d = T+1).
    """
    frame = _with_keys(frame)
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
        write_cost_page(staging / "report.html", config, frame, fits, figures, record["seconds"])
    return frame


FIGURE_CAPTIONS = {
    "cost_vs_T.png": "Minimum-norm cost of the sink and the diagonal pattern against T (first margin)",
    "ratio.png": "Diagonal cost / sink cost against T",
    "regime_map.png": "Which pattern is cheaper, per family and T",
}


def write_cost_page(path: Path, config: CostSweepConfig, frame: pd.DataFrame, fits: pd.DataFrame,
                    figures: list[Path], seconds: float) -> Path:
    """The sweep's `report.html`: the settings, the `figures` that `write_figures` wrote, the fitted exponents
    (fits.csv) and every solved setting (cost.parquet)."""
    from sinkscope.report.results_page import write_results_page

    settings = {
        "families": ", ".join(config.families), "T": ", ".join(map(str, config.Ts)),
        "d": ", ".join(map(str, config.ds)), "patterns": ", ".join(config.patterns),
        "norms": ", ".join(config.norms), "causal": config.causal, "solver": config.solver,
        "settings solved": len(frame), "seconds": f"{seconds:.1f}",
    }  # fmt: skip
    return write_results_page(
        path, f"sinkscope cost: {', '.join(config.families)}",
        "Minimum nuclear / Frobenius norm of a W_QK that puts a margin κ on the sink or on the diagonal pattern "
        "(docs/theory/cost.md); cost = inf where the pattern cannot be represented.",
        settings,
        [("Fitted exponents of cost ~ T^a (fits.csv)", fits), ("Every solved setting (cost.parquet)", frame)],
        [(FIGURE_CAPTIONS[figure.name], figure.read_bytes()) for figure in figures],
    )  # fmt: skip


# Regime-map categories: (label, colour), indexed by `_regime`.
REGIMES = (
    ("sink cheaper", "#3b75af"),
    ("diagonal cheaper", "#ef8636"),
    ("equal (within 1e-4)", "#f2f2f2"),
    ("only sink feasible", "#a6c8e8"),
    ("only diagonal feasible", "#f7c59f"),
    ("neither feasible", "#bbbbbb"),
)


def _regime(sink: float, diagonal: float) -> int:
    """Index into REGIMES; costs within the solvers' accuracy (1e-4 relative) count as equal."""
    if np.isfinite(sink) and np.isfinite(diagonal):
        if abs(sink - diagonal) <= 1e-4 * max(sink, diagonal):
            return 2
        return 0 if sink < diagonal else 1
    if np.isfinite(sink):
        return 3
    return 4 if np.isfinite(diagonal) else 5


def _paired(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per (embedding draw, margin, norm) with columns sink, diagonal, ratio = diagonal/sink."""
    frame = _with_keys(frame[frame["status"] != "too_large"])
    keys = ["family", "T", "dim", "layer", "seed", "norm", "causal", "margin"]
    wide = frame.pivot_table(index=keys, columns="pattern", values="cost", aggfunc="first").reset_index()
    if not {"sink", "diagonal"} <= set(wide.columns):
        return wide.iloc[0:0]
    both = np.isfinite(wide["sink"]) & np.isfinite(wide["diagonal"])
    return wide.assign(ratio=(wide["diagonal"] / wide["sink"]).where(both))


@no_mathtext()
def write_figures(frame: pd.DataFrame, directory: Path) -> list[Path]:
    """cost_vs_T.png, ratio.png and regime_map.png (when both patterns were swept) into directory.

    Each figure is a `matplotlib.figure.Figure` built directly: no pyplot state, the caller's backend left alone."""
    directory.mkdir(parents=True, exist_ok=True)
    figures = [("cost_vs_T.png", cost_vs_T_figure(frame))]
    paired = _paired(frame)
    if len(paired):
        figures += [("ratio.png", ratio_figure(paired)), ("regime_map.png", regime_map_figure(paired))]
    for name, fig in figures:
        fig.savefig(directory / name, dpi=120)
    return [directory / name for name, _ in figures]


def _first_margin(frame: pd.DataFrame) -> pd.DataFrame:
    """The rows of the sweep's first margin (figures show one margin; costs are linear in kappa)."""
    return frame[frame["margin"] == frame["margin"].iloc[0]] if len(frame) else frame


def _plain_log_ticks(ax, Ts: list, log_y: bool = False) -> None:
    """Log axes labelled with plain numbers: x ticks at the swept T values; y (when log) at the powers of ten and
    their 2 and 5 multiples, written 0.2, 0.5, 1, 2, 5, 10 instead of matplotlib's 2×10⁰."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    def minor(value: float, _position) -> str:
        mantissa = value / 10 ** math.floor(math.log10(value) + 1e-9)
        return f"{value:g}" if min(abs(mantissa - 2), abs(mantissa - 5)) < 1e-6 else ""

    ax.set_xticks(Ts, [str(int(T)) for T in Ts])
    ax.xaxis.set_minor_formatter(NullFormatter())
    if log_y:
        ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _position: f"{value:g}"))
        ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def cost_vs_T_figure(frame: pd.DataFrame) -> Figure:
    """Log-log median cost vs T per family (its largest d; layers pooled by median), exponents in the legend."""
    frame = _first_margin(_with_keys(frame[np.isfinite(frame["cost"])]))
    families = list(dict.fromkeys(frame["family"]))
    fig = Figure(figsize=(4.5 * max(len(families), 1), 3.8))
    axes = fig.subplots(1, max(len(families), 1), squeeze=False)
    for ax, family in zip(axes[0], families):
        sub = frame[frame["family"] == family]
        sub = sub[sub["dim"] == sub["dim"].max()]
        for (pattern, norm), group in sub.groupby(["pattern", "norm"]):
            curve = group.groupby("T")["cost"].median()
            slope = np.polyfit(np.log(curve.index), np.log(curve.values), 1)[0] if len(curve) >= 2 else math.nan
            style = "-" if norm == "nuclear" else "--"
            ax.plot(curve.index, curve.values, style, marker="o", label=f"{pattern} {norm}: T^{slope:.2f}")
        ax.set(xscale="log", yscale="log", xlabel="T (contexts)", ylabel="cost ‖W_QK‖",
               title=f"{family} (d={sub['dim'].max()})" if family != "orthonormal" else family)
        _plain_log_ticks(ax, sorted(sub["T"].unique()), log_y=True)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def ratio_figure(paired: pd.DataFrame) -> Figure:
    """Median diagonal/sink cost ratio vs T per family and norm (largest d); above 1 the sink is cheaper."""
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    finite = _first_margin(paired[np.isfinite(paired["ratio"])])
    for (family, norm), group in finite.groupby(["family", "norm"]):
        group = group[group["dim"] == group["dim"].max()]
        curve = group.groupby("T")["ratio"].median()
        ax.plot(curve.index, curve.values, "-" if norm == "nuclear" else "--", marker="o", label=f"{family} {norm}")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set(xscale="log", xlabel="T (contexts)", ylabel="diagonal cost / sink cost", title="diagonal / sink")
    _plain_log_ticks(ax, sorted(finite["T"].unique()))
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def regime_map_figure(paired: pd.DataFrame) -> Figure:
    """Per family and norm: a (d or layer) × T grid shaded by the majority regime over seeds, median ratio printed."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    paired = _first_margin(paired)
    panels = list(paired.groupby(["family", "norm"]))
    fig = Figure(figsize=(4.2 * len(panels), 3.8))
    axes = fig.subplots(1, len(panels), squeeze=False)
    cmap = ListedColormap([colour for _, colour in REGIMES])
    for ax, ((family, norm), group) in zip(axes[0], panels):
        rows_key = "layer" if family.startswith("model:") else "dim"
        ys, Ts = sorted(group[rows_key].unique()), sorted(group["T"].unique())
        grid = np.full((len(ys), len(Ts)), len(REGIMES) - 1)
        for (y, T), cell in group.groupby([rows_key, "T"]):
            regimes = [_regime(s, g) for s, g in zip(cell["sink"], cell["diagonal"])]
            grid[ys.index(y), Ts.index(T)] = np.bincount(regimes, minlength=len(REGIMES)).argmax()
            ratio = cell["ratio"][np.isfinite(cell["ratio"])].median()
            if np.isfinite(ratio):
                ax.text(Ts.index(T), ys.index(y), f"{ratio:.2g}", ha="center", va="center", fontsize=7)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(REGIMES) - 0.5, origin="lower", aspect="auto")
        ylabels = ["T+1" if rows_key == "dim" and y == 0 else y for y in ys]
        ax.set(xticks=range(len(Ts)), xticklabels=Ts, yticks=range(len(ys)), yticklabels=ylabels,
               xlabel="T (contexts)", ylabel="layer" if rows_key == "layer" else "d",
               title=f"{family}, {norm}\n(numbers: diagonal/sink)")
    fig.legend(handles=[Patch(color=c, label=label) for label, c in REGIMES], loc="lower center", ncol=3,
               fontsize=8)
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    return fig
