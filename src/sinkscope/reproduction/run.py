"""`reproduce(config, out)`: run every measurement the paper's claims need, reuse finished ones, judge, report.

Layout of `out/` (every section directory carries `reproduce-key.json`, the settings it was computed with; a
section whose key matches is read back instead of recomputed, so a rerun only does what is missing):

    MODEL/analyze-CORPUS/   `sinkscope analyze` run (main corpora with the oversmoothing columns; anchors without)
    MODEL/ablate/           `sinkscope ablate` (sink-like and dormant heads vs random heads, zeroed)
    MODEL/ablate-bos/       `sinkscope ablate --mode bos` (sink-like heads vs random heads, attention moved to BOS)
    MODEL/sink-queries/     sink-like heads zeroed on their sink queries only vs the same heads on non-sink
                            queries and matched random head-and-query sets, per window (`reproduction.sink_query`)
    MODEL/switch-CORPUS/    per-window switch curves over τ, switched-off queries by route, residual-stream
                            cosines (`reproduction.switch_evidence`)
    MODEL/cost-layers/      exact sink/diagonal costs on the model's raw attention inputs at several T
    MODEL/weights/          spectra of W_QK and W_VO per head
    MODEL/evidence-CORPUS/  per-window sums for the bootstrap intervals (3 passes: δ × ½, 1, 2; anchors 1)
    MODEL/certificates/     half-space certificates of the middle layers on every raw context token, with random-
                            token controls, and the p̂/q̂ alignment of each head's W_QK over RoPE offsets
    theory/cost/            closed forms over T and exact programs on orthonormal embeddings
    regimes/                bigram-backcopy regime runs (when available)
    tables/*.csv, verdicts.json, report.md, report.html
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pandas as pd

from sinkscope.reproduction.config import ANCHOR_CORPORA, ReproduceConfig
from sinkscope.reproduction.evidence import DELTA_SCALES
from sinkscope.reproduction.files import KEY_FILE, is_fresh, log, swapped_directory, write_key


def slug(corpus: str) -> str:
    """A directory-safe name for a corpus source: builtin:prose → builtin-prose."""
    return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in corpus).strip("-") or "corpus"


class ModelSections:
    """The per-model sections; the model is loaded only when a section has to be computed."""

    def __init__(self, name: str, config: ReproduceConfig, out: Path):
        self.name, self.config, self.out = name, config, out / slug(name)
        self._lm = None
        self.seconds: dict[str, float] = {}
        self.reused: list[str] = []

    @property
    def lm(self):
        if self._lm is None:
            from sinkscope.models.load import load_model

            log(f"{self.name}: loading the model")
            self._lm = load_model(self.name, device=self.config.device, dtype=self.config.dtype)
        return self._lm

    def section(self, label: str, directory: Path, key: dict, compute: Callable[[Path], None]) -> Path:
        """Reuse `directory` when its key matches, else compute it (`compute(directory)` writes it whole)."""
        if is_fresh(directory, key):
            log(f"{self.name}: {label}: reusing {directory}")
            self.reused.append(label)
            return directory
        log(f"{self.name}: {label}: computing")
        started = time.perf_counter()
        compute(directory)
        write_key(directory, key)
        self.seconds[label] = time.perf_counter() - started
        log(f"{self.name}: {label}: done in {self.seconds[label]:.0f} s")
        return directory

    def analysis(self, corpus: str, smoothing: bool):
        """An analyze run of `corpus` (SPEC §2-§5), reused when its settings match; returns the `Run`."""
        from sinkscope.pipelines.analysis import AnalyzeConfig
        from sinkscope.pipelines.run import Run

        c = self.config
        n_windows = c.windows if smoothing else c.anchor_windows
        analyze_config = AnalyzeConfig(geometry_cap=c.geometry_cap, seed=c.seed)
        key = {"section": "analyze", "model": self.name, "corpus": corpus, "seq_len": c.seq_len,
               "windows": n_windows, "smoothing": smoothing, "config": asdict(analyze_config), "dtype": c.dtype,
               "smoothing_layer_stride": c.smoothing_layer_stride if smoothing else None}  # fmt: skip
        directory = self.out / f"analyze-{slug(corpus)}"

        def compute(target: Path) -> None:
            from sinkscope.corpus.windows import windows
            from sinkscope.pipelines.analysis import analyze

            lm = self.lm
            stream = windows(corpus, lm.tokenizer, c.seq_len, n_windows, seed=c.seed)
            layers = list(range(0, len(lm.layers), c.smoothing_layer_stride)) if smoothing else False
            run = analyze(lm, stream, analyze_config, progress=True, smoothing=layers)  # every stride-th layer
            run.save(target, overwrite=True, report=False)

        label = f"analyze {corpus}{' + smoothing' if smoothing else ''} ({n_windows} windows, T={c.seq_len})"
        return Run.load(self.section(label, directory, key, compute))

    def ablation(self, scores_run_dir: Path, mode: str = "zero") -> pd.DataFrame:
        """Heads vs random heads of the same number, ablated: `zero` (outputs set to 0) for the sink-like (highest
        hard-sink fraction) and dormant (lowest AHON-LN) sets; `bos` (all attention moved to BOS, output v_0)
        for the sink-like set."""
        from sinkscope.pipelines.ablate import AblateConfig

        c = self.config
        selections = ("highest-hard-sink", "lowest-ahon-ln") if mode == "zero" else ("highest-hard-sink",)
        draws = c.random_draws if mode == "zero" else c.bos_draws
        ablate_config = AblateConfig(selections=selections, fractions=(c.ablation_fraction,), mode=mode,
                                     n_random=draws, seed=c.seed, from_run=str(scores_run_dir))  # fmt: skip
        key = {"section": "ablate", "model": self.name, "corpus": c.corpora[0], "seq_len": c.seq_len,
               "windows": c.ablation_windows, "config": asdict(ablate_config) | {"from_run": "analysis"},
               "scores": json.loads((scores_run_dir / KEY_FILE).read_text()), "dtype": c.dtype}  # fmt: skip
        directory = self.out / ("ablate" if mode == "zero" else f"ablate-{mode}")

        def compute(target: Path) -> None:
            from sinkscope.corpus.windows import windows
            from sinkscope.pipelines.ablate import run_ablation, save_ablation

            lm = self.lm
            stream = windows(c.corpora[0], lm.tokenizer, c.seq_len, c.ablation_windows, seed=c.seed)
            curve, scores, meta = run_ablation(lm, stream, ablate_config)
            save_ablation(target, curve, scores, meta, overwrite=True)

        label = f"ablate{'' if mode == 'zero' else f' ({mode})'} {c.ablation_fraction:g} of heads ({c.ablation_windows} windows)"
        return pd.read_parquet(self.section(label, directory, key, compute) / "ablation.parquet")

    def evidence(self, corpus: str, delta_scales: tuple[float, ...]) -> dict[str, np.ndarray]:
        """Per-window sums of `corpus` for the bootstrap intervals (`reproduction.evidence.window_evidence`)."""
        c = self.config
        n_windows = c.windows if corpus in c.corpora else c.anchor_windows
        key = {"section": "evidence", "model": self.name, "corpus": corpus, "seq_len": c.seq_len, "windows": n_windows,
               "delta_scales": list(delta_scales), "seed": c.seed, "dtype": c.dtype, "version": 1}  # fmt: skip
        directory = self.out / f"evidence-{slug(corpus)}"

        def compute(target: Path) -> None:
            from sinkscope.corpus.windows import windows
            from sinkscope.reproduction.evidence import window_evidence

            stream = windows(corpus, self.lm.tokenizer, c.seq_len, n_windows, seed=c.seed)
            arrays = window_evidence(self.lm, stream, n_windows, c.seed, delta_scales=delta_scales)
            with swapped_directory(target) as staging:
                np.savez(staging / "evidence.npz", **arrays)

        label = f"per-window evidence {corpus} ({n_windows} windows, {len(delta_scales)} pass(es))"
        with np.load(self.section(label, directory, key, compute) / "evidence.npz") as data:
            return {name: data[name] for name in data.files}

    def certificates(self) -> tuple[pd.DataFrame, pd.DataFrame]:
        """Half-space certificates of the middle layers on every context token of `certificate_windows` windows
        with random-token controls, and the p̂/q̂ weight alignment per head (`reproduction.evidence`)."""
        from sinkscope.reproduction.claims import middle_layers

        c = self.config
        key = {"section": "certificates", "model": self.name, "corpus": c.corpora[0], "seq_len": c.seq_len,
               "windows": c.certificate_windows, "controls": c.certificate_controls, "seed": c.seed,
               "layer_stride": c.smoothing_layer_stride,
               "dtype": c.dtype, "version": 2}  # fmt: skip
        directory = self.out / "certificates"

        def compute(target: Path) -> None:
            from sinkscope.reproduction.evidence import certificate_layers, pq_alignment

            lm = self.lm
            table, directions = certificate_layers(lm, c.corpora[0], c.seq_len, c.certificate_windows,
                                                   middle_layers(len(lm.layers))[:: c.smoothing_layer_stride],
                                                   c.certificate_controls, c.seed)  # fmt: skip
            alignment = pq_alignment(lm, directions, c.seq_len)
            with swapped_directory(target) as staging:
                table.assign(width=lm.layout.d_model).to_parquet(staging / "certificates.parquet", index=False)
                alignment.to_parquet(staging / "pq_alignment.parquet", index=False)

        label = f"certificates of the middle layers ({c.certificate_windows} windows, {c.certificate_controls} controls)"
        directory = self.section(label, directory, key, compute)
        return pd.read_parquet(directory / "certificates.parquet"), pd.read_parquet(directory / "pq_alignment.parquet")

    def sink_query_ablation(self, scores_run_dir: Path) -> dict[str, np.ndarray]:
        """The most hard-sink heads zeroed on their sink queries only, vs the same heads on as many non-sink
        queries and matched random head-and-query sets, per window (`reproduction.sink_query`)."""
        c = self.config
        key = {"section": "sink-queries", "model": self.name, "corpus": c.corpora[0], "seq_len": c.seq_len,
               "windows": c.ablation_windows, "fraction": c.ablation_fraction, "draws": c.random_draws,
               "seed": c.seed, "scores": json.loads((scores_run_dir / KEY_FILE).read_text()), "dtype": c.dtype,
               "version": 2}  # fmt: skip
        directory = self.out / "sink-queries"

        def compute(target: Path) -> None:
            from sinkscope.corpus.windows import windows
            from sinkscope.pipelines.ablate import count_for_fraction, heads_by_score, scores_from_run
            from sinkscope.reproduction.sink_query import sink_query_losses

            lm = self.lm
            scores = scores_from_run(scores_run_dir)
            heads = heads_by_score(scores, "highest-hard-sink", count_for_fraction(len(scores), c.ablation_fraction))
            batches = list(windows(c.corpora[0], lm.tokenizer, c.seq_len, c.ablation_windows, seed=c.seed))
            arrays = sink_query_losses(lm, batches, heads, c.random_draws, c.seed)
            with swapped_directory(target) as staging:
                np.savez(staging / "sink_queries.npz", n_heads=np.array(len(heads)), **arrays)

        label = f"ablate {c.ablation_fraction:g} of heads on their sink queries ({c.ablation_windows} windows)"
        with np.load(self.section(label, directory, key, compute) / "sink_queries.npz") as data:
            return {name: data[name] for name in data.files}

    def switch_evidence(self, corpus: str) -> dict[str, np.ndarray]:
        """Per-window switch curves over τ, switched-off queries by route and residual-stream cosines of `corpus`
        (`reproduction.switch_evidence`)."""
        c = self.config
        key = {"section": "switch", "model": self.name, "corpus": corpus, "seq_len": c.seq_len,
               "windows": c.windows, "seed": c.seed, "dtype": c.dtype, "version": 3}  # fmt: skip
        directory = self.out / f"switch-{slug(corpus)}"

        def compute(target: Path) -> None:
            from sinkscope.corpus.windows import windows
            from sinkscope.reproduction.switch_evidence import switch_evidence

            batches = list(windows(corpus, self.lm.tokenizer, c.seq_len, c.windows, seed=c.seed))
            arrays = switch_evidence(self.lm, batches, c.seed)
            with swapped_directory(target) as staging:
                np.savez(staging / "switch.npz", **arrays)

        label = f"switch curves and routes {corpus} ({c.windows} windows)"
        with np.load(self.section(label, directory, key, compute) / "switch.npz") as data:
            return {name: data[name] for name in data.files}

    def cost_layers(self) -> pd.DataFrame:
        """Exact nuclear-norm sink and diagonal costs (SPEC §6) on raw attention inputs of real windows of
        `T + 1` tokens (z_0 = BOS) for each T of `cost_contexts`, every `cost_layer_stride`-th layer."""
        c = self.config
        key = {"section": "cost-layers", "model": self.name, "corpus": c.corpora[0], "contexts": list(c.cost_contexts),
               "windows": c.cost_windows, "stride": c.cost_layer_stride, "seed": c.seed, "dtype": c.dtype,
               "version": 2}  # fmt: skip
        directory = self.out / "cost-layers"

        def compute(target: Path) -> None:
            frame = pd.concat([real_layer_costs(self.lm, c.corpora[0], T, c.cost_windows, c.cost_layer_stride, c.seed)
                               for T in c.cost_contexts], ignore_index=True)  # fmt: skip
            with swapped_directory(target) as staging:
                frame.to_parquet(staging / "cost_layers.parquet", index=False)

        Ts = ", ".join(str(T) for T in c.cost_contexts)
        label = f"exact costs on layers (T = {Ts}, {c.cost_windows} window(s), stride {c.cost_layer_stride})"
        return pd.read_parquet(self.section(label, directory, key, compute) / "cost_layers.parquet")

    def weights(self) -> pd.DataFrame:
        """Spectra of W_QK and W_VO per head (`reproduce.weights`)."""
        key = {"section": "weights", "model": self.name, "dtype": self.config.dtype, "version": 1}
        directory = self.out / "weights"

        def compute(target: Path) -> None:
            from sinkscope.corpus.windows import default_bos_id
            from sinkscope.reproduction.weights import weight_table

            lm = self.lm
            frame = weight_table(lm, default_bos_id(lm.tokenizer))
            with swapped_directory(target) as staging:
                frame.to_parquet(staging / "weights.parquet", index=False)

        return pd.read_parquet(self.section("weight spectra", directory, key, compute) / "weights.parquet")


def real_layer_costs(lm, corpus: str, contexts: int, n_windows: int, stride: int, seed: int) -> pd.DataFrame:
    """One row per (layer, window, pattern): exact causal nuclear cost (κ = 1) on the raw inputs, rank, status;
    inf = infeasible."""
    import torch

    from sinkscope.capture.layer_inputs import layer_inputs
    from sinkscope.corpus.windows import windows
    from sinkscope.theory.cost import InfeasiblePatternError, pattern_cost

    layers = list(range(0, len(lm.layers), stride))
    batch = torch.cat(list(windows(corpus, lm.tokenizer, contexts + 1, n_windows, seed=seed)))  # (W, T+1)
    captured = layer_inputs(lm, batch, layers)
    rows = []
    for layer in layers:
        z = captured[layer][1].double().cpu().numpy()  # (W, T+1, d)
        for window in range(z.shape[0]):
            Z = z[window]
            for pattern in ("sink", "diagonal"):
                try:
                    result = pattern_cost(Z[0], Z[1:], pattern, "nuclear", True, 1.0, "auto")
                    cost, rank, status = result.value, result.rank, result.status
                except InfeasiblePatternError:
                    cost, rank, status = math.inf, 0, "infeasible"
                rows.append({"layer": layer, "window": window, "pattern": pattern, "cost": cost, "rank": rank,
                             "status": status, "T": contexts})  # fmt: skip
    return pd.DataFrame(rows)


def cost_theory(config: ReproduceConfig, out: Path) -> pd.DataFrame:
    """Closed-form causal costs on orthonormal embeddings for T = 2..1024 (SPEC §6) and, for `cost_exact_Ts`, the
    exact convex programs beside them. Columns: T, pattern, norm, closed_form, exact (NaN where not solved)."""
    key = {"section": "cost-theory", "exact_Ts": list(config.cost_exact_Ts), "version": 1}
    directory = out / "theory" / "cost"
    if is_fresh(directory, key):
        log(f"theory: cost closed forms: reusing {directory}")
        return pd.read_parquet(directory / "cost_theory.parquet")
    from sinkscope.pipelines.cost_sweep import synthetic_embeddings
    from sinkscope.theory.cost import pattern_cost
    from sinkscope.theory.cost_closed_forms import orthonormal_cost

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


def reproduce(config: ReproduceConfig, out: str | Path) -> dict:
    """Run (or reuse) every section for every model, judge each claim, write the tables, verdicts and reports.

    Returns `{"verdicts": [Verdict.to_dict()...], "seconds": ..., "reused": {model: [sections]}}`.
    """
    from sinkscope.corpus.sources import check_source
    from sinkscope.reproduction.claims import with_claim_text
    from sinkscope.reproduction.judge import Measurements, judge_model, judge_theory
    from sinkscope.reproduction.regimes import regime_runs
    from sinkscope.reproduction.report import write_reports

    out = Path(out)
    for corpus in dict.fromkeys((*config.corpora, *ANCHOR_CORPORA)):
        check_source(corpus)  # a missing corpus file fails before any model loads
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    theory = cost_theory(config, out)
    verdicts: list = []
    evidence: dict[str, dict] = {}
    reused: dict[str, list[str]] = {}
    seconds: dict[str, dict[str, float]] = {}
    for index, name in enumerate(config.models, 1):
        log(f"model {index}/{len(config.models)}: {name}")
        sections = ModelSections(name, config, out)
        runs = {corpus: sections.analysis(corpus, smoothing=True) for corpus in config.corpora}
        for corpus in ANCHOR_CORPORA:
            if corpus not in runs:
                runs[corpus] = sections.analysis(corpus, smoothing=False)
        first = config.corpora[0]
        scores_dir = sections.out / f"analyze-{slug(first)}"
        ablation = pd.concat([sections.ablation(scores_dir, "zero"), sections.ablation(scores_dir, "bos")],
                             ignore_index=True)  # fmt: skip
        sink_queries = sections.sink_query_ablation(scores_dir)
        switch = {corpus: sections.switch_evidence(corpus) for corpus in config.corpora}
        costs = sections.cost_layers()
        weights = sections.weights()
        scales = (1.0,) if config.quick else DELTA_SCALES  # --quick: no δ sensitivity, one pass per corpus
        evidence_arrays = {corpus: sections.evidence(corpus, scales if corpus in config.corpora else (1.0,))
                           for corpus in runs}  # fmt: skip
        certificates, alignment = sections.certificates()
        measured = Measurements(runs, ablation, costs, weights, evidence_arrays, certificates, alignment, sink_queries,
                                switch)  # fmt: skip
        model_verdicts, tables = judge_model(name, config, measured)
        verdicts.extend(model_verdicts)
        evidence[name] = tables
        reused[name], seconds[name] = sections.reused, sections.seconds
    regimes = regime_runs(config, out)  # last: it trains small models, the slowest part on a busy machine
    verdicts = [*judge_theory(theory, regimes), *verdicts]
    summary = {
        "config": config.to_dict(),
        "verdicts": [with_claim_text(v.to_dict()) for v in verdicts],
        "seconds": time.perf_counter() - started,  # measurements and judging; the reports follow
        "section_seconds": seconds,
        "reused": reused,
        "regimes": {k: v for k, v in regimes.items() if k != "cells"},
    }
    log("writing the report")
    write_reports(out, summary, evidence, theory, regimes)
    log(f"done in {time.perf_counter() - started:.0f} s: {out / 'report.html'}")
    return summary
