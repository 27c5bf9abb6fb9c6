"""The regime map of the gBB lab: which pattern a head uses to switch off on non-trigger queries (sink, diagonal,
dense, ...) as a function of initialisation scale × BOS × weight decay × attention variant, ≥ 3 seeds per cell.

`run_regimes` trains every (cell, seed) as an ordinary `train_bb` run under `out_dir/runs/<cell>/seed_<s>/` and
writes, in `out_dir`:
- `regimes.parquet`: one row per cell and seed (`REGIME_COLUMNS`), read from the run's dominant switch head;
- `regime_cells.parquet`: one row per cell: majority pattern and its seed agreement, mean ± std of the masses
  and W_QK norms, set against the SPEC §6/§7 vocabulary-level costs (`CELL_COLUMNS`);
- `switch_costs.parquet`: what each way of switching off costs, per variant, cell and pattern, at equal task
  accuracy, with 95% intervals over seeds (`switch_costs.switch_cost_table`);
- `figures/phase_diagram.png` and `figures/wqk_costs.png` (`regime_figures`);
- `regimes.json`: the base config and the grid (a list of grids for a union, `run_regimes`).
A run whose folder already holds a `summary.json` is reused, unless `overwrite`, only when its `config.json` is the
configuration asked for (`experiments.trained_with`), so an interrupted map resumes and a changed base trains again.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pandas as pd
import torch

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic.experiments import trained_with
from sinkscope.synthetic.summary import cost_predictions, head_costs
from sinkscope.synthetic.switch_costs import switch_cost_table
from sinkscope.synthetic.train import RunConfig, build_model, load_trained_model, train_bb

# The base of every regime map: one attention-only layer (the head's output goes straight to the unembedding, so
# how it switches off on non-trigger queries matters), d = 64, T = 33 positions with BOS, Dirichlet(0.5) bigram,
# AdamW 3e-3 constant, wd 1e-4, batch 32, 1000 steps: ~30 s of one CPU core per run. Measured at these settings
# (docs/experiments.md): PyTorch's init gives a diagonal without BOS, N(0, 0.02²) a sink with BOS.
REGIME_BASE: dict[str, Any] = {
    "task.length": 34, "task.dirichlet_alpha": 0.5,
    "model.n_layers": 1, "model.d_model": 64, "model.mlp": False,
    "train.lr": 3e-3, "train.warmup_steps": 0, "train.final_lr_ratio": 1.0, "train.weight_decay": 1e-4,
    "train.batch_size": 32, "train.steps": 1000, "train.eval_every": 250, "train.checkpoint_every": 1000,
    "train.threads": 1,
}

# Initialisation scales, smallest to largest: (label, model overrides).
INITS: dict[str, dict[str, Any]] = {
    "gpt2": {"model.init": "gpt2"},  # N(0, 0.02²) everywhere
    "emb1": {"model.init": "scaled", "model.init_std": 0.02, "model.embedding_init_std": 1.0},  # only embeddings large
    "torch": {"model.init": "torch"},  # Embedding N(0, 1), Linear U(±1/√fan_in)
    "scaled0.2": {"model.init": "scaled", "model.init_std": 0.2, "model.embedding_init_std": 1.0},
}


@dataclass(frozen=True)
class RegimeGrid:
    """The axes of a regime map. A cell is (init, bos, weight decay, variant); every cell runs every seed.
    `variants` other than softmax run only at `variant_inits` × `variant_weight_decays` (where they apply)."""

    inits: tuple[str, ...]
    bos: tuple[bool, ...]
    weight_decays: tuple[float, ...]
    variants: tuple[str, ...]
    seeds: tuple[int, ...]
    steps: int
    variant_inits: tuple[str, ...] = ("torch",)
    variant_weight_decays: tuple[float, ...] = (1e-4,)

    def __post_init__(self) -> None:
        unknown = [name for name in self.inits if name not in INITS]
        if unknown:
            raise SinkscopeError(f"regime inits {unknown}: use labels of {', '.join(INITS)}")
        if len(set(self.seeds)) < 3:
            raise SinkscopeError(f"regime seeds {self.seeds}: every cell needs at least 3 distinct seeds")

    def cells(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Cell name → (init label, overrides besides the seed), in a stable order."""
        cells = {}
        for variant in self.variants:
            for init in self.inits:
                for wd in self.weight_decays:
                    if variant != "softmax" and (init not in self.variant_inits or wd not in self.variant_weight_decays):
                        continue
                    for bos in self.bos:
                        name = f"{init}_{'bos' if bos else 'nobos'}_wd{wd:g}_{variant}"
                        cells[name] = (init, {**INITS[init], "task.bos": bos, "train.weight_decay": wd,
                                              "model.attention": variant, "train.steps": self.steps})
        return cells


FULL_GRID = RegimeGrid(
    inits=tuple(INITS), bos=(True, False), weight_decays=(0.0, 1e-4, 0.1),
    variants=("softmax", "softmax_sink", "sigmoid_gate"), seeds=(0, 1, 2), steps=1000,
)  # 84 runs, ~40 CPU-minutes
# --quick: the two extreme-by-convention inits, BOS on/off, the base weight decay, 3 seeds (12 runs, ~6 CPU-minutes).
QUICK_GRID = RegimeGrid(
    inits=("gpt2", "torch"), bos=(True, False), weight_decays=(1e-4,), variants=("softmax",), seeds=(0, 1, 2),
    steps=1000,
)

REGIME_COLUMNS = (
    "cell", "init", "init_std", "embedding_init_std", "bos", "weight_decay", "variant", "seed",
    "pattern", "switch_head", "bos_mass", "diag_mass", "entropy", "switch_off", "copy_acc", "excess_loss_noncopy",
    "wqk_nuclear", "wqk_frobenius", "wqk_nuc_over_fro", "pred_nuclear", "pred_nuc_over_fro",
    "init_wqk_frobenius", "dwqk_nuclear", "dwqk_frobenius", "row_mass", "gate", "switch_param_norm", "heads",
    "seconds",
)
CELL_COLUMNS = (
    "cell", "init", "init_std", "embedding_init_std", "bos", "weight_decay", "variant", "n_seeds",
    "pattern", "agreement", "patterns", "bos_mass", "bos_mass_std", "diag_mass", "diag_mass_std",
    "entropy", "copy_acc", "wqk_nuclear", "wqk_nuclear_std", "wqk_frobenius", "wqk_nuc_over_fro",
    "dwqk_nuc_over_fro",
    "pred_nuclear", "nuclear_over_pred", "pred_sink_nuc_over_fro", "pred_diag_nuc_over_fro",
)


def effective_init_stds(config: RunConfig) -> tuple[float, float]:
    """(std of the d×d Linear weights, std of the embeddings) that `config.model.init` draws (module doc of
    `tiny_transformer`); PyTorch's U(±1/√d) has std `1/√(3d)`."""
    model = config.model
    if model.init == "torch":
        return 1 / math.sqrt(3 * model.d_model), 1.0
    return model.init_std, model.embedding_init_std


def wqk_change(run_dir: Path, layer: int, head: int) -> dict[str, float]:
    """Frobenius norm of the head's W_QK at initialisation (rebuilt from the run's seed), the nuclear and
    Frobenius norms of what training added, `W_QK(final) - W_QK(init)` (the learned part's rank signature), and
    the final norm of the head's switch parameters (`switch_param_norm`: gate or sink logit, NaN without)."""
    config, model = load_trained_model(run_dir)
    initial = build_model(config)
    with torch.no_grad():
        w0 = initial.blocks[layer].attn.w_qk()[head]
        delta = model.blocks[layer].attn.w_qk()[head] - w0
        return {"init_wqk_frobenius": float(torch.linalg.matrix_norm(w0, "fro")),
                "dwqk_nuclear": float(torch.linalg.matrix_norm(delta, "nuc")),
                "dwqk_frobenius": float(torch.linalg.matrix_norm(delta, "fro")),
                "switch_param_norm": float(model.blocks[layer].attn.switch_parameter_norm()[head])}


def regime_row(
    cell: str, seed: int, config: RunConfig, summary: dict[str, Any], init_label: str, run_dir: Path
) -> dict[str, Any]:
    """One row of regimes.parquet from a run's summary (its dominant switch head, `summary.summarize`)."""
    nan = lambda x: math.nan if x is None else x  # noqa: E731  (summary.json stores NaN as null)
    head, final = summary["switch_head"], {k: nan(v) for k, v in summary["switch_head_final"].items()}
    pred = cost_predictions(config.task.vocab_size, config.task.n_triggers)
    costs = head_costs(SimpleNamespace(**final), head["pattern"], pred)  # recomputed: reused runs stay current
    init_std, emb_std = effective_init_stds(config)
    return {
        "cell": cell, "init": init_label, "init_std": init_std, "embedding_init_std": emb_std,
        "bos": config.task.bos, "weight_decay": config.train.weight_decay, "variant": config.model.attention,
        "seed": seed, "pattern": head["pattern"], "switch_head": f"L{head['layer']}H{head['head']}",
        "bos_mass": final["bos_attn"], "diag_mass": final["diag_attn"], "entropy": nan(final["entropy"]),
        "switch_off": final["switch_off"], "copy_acc": summary["copy_acc"],
        "excess_loss_noncopy": summary["excess_loss_noncopy"],
        "wqk_nuclear": final["wqk_nuclear"], "wqk_frobenius": final["wqk_frobenius"],
        "wqk_nuc_over_fro": costs["wqk_nuc_over_fro"], "pred_nuclear": nan(costs["pred_nuclear"]),
        "pred_nuc_over_fro": costs["pred_nuc_over_fro"], **wqk_change(run_dir, head["layer"], head["head"]),
        "row_mass": final["row_mass"], "gate": final["gate_plain"],
        "heads": summary["heads_line"],
        "seconds": summary["seconds"],
    }


def cell_table(rows: pd.DataFrame, predictions: dict[str, float]) -> pd.DataFrame:
    """One row per cell: majority pattern with its seed agreement (e.g. 3/3), mean ± std over seeds, and the W_QK
    norms against the SPEC §7 predictions (`predictions` = `summary.cost_predictions`): `nuclear_over_pred` =
    mean measured nuclear norm / mean heuristic prediction for the pattern the head uses."""
    out = []
    for _, group in rows.groupby("cell", sort=False):
        counts = group["pattern"].value_counts()
        first = group.iloc[0]
        out.append({
            **{k: first[k] for k in ("cell", "init", "init_std", "embedding_init_std", "bos", "weight_decay",
                                     "variant")},
            "n_seeds": len(group), "pattern": counts.index[0], "agreement": f"{counts.iloc[0]}/{len(group)}",
            "patterns": ", ".join(group["pattern"]),
            **{k: group[k].mean() for k in ("bos_mass", "diag_mass", "entropy", "copy_acc", "wqk_nuclear",
                                            "wqk_frobenius", "wqk_nuc_over_fro", "pred_nuclear")},
            **{f"{k}_std": group[k].std(ddof=0) for k in ("bos_mass", "diag_mass", "wqk_nuclear")},
            "dwqk_nuc_over_fro": (group["dwqk_nuclear"] / group["dwqk_frobenius"]).mean(),
            "nuclear_over_pred": group["wqk_nuclear"].mean() / group["pred_nuclear"].mean(),
            "pred_sink_nuc_over_fro": predictions["pred_sink_nuc_over_fro"],
            "pred_diag_nuc_over_fro": predictions["pred_diag_nuc_over_fro"],
        })
    return pd.DataFrame(out, columns=list(CELL_COLUMNS))


Job = tuple[str, int, RunConfig, Path]  # (cell, seed, run config, run dir)


def regime_jobs(
    base: RunConfig, grids: tuple[RegimeGrid, ...], out_dir: Path
) -> tuple[dict[str, tuple[str, dict[str, Any]]], list[Job]]:
    """The union of the grids' cells (name → (init label, overrides); a cell named twice keeps its first grid) and
    one job per cell and seed of its grid, run dir `out_dir/runs/<cell>/seed_<s>`; every config is validated here,
    before any training."""
    cells: dict[str, tuple[str, dict[str, Any]]] = {}
    jobs: list[Job] = []
    for grid in grids:
        for cell, (init, overrides) in grid.cells().items():
            if cell in cells:
                continue
            cells[cell] = (init, overrides)
            for seed in grid.seeds:
                run_config = base.with_overrides({**overrides, "train.seed": seed, "train.threads": 1})
                jobs.append((cell, seed, run_config, out_dir / "runs" / cell / f"seed_{seed}"))
    return cells, jobs


def _train_one(config: RunConfig, run_dir: Path) -> dict[str, Any]:
    return train_bb(config, run_dir, overwrite=True, log=False)


def _write_parquet(frame: pd.DataFrame, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    frame.to_parquet(tmp, index=False)
    tmp.rename(path)


def run_regimes(
    config: RunConfig | None = None,
    out_dir: Path | str = "runs/regimes",
    quick: bool = False,
    grid: RegimeGrid | tuple[RegimeGrid, ...] | None = None,
    overwrite: bool = False,
    workers: int = 1,
    progress: Callable[[str], None] | None = None,
) -> pd.DataFrame:
    """Train the regime map and write its outputs (module doc); returns regimes.parquet's table.

    `config`: the base run (default `RunConfig()` with `REGIME_BASE`); the grid overrides init, BOS, weight decay,
    attention and steps on top of it. `grid`: default `QUICK_GRID` if `quick` else `FULL_GRID`; a tuple of grids maps
    the union of their cells (each with its own grid's seeds and steps; a cell named twice keeps its first grid), so
    a map can add e.g. one weight decay for a few cells only. `workers`: runs trained at once, each in its own
    process with one thread. `progress` receives one line per finished run.
    """
    base = config if config is not None else RunConfig().with_overrides(REGIME_BASE)
    grid = grid if grid is not None else (QUICK_GRID if quick else FULL_GRID)
    grids = grid if isinstance(grid, tuple) else (grid,)
    if workers < 1:
        raise SinkscopeError(f"regime workers={workers}: use at least 1")
    out_dir = Path(out_dir)
    cells, jobs = regime_jobs(base, grids, out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    recorded = [{k: list(v) if isinstance(v, tuple) else v for k, v in one.__dict__.items()} for one in grids]
    (out_dir / "regimes.json").write_text(json.dumps(
        {"base": base.to_dict(), "grid": recorded[0] if len(recorded) == 1 else recorded}, indent=2))
    summaries: dict[tuple[str, int], dict[str, Any]] = {}
    todo = []
    for cell, seed, run_config, run_dir in jobs:
        finished = (run_dir / "summary.json").is_file() and not overwrite
        if finished and trained_with(run_dir, run_config):
            summaries[cell, seed] = json.loads((run_dir / "summary.json").read_text())
        else:
            if finished:
                print(f"train-bb: {run_dir} was trained with another configuration (its config.json): training it "
                      "again", file=sys.stderr)  # fmt: skip
            todo.append((cell, seed, run_config, run_dir))

    def done(cell: str, seed: int, summary: dict[str, Any]) -> None:
        summaries[cell, seed] = summary
        if progress is not None:
            head = summary["switch_head"]
            progress(f"[{len(summaries)}/{len(jobs)}] {cell} seed {seed}: L{head['layer']}H{head['head']} "
                     f"{head['pattern']} ({summary['heads_line']}), copy_acc {summary['copy_acc']:.3f}, "
                     f"{summary['seconds']:.0f}s")

    if workers == 1:
        for cell, seed, run_config, run_dir in todo:
            done(cell, seed, _train_one(run_config, run_dir))
    else:
        with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(_train_one, c, d): (cell, seed) for cell, seed, c, d in todo}
            for future, (cell, seed) in futures.items():
                done(cell, seed, future.result())
    rows = pd.DataFrame(
        [regime_row(cell, seed, c, summaries[cell, seed], cells[cell][0], d) for cell, seed, c, d in jobs],
        columns=list(REGIME_COLUMNS),
    )
    from sinkscope.synthetic.regime_figures import phase_diagram, save_figure, wqk_cost_figure

    cells_frame = cell_table(rows, cost_predictions(base.task.vocab_size, base.task.n_triggers))
    _write_parquet(rows, out_dir / "regimes.parquet")
    _write_parquet(cells_frame, out_dir / "regime_cells.parquet")
    _write_parquet(switch_cost_table(rows), out_dir / "switch_costs.parquet")
    (out_dir / "figures").mkdir(exist_ok=True)
    save_figure(phase_diagram(cells_frame), out_dir / "figures" / "phase_diagram.png")
    save_figure(wqk_cost_figure(rows, cells_frame), out_dir / "figures" / "wqk_costs.png")
    return rows
