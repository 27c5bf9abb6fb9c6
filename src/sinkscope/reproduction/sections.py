"""The measurements `reproduce` makes on one model, each declared as a `Section`: its directory, the settings it is
computed with (its key), how to compute it from the model and how to read it back. Building a section runs
nothing; `reproduction.plan` walks them in order and computes only those whose directory does not hold their key.

One function per section, built from the model name, the `ReproduceConfig`, the output root and the sections it
reads (the ablations read the first corpus's analysis: its directory for the head scores, its key in theirs).
A key holds a pipeline's config dataclass itself, stamped as its non-default fields (`reproduction.files`: a new
option whose default keeps the old behaviour changes no key; changing a default needs the section's `version`
bumped).
The exact layer costs are in `reproduction.cost_section`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from sinkscope.reproduction.config import SINK_QUERY_DELTA, ReproduceConfig
from sinkscope.reproduction.files import swapped_directory
from sinkscope.staging import child, safe_name

if TYPE_CHECKING:
    from sinkscope.models.load import LoadedModel

_PLAIN = re.compile(r"[a-z0-9]+")  # the names of the built-in corpora


@dataclass(frozen=True, eq=False)
class Section:
    """One measurement of one model: `compute(lm, directory)` writes `directory` whole, `load(directory)` reads it
    back; `key` (the settings it depends on) is stamped into the directory after it is written (`files.write_key`),
    so that a later run with the same key reads the directory instead of computing it again. `work` is its size
    in forward-pass tokens (`forward_tokens`; a function of the loaded model where the model's shape decides it),
    from which `plan.walk` says its expected time; 0: not said (a
    section whose time is not its forward passes: convex programs, weight spectra). It is not part of the key."""

    label: str  # the name in log lines, `section_seconds` and `reused`
    directory: Path
    key: dict
    compute: Callable[[LoadedModel, Path], None]
    load: Callable[[Path], Any]
    work: float | Callable[[LoadedModel], float] = 0.0


# A pass that captures (analyze's statistics and oversmoothing columns, the switch and evidence passes) counted as
# this many plain forward passes of its tokens: a rough figure, the time estimate's only constant (the rate itself
# is measured in the run, so a wrong figure skews the estimates by at most this factor).
CAPTURE_PASSES = 3.0


def forward_tokens(passes: float, windows: int, seq_len: int) -> float:
    """A section's size: `passes` forward passes over `windows` windows of `seq_len` tokens, in tokens (the unit
    `plan.walk` measures its rate in)."""
    return float(passes * windows * seq_len)


def slug(text: str) -> str:
    """One plain folder name for a model or corpus argument, distinct for distinct arguments (`staging.safe_name`:
    the argument itself when plain, else its plain characters and a digest: `sub/c.txt` → `sub-c.txt-<digest>`, never
    `..`). A built-in corpus is `builtin-NAME` (builtin:prose → builtin-prose), a name no other argument gets: a plain
    argument starting with `builtin-` (a folder of the user's) gets a digest too."""
    if text.startswith("builtin:") and _PLAIN.fullmatch(text.removeprefix("builtin:")):
        return f"builtin-{text.removeprefix('builtin:')}"
    name = safe_name(text)
    if name.casefold().startswith("builtin-") and name == text:
        name = f"{name[:40]}-{hashlib.sha256(text.encode('utf-8', 'surrogatepass')).hexdigest()[:10]}"
    return name


def model_directory(out: Path, name: str) -> Path:
    """`out/MODEL/`: the directory of one model's sections, always one folder inside `out` (`slug`)."""
    return child(out, slug(name))


def inputs(name: str, corpus: str | None = None) -> dict:
    """The key fields of a section's inputs, by content (`sinkscope.identity`): the model `name` and, when it reads
    one, `corpus`."""
    from sinkscope.identity import corpus_identity
    from sinkscope.models.load import weights_identity

    return {"model": weights_identity(name)} | ({} if corpus is None else {"corpus": corpus_identity(corpus)})


def read_arrays(directory: Path, name: str) -> dict[str, np.ndarray]:
    """The arrays of `directory/name` (an `.npz`), read into memory."""
    with np.load(directory / name) as data:
        return {key: data[key] for key in data.files}


def read_table(directory: Path, name: str) -> pd.DataFrame:
    """The table `directory/name` (a `.parquet`)."""
    return pd.read_parquet(directory / name)


def analysis_section(name: str, config: ReproduceConfig, out: Path, corpus: str, smoothing: bool) -> Section:
    """An analyze run of `corpus` (SPEC §2-§5), read back as its `Run`: on a main corpus (`smoothing`) with the
    oversmoothing columns of every `smoothing_layer_stride`-th layer over `windows` windows, on an anchor corpus
    without them over `anchor_windows`."""
    from sinkscope.pipelines.analysis import AnalyzeConfig

    c = config
    n_windows = c.windows if smoothing else c.anchor_windows
    analyze_config = AnalyzeConfig(geometry_cap=c.geometry_cap, seed=c.seed)
    key = {"section": "analyze", **inputs(name, corpus), "seq_len": c.seq_len,
           "windows": n_windows, "smoothing": smoothing, "config": analyze_config, "dtype": c.dtype,
           "smoothing_layer_stride": c.smoothing_layer_stride if smoothing else None}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.analysis import analyze

        stream = windows(corpus, lm.tokenizer, c.seq_len, n_windows, seed=c.seed)
        layers = list(range(0, len(lm.layers), c.smoothing_layer_stride)) if smoothing else False
        run = analyze(lm, stream, analyze_config, progress=True, smoothing=layers)  # every stride-th layer
        run.save(target, overwrite=True, report=False)

    def load(directory: Path):
        from sinkscope.pipelines.run import Run

        return Run.load(directory)

    label = f"analyze {corpus}{' + smoothing' if smoothing else ''} ({n_windows} windows, T={c.seq_len})"
    work = forward_tokens(CAPTURE_PASSES, n_windows, c.seq_len)
    return Section(label, model_directory(out, name) / f"analyze-{slug(corpus)}", key, compute, load, work)


def ablation_section(name: str, config: ReproduceConfig, out: Path, scores: Section, mode: str) -> Section:
    """Heads vs random heads of the same number, ablated on the first corpus, read back as `ablation.parquet`:
    `zero` (outputs set to 0) for the sink-like (highest hard-sink fraction) and dormant (lowest AHON-LN) sets;
    `bos` (all attention moved to BOS, output v_0) for the sink-like set. The heads are ranked by the scores of
    the analysis `scores`, whose key is part of this one. Mode `zero` adds `random_draws` layer-matched random
    sets of the dormant set (`reproduction.matched_heads`); every row keeps its per-window Δloss."""
    from sinkscope.pipelines.ablate import AblateConfig

    c = config
    selections = ("highest-hard-sink", "lowest-ahon-ln") if mode == "zero" else ("highest-hard-sink",)
    draws = c.random_draws if mode == "zero" else c.bos_draws
    ablate_config = AblateConfig(selections=selections, fractions=(c.ablation_fraction,), mode=mode,
                                 n_random=draws, seed=c.seed, from_run=str(scores.directory))  # fmt: skip
    key = {"section": "ablate", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": c.ablation_windows, "config": replace(ablate_config, from_run="analysis"),
           "scores": scores.key, "dtype": c.dtype}  # fmt: skip
    if mode == "zero":
        key |= {"layer_matched_draws": c.random_draws, "window_delta": True}

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.ablate import run_ablation, save_ablation
        from sinkscope.pipelines.loss_passes import clean_pass
        from sinkscope.reproduction.matched_heads import layer_matched_ablation

        stream = windows(c.corpora[0], lm.tokenizer, c.seq_len, c.ablation_windows, seed=c.seed)
        batches = list(stream)
        clean = clean_pass(lm, batches)  # once for the chosen sets and both controls
        curve, head_scores, meta = run_ablation(lm, stream, ablate_config, clean=clean)
        if mode == "zero":
            matched = layer_matched_ablation(lm, batches, curve, "lowest-ahon-ln", c.random_draws, c.seed, clean)
            curve = pd.concat([curve, matched], ignore_index=True)
        save_ablation(target, curve, head_scores, meta, overwrite=True)

    label = f"ablate{'' if mode == 'zero' else f' ({mode})'} {c.ablation_fraction:g} of heads ({c.ablation_windows} windows)"
    directory = model_directory(out, name) / ("ablate" if mode == "zero" else f"ablate-{mode}")
    passes = 1 + len(selections) + draws + (c.random_draws if mode == "zero" else 0)  # clean, chosen, controls
    work = forward_tokens(passes, c.ablation_windows, c.seq_len)
    return Section(label, directory, key, compute, partial(read_table, name="ablation.parquet"), work)


def sink_query_section(name: str, config: ReproduceConfig, out: Path, scores: Section) -> Section:
    """The most hard-sink heads of the analysis `scores` zeroed on their sink queries only, vs the same heads on as
    many non-sink queries and matched random head-and-query sets, per window (`reproduction.sink_query`)."""
    c = config
    key = {"section": "sink-queries", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": c.ablation_windows, "fraction": c.ablation_fraction, "draws": c.random_draws,
           "seed": c.seed, "scores": scores.key, "dtype": c.dtype, "version": 2}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.head_selection import count_for_fraction, heads_by_score, scores_from_run
        from sinkscope.reproduction.sink_query import sink_query_losses

        head_scores = scores_from_run(scores.directory)
        count = count_for_fraction(len(head_scores), c.ablation_fraction)
        heads = heads_by_score(head_scores, "highest-hard-sink", count)
        batches = list(windows(c.corpora[0], lm.tokenizer, c.seq_len, c.ablation_windows, seed=c.seed))
        arrays = sink_query_losses(lm, batches, heads, c.random_draws, c.seed, SINK_QUERY_DELTA)
        with swapped_directory(target) as staging:
            np.savez(staging / "sink_queries.npz", n_heads=np.array(len(heads)), **arrays)

    label = f"ablate {c.ablation_fraction:g} of heads on their sink queries ({c.ablation_windows} windows)"
    directory = model_directory(out, name) / "sink-queries"
    work = forward_tokens(3 + 2 * c.random_draws, c.ablation_windows, c.seq_len)  # clean, eager, chosen, controls
    return Section(label, directory, key, compute, partial(read_arrays, name="sink_queries.npz"), work)


def ablation_sensitivity_section(name: str, config: ReproduceConfig, out: Path, scores: Section) -> Section:
    """The ablations re-measured at their own thresholds × ½ and × 2 (the head fraction of both, the sink-query δ
    of `sink_ablation`), with `sensitivity_draws` draws of each control (`reproduction.ablation_variants`); the
    sensitivity step of `sink_ablation` and `dormant_heads` reads it."""
    from sinkscope.reproduction.ablation_variants import VARIANT_SCALES

    c = config
    key = {"section": "ablate-sensitivity", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": c.ablation_windows, "fraction": c.ablation_fraction, "delta": SINK_QUERY_DELTA,
           "scales": list(VARIANT_SCALES), "draws": c.sensitivity_draws, "seed": c.seed, "scores": scores.key,
           "dtype": c.dtype, "version": 1}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.pipelines.head_selection import scores_from_run
        from sinkscope.reproduction.ablation_variants import ablation_variants

        batches = list(windows(c.corpora[0], lm.tokenizer, c.seq_len, c.ablation_windows, seed=c.seed))
        arrays = ablation_variants(lm, batches, scores_from_run(scores.directory), c.ablation_fraction,
                                   SINK_QUERY_DELTA, c.sensitivity_draws, c.seed)  # fmt: skip
        with swapped_directory(target) as staging:
            np.savez(staging / "variants.npz", **arrays)

    label = (f"ablations at head fraction and sink-query δ × ½, × 2 ({c.sensitivity_draws} draws per control, "
             f"{c.ablation_windows} windows)")  # fmt: skip
    directory = model_directory(out, name) / "ablate-sensitivity"
    passes = 2 + 6 * (1 + 2 * c.sensitivity_draws)  # clean and eager once; 6 variants × (chosen, 2 controls)
    work = forward_tokens(passes, c.ablation_windows, c.seq_len)
    return Section(label, directory, key, compute, partial(read_arrays, name="variants.npz"), work)


def switch_section(name: str, config: ReproduceConfig, out: Path, corpus: str) -> Section:
    """Per-window switch curves over τ, switched-off queries by route and residual-stream cosines of a main
    corpus (`reproduction.switch_evidence`)."""
    c = config
    key = {"section": "switch", **inputs(name, corpus), "seq_len": c.seq_len,
           "windows": c.windows, "seed": c.seed, "dtype": c.dtype, "switch_tau": c.switch_tau, "version": 4}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.reproduction.switch_evidence import switch_evidence

        batches = list(windows(corpus, lm.tokenizer, c.seq_len, c.windows, seed=c.seed))
        arrays = switch_evidence(lm, batches, c.seed, tau=c.switch_tau)
        with swapped_directory(target) as staging:
            np.savez(staging / "switch.npz", **arrays)

    label = f"switch curves and routes {corpus} ({c.windows} windows)"
    directory = model_directory(out, name) / f"switch-{slug(corpus)}"
    work = forward_tokens(CAPTURE_PASSES, c.windows, c.seq_len)
    return Section(label, directory, key, compute, partial(read_arrays, name="switch.npz"), work)


def evidence_section(name: str, config: ReproduceConfig, out: Path, corpus: str,
                     delta_scales: tuple[float, ...]) -> Section:  # fmt: skip
    """Per-window sums of `corpus` for the bootstrap intervals, one pass per δ scale
    (`reproduction.evidence.window_evidence`)."""
    c = config
    n_windows = c.windows if corpus in c.corpora else c.anchor_windows
    key = {"section": "evidence", **inputs(name, corpus), "seq_len": c.seq_len, "windows": n_windows,
           "delta_scales": list(delta_scales), "seed": c.seed, "dtype": c.dtype, "version": 1}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import windows
        from sinkscope.reproduction.evidence import window_evidence

        stream = windows(corpus, lm.tokenizer, c.seq_len, n_windows, seed=c.seed)
        arrays = window_evidence(lm, stream, n_windows, c.seed, delta_scales=delta_scales)
        with swapped_directory(target) as staging:
            np.savez(staging / "evidence.npz", **arrays)

    label = f"per-window evidence {corpus} ({n_windows} windows, {len(delta_scales)} pass(es))"
    directory = model_directory(out, name) / f"evidence-{slug(corpus)}"
    work = forward_tokens(CAPTURE_PASSES * len(delta_scales), n_windows, c.seq_len)
    return Section(label, directory, key, compute, partial(read_arrays, name="evidence.npz"), work)


def certificates_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """Half-space certificates of the middle layers on every context token of `certificate_windows` windows with
    random-token controls, and the p̂/q̂ weight alignment per head (`reproduction.evidence`); read back as the
    pair (certificates, alignment)."""
    c = config
    key = {"section": "certificates", **inputs(name, c.corpora[0]), "seq_len": c.seq_len,
           "windows": c.certificate_windows, "controls": c.certificate_controls, "seed": c.seed,
           "layer_stride": c.smoothing_layer_stride,
           "dtype": c.dtype, "version": 2}  # fmt: skip

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.reproduction.evidence import certificate_layers, pq_alignment
        from sinkscope.reproduction.strata import middle_layers

        layers = middle_layers(len(lm.layers))[:: c.smoothing_layer_stride]
        table, directions = certificate_layers(lm, c.corpora[0], c.seq_len, c.certificate_windows, layers,
                                               c.certificate_controls, c.seed)  # fmt: skip
        alignment = pq_alignment(lm, directions, c.seq_len)
        with swapped_directory(target) as staging:
            table.assign(width=lm.layout.d_model).to_parquet(staging / "certificates.parquet", index=False)
            alignment.to_parquet(staging / "pq_alignment.parquet", index=False)

    def load(directory: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
        return read_table(directory, "certificates.parquet"), read_table(directory, "pq_alignment.parquet")

    label = f"certificates of the middle layers ({c.certificate_windows} windows, {c.certificate_controls} controls)"
    return Section(label, model_directory(out, name) / "certificates", key, compute, load)


def weights_section(name: str, config: ReproduceConfig, out: Path) -> Section:
    """Spectra of W_QK and W_VO per head (`reproduction.weights`)."""
    key = {"section": "weights", **inputs(name), "dtype": config.dtype, "version": 1}

    def compute(lm: LoadedModel, target: Path) -> None:
        from sinkscope.corpus.windows import default_bos_id
        from sinkscope.reproduction.weights import weight_table

        frame = weight_table(lm, default_bos_id(lm.tokenizer))
        with swapped_directory(target) as staging:
            frame.to_parquet(staging / "weights.parquet", index=False)

    directory = model_directory(out, name) / "weights"
    return Section("weight spectra", directory, key, compute, partial(read_table, name="weights.parquet"))
