"""The two cost sections of `reproduce` (SPEC §6): exact sink and diagonal costs on a model's raw attention inputs
(`cost_layers_section`, one per model, walked by `reproduction.plan`), and the closed forms over T with the exact
programs beside them on orthonormal embeddings (`cost_theory`, once per reproduction, no model)."""

from __future__ import annotations

import math
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from multiprocessing import get_context
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import is_fresh, log, swapped_directory, write_key
from sinkscope.reproduction.sections import Section, inputs, model_directory, read_table

if TYPE_CHECKING:
    from sinkscope.models.load import LoadedModel


def window_costs(Z: np.ndarray) -> list[tuple[float, int, str]]:
    """(cost, rank, status) of the sink then the diagonal program on one window's raw inputs `Z` (T+1, d), z_0 =
    BOS: exact causal nuclear cost with κ = 1 (`theory.cost.pattern_cost`); (inf, 0, "infeasible") where no W_QK
    realises the pattern. Runs in whichever process calls it (a worker of `real_layer_costs`, or the main one)."""
    from sinkscope.theory.cost import InfeasiblePatternError, pattern_cost

    out = []
    for pattern in ("sink", "diagonal"):
        try:
            result = pattern_cost(Z[0], Z[1:], pattern, "nuclear", True, 1.0, "auto")
            out.append((result.value, result.rank, result.status))
        except InfeasiblePatternError:
            out.append((math.inf, 0, "infeasible"))
    return out


def solved_windows(inputs: list[np.ndarray], workers: int) -> list[list[tuple[float, int, str]]]:
    """`window_costs` of each window, in order: in this process when `workers` is 1, else in `workers` spawned
    processes of one BLAS thread each, the windows handed out in about four chunks per worker (a chunk's inputs
    are a few hundred KB; a program's numbers depend only on its inputs, not on the process or the BLAS thread
    count that solves it: the same bits, checked on SmolLM2's 240 programs)."""
    if workers == 1:
        return [window_costs(Z) for Z in inputs]
    from sinkscope.threads import one_blas_thread_in_children

    chunk = max(1, math.ceil(len(inputs) / (4 * workers)))
    with one_blas_thread_in_children(), ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        return list(pool.map(window_costs, inputs, chunksize=chunk))


def real_layer_costs(lm: LoadedModel, corpus: str, contexts: int, n_windows: int, stride: int, seed: int,
                     workers: int = 1) -> pd.DataFrame:  # fmt: skip
    """One row per (layer, window, pattern): exact causal nuclear cost (κ = 1) on the raw inputs, rank, status;
    inf = infeasible. The model runs in this process (the layer inputs of every window at once); the programs,
    two per (layer, window), are solved by `solved_windows` in `workers` processes."""
    import torch

    from sinkscope.capture.layer_inputs import layer_inputs
    from sinkscope.corpus.windows import windows

    layers = list(range(0, len(lm.layers), stride))
    batch = torch.cat(list(windows(corpus, lm.tokenizer, contexts + 1, n_windows, seed=seed)))  # (W, T+1)
    captured = layer_inputs(lm, batch, layers)
    keys, inputs = [], []
    for layer in layers:
        z = captured[layer][1].double().cpu().numpy()  # (W, T+1, d)
        keys += [(layer, window) for window in range(z.shape[0])]
        inputs += list(z)
    rows = []
    for (layer, window), costs in zip(keys, solved_windows(inputs, workers), strict=True):
        for pattern, (cost, rank, status) in zip(("sink", "diagonal"), costs, strict=True):
            rows.append({"layer": layer, "window": window, "pattern": pattern, "cost": cost, "rank": rank,
                         "status": status, "T": contexts})  # fmt: skip
    return pd.DataFrame(rows)


def cost_layers_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """Exact nuclear-norm sink and diagonal costs (SPEC §6) on raw attention inputs of real windows of `T + 1`
    tokens (z_0 = BOS) for each T of `cost_contexts`, every `cost_layer_stride`-th layer (`real_layer_costs`): the
    model runs in this process, the programs in `regime_section.regime_workers` processes (one: in this process)."""
    c = config
    key = {"section": "cost-layers", **inputs(name, c.corpora[0]), "contexts": list(c.cost_contexts),
           "windows": c.cost_windows, "stride": c.cost_layer_stride, "seed": c.seed, "dtype": c.dtype,
           "version": 2}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.reproduction.regime_section import regime_workers

        workers = regime_workers(c.cost_windows * len(range(0, len(lm.layers), c.cost_layer_stride)))
        frame = pd.concat([real_layer_costs(lm, c.corpora[0], T, c.cost_windows, c.cost_layer_stride, c.seed,
                                            workers) for T in c.cost_contexts], ignore_index=True)  # fmt: skip
        with swapped_directory(target) as staging:
            frame.to_parquet(staging / "cost_layers.parquet", index=False)

    Ts = ", ".join(str(T) for T in c.cost_contexts)
    label = f"exact costs on layers (T = {Ts}, {c.cost_windows} window(s), stride {c.cost_layer_stride})"
    directory = model_directory(out, name) / "cost-layers"
    return Section(label, directory, key, compute, partial(read_table, name="cost_layers.parquet"))


def cost_theory(config: ReproduceConfig, out: Path) -> pd.DataFrame:
    """Closed-form causal costs on orthonormal embeddings for T = 2..1024 (SPEC §6) and, for `cost_exact_Ts`, the
    exact convex programs beside them. Columns: T, pattern, norm, closed_form, exact (NaN where not solved).
    Written to `out/theory/cost/` and reused from there when its key matches."""
    key = {"section": "cost-theory", "exact_Ts": list(config.cost_exact_Ts), "version": 1}
    directory = out / "theory" / "cost"
    if is_fresh(directory, key):
        log(f"theory: cost closed forms: reusing {directory}")
        return pd.read_parquet(directory / "cost_theory.parquet")
    from sinkscope.theory.cost import pattern_cost
    from sinkscope.theory.cost_closed_forms import orthonormal_cost
    from sinkscope.theory.embeddings import synthetic_embeddings

    log("theory: cost closed forms and exact programs")
    rows = []
    for T in sorted({2**k for k in range(1, 11)} | set(config.cost_exact_Ts)):
        Z = synthetic_embeddings("orthonormal", T, T + 1, 0) if T in config.cost_exact_Ts else None
        for pattern in ("sink", "diagonal"):
            for norm in ("nuclear", "frobenius"):
                exact = math.nan
                if Z is not None:
                    exact = pattern_cost(Z[0], Z[1:], pattern, norm, True, 1.0, "auto").value
                rows.append({"T": T, "pattern": pattern, "norm": norm,
                             "closed_form": orthonormal_cost(T, pattern, norm, 1.0), "exact": exact})  # fmt: skip
    frame = pd.DataFrame(rows)
    with swapped_directory(directory) as staging:
        frame.to_parquet(staging / "cost_theory.parquet", index=False)
    write_key(directory, key)
    return frame
