"""The section of the `kv_plan_measures` claim inside `reproduce` (`MODEL/kv-plan/`): per window, the loss beyond
the recent window when the KV heads the paper's measures call streamable keep only sink + recent window, and the
same for random plans that stream as many KV heads (equal memory), with the full cache beside them.

The plan is `sinkscope kv-plan`'s default (`pipelines.kv_plan`, rule `measures`: kept = sink + diagonal +
previous-token mass of the first corpus's analysis, a KV head as streamable as its least streamable query head) at
share `SHARE` of full KV heads, `SINK_SIZE` first keys and `RECENT_SIZE` recent ones; the windows are
`kv_plan_eval`'s probe windows (a corpus window of T = max(2 × seq_len, the shortest that fits) tokens whose
opening span is copied at the end) and the loss is theirs (`kv_plan_eval.window_scores`: mean cross-entropy of the
natural text's targets of queries t ≥ recent_size). Cost: (2 + draws) forward passes over `ablation_windows`
windows (22 × 8 windows of 128 tokens on the stored run's settings).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import swapped_directory
from sinkscope.reproduction.sections import Section, forward_tokens, inputs, model_directory, read_arrays

if TYPE_CHECKING:
    import pandas as pd
    from torch import Tensor

    from sinkscope.models.load import LoadedModel

SHARE, SINK_SIZE, RECENT_SIZE, SPAN = 0.5, 4, 32, 16  # `sinkscope kv-plan`'s defaults (share, sink, recent, span)


def plan_length(config: ReproduceConfig) -> int:
    """T of the probe windows: twice the analysis length (`--quick`: once), at least the shortest length whose copied
    span lies beyond every copy query's recent window (`kv_plan_eval.EvalConfig.check_lengths`)."""
    shortest = SPAN + max(SINK_SIZE, 1) + 1 + RECENT_SIZE + 1
    return max((1 if config.quick else 2) * config.seq_len, shortest)


def measures_plan(heads: pd.DataFrame, n_layers: int, n_kv: int, group: int) -> np.ndarray:
    """Bool[L, KV]: the KV heads kept full by `sinkscope kv-plan`'s `measures` rule at `SHARE` (the round(SHARE · L ·
    KV) KV heads of lowest kept = sink + diag + prev mass, ties to the higher entropy); heads: analyze's heads table."""
    from sinkscope.pipelines.kv_plan import PlanConfig, full_heads, head_scores, need_order

    far = np.full((n_layers, n_kv * group), np.nan)  # the measures rule reads no far mass
    scores = head_scores(heads, far, group, PlanConfig(share=SHARE, sink_size=SINK_SIZE, recent_size=RECENT_SIZE))
    return full_heads(need_order(scores), n_layers, n_kv, SHARE)


def plan_losses(lm: LoadedModel, probes: list[Tensor], plan: np.ndarray, group: int, draws: int,
                seed: int) -> dict[str, np.ndarray]:  # fmt: skip
    """Per probe window the loss beyond the window (`kv_plan_eval.window_scores`): `full` (W,) the whole cache,
    `plan` (W,) the KV heads of `plan` (Bool[L, KV]) full and the others streamed, `random` (W, draws) as many full
    KV heads drawn uniformly (`rng.permutation(L · KV)[:n]`, seed `seed`); `plan_accuracy` and `random_accuracy`
    the probes' copy accuracy beside them."""
    from sinkscope.pipelines.kv_plan_eval import plan_masks, window_scores

    L, KV = plan.shape
    T, n = probes[0].shape[1], int(plan.sum())
    rng = np.random.default_rng(seed)

    def scores(full: np.ndarray | None) -> np.ndarray:
        masks = None if full is None else plan_masks(full, group, T, SINK_SIZE, RECENT_SIZE)
        return window_scores(lm, probes, masks, SPAN, RECENT_SIZE)

    randoms = []
    for _ in range(draws):
        full = np.zeros(L * KV, dtype=bool)
        full[rng.permutation(L * KV)[:n]] = True
        randoms.append(scores(full.reshape(L, KV)))
    ours, random = scores(plan), np.stack(randoms, 1)  # (W, 2), (W, D, 2)
    return {"full": scores(None)[:, 0], "plan": ours[:, 0], "random": random[..., 0],
            "plan_accuracy": ours[:, 1], "random_accuracy": random[..., 1]}  # fmt: skip


def kv_plan_section(name: str, config: ReproduceConfig, out: Path, scores: Section) -> Section:
    """`plan_losses` of the measures' plan read off the analysis `scores` and `random_draws` random plans on
    `ablation_windows` probe windows of the first corpus, read back as `kv_plan.npz` (with `n_full`, `n_kv_heads`,
    `seq_len`, `share`, `sink_size`, `recent_size`)."""
    c = config
    T = plan_length(c)
    key = {"section": "kv-plan", **inputs(name, c.corpora[0]), "seq_len": T, "windows": c.ablation_windows,
           "draws": c.random_draws, "share": SHARE, "sink_size": SINK_SIZE, "recent_size": RECENT_SIZE,
           "span": SPAN, "seed": c.seed, "scores": scores.key, "dtype": c.dtype, "version": 1}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.kv_plan import kv_head_count
        from sinkscope.pipelines.kv_plan_eval import probe
        from sinkscope.pipelines.run import Run

        batches = windows(c.corpora[0], lm.tokenizer, T, c.ablation_windows, seed=c.seed, batch_size=4)
        L, KV, group = kv_head_count(lm.config)
        plan = measures_plan(Run.load(scores.directory).heads, L, KV, group)
        probes = [probe(ids, SPAN, SINK_SIZE) for ids in batches]
        arrays = plan_losses(lm, probes, plan, group, c.random_draws, c.seed)
        with swapped_directory(target) as staging:
            np.savez(staging / "kv_plan.npz", plan_full=plan, n_full=np.array(int(plan.sum())),
                     n_kv_heads=np.array(plan.size), seq_len=np.array(T), share=np.array(SHARE),
                     sink_size=np.array(SINK_SIZE), recent_size=np.array(RECENT_SIZE), **arrays)  # fmt: skip

    label = (f"KV plan of the measures vs {c.random_draws} random plans (share {SHARE:g}, sink {SINK_SIZE} + recent "
             f"{RECENT_SIZE}, T={T}, {c.ablation_windows} windows; {c.random_draws + 2} passes)")  # fmt: skip
    work = forward_tokens(c.random_draws + 2, c.ablation_windows, T)
    return Section(label, model_directory(out, name) / "kv-plan", key, compute, partial(read_arrays, name="kv_plan.npz"),
                   work)  # fmt: skip
