"""One model's reproduction as a plan: its sections (`reproduction.sections`), declared before anything runs, in
the order they are computed, and the one walk over them that computes each section at most once.

`model_plan` builds the sections; `ModelPlan.needed(claims)` keeps those the named claims read (`CLAIM_PARTS`);
`walk` reuses every section whose directory holds its key, computes the others
(loading the model only when the first one must be computed) and reads each back; `ModelPlan.measurements` hands
what was read to the judge as one `judge.Measurements`, so the judge reads evidence and calls no pipeline.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from sinkscope.reproduction.config import ANCHOR_CORPORA, DELTA_SCALES, ReproduceConfig
from sinkscope.reproduction.cost_section import cost_layers_section
from sinkscope.reproduction.experiment_sections import experiment_sections
from sinkscope.reproduction.files import is_fresh, log, write_key
from sinkscope.reproduction.judge import Measurements
from sinkscope.reproduction.kv_plan_section import kv_plan_section
from sinkscope.reproduction.sections import (
    Section,
    ablation_section,
    ablation_sensitivity_section,
    analysis_section,
    certificates_section,
    evidence_section,
    sink_query_section,
    switch_section,
    weights_section,
)

if TYPE_CHECKING:
    from sinkscope.models.load import LoadedModel

# The parts of one model's plan each claim's verdict reads (`judge.judge_model`); the first corpus's analysis is
# always read (its head scores pick the ablated heads, its depth and head dimension enter several claims).
# "corpora": each main corpus's analysis, per-window evidence and switch pass; "anchors": the analyses and
# evidence of builtin:prose, :random, :repeat; an experiment by its `experiment_sections` name.
CLAIM_PARTS: dict[str, tuple[str, ...]] = {
    "geometry": ("corpora",), "oversmoothing": ("corpora",), "switch": ("corpora",), "value_drain": ("corpora",),
    "mlp_like": ("corpora",), "switch_routes": ("corpora", "ablations"), "representability": ("certificates",),
    "sink_ablation": ("ablations", "sink_queries", "ablation_sensitivity"),
    "dormant_heads": ("ablations", "ablation_sensitivity"), "cost_real_layers": ("costs",),
    "weights_low_rank": ("weights", "certificates"), "weights_bos_alignment": ("weights", "certificates"),
    "gu_sink_rate": ("anchors",), "sink_in_use": ("eviction",), "dense_causal": ("dense",),
    "prevalence": ("prevalence",), "switch_assumptions": ("assumptions",), "kv_plan_measures": ("kv_plan",),
}  # fmt: skip
# The claims judged without a model (`reproduction.run`): each reads one model-free section.
MODEL_FREE_CLAIMS = ("cost_closed_forms", "bigram_backcopy_regimes", "cost_boundary", "cost_boundary_trained")


@dataclass(frozen=True)
class ModelPlan:
    """One model's sections, named by the evidence each gives (the fields of `judge.Measurements`)."""

    analyses: dict[str, Section]  # corpus -> analyze run: the main corpora (with smoothing), then the anchors
    ablations: tuple[Section, ...]  # zeroed heads, heads moved to BOS
    sink_queries: Section
    switch: dict[str, Section]  # main corpus -> switch curves and routes
    costs: Section
    weights: Section
    evidence: dict[str, Section]  # every analysed corpus -> per-window sums
    certificates: Section
    experiments: dict[str, Section] = field(default_factory=dict)  # eviction, dense, prevalence, …, kv_plan
    ablation_sensitivity: Section | None = None  # the ablations at their own thresholds × ½, × 2 (not --quick)

    def in_order(self) -> list[Section]:
        """The sections in the order they are computed: analyses, ablations, sink queries, switch, costs, weights,
        evidence, certificates (the model's passes before the half-space programs, the slowest part), issue 36's
        experiments, then the ablations' sensitivity passes."""
        sensitivity = [self.ablation_sensitivity] if self.ablation_sensitivity is not None else []
        return [*self.analyses.values(), *self.ablations, self.sink_queries, *self.switch.values(), self.costs,
                self.weights, *self.evidence.values(), self.certificates, *self.experiments.values(),
                *sensitivity]  # fmt: skip

    def needed(self, claims: tuple[str, ...] | None = None) -> list[Section]:
        """`in_order()`, or with `claims` only the sections those claims read (`CLAIM_PARTS`), in the same order."""
        if claims is None:
            return self.in_order()
        parts = {part for claim in claims for part in CLAIM_PARTS.get(claim, ())}
        main = list(self.switch)
        anchors = [corpus for corpus in self.analyses if corpus in ANCHOR_CORPORA]
        chosen = [self.analyses[main[0]]]
        if "corpora" in parts:
            chosen += [self.analyses[c] for c in main] + [self.evidence[c] for c in main] + list(self.switch.values())
        if "anchors" in parts:
            chosen += [self.analyses[c] for c in anchors] + [self.evidence[c] for c in anchors]
        chosen += [*self.ablations] if "ablations" in parts else []
        named = {"sink_queries": self.sink_queries, "costs": self.costs, "weights": self.weights,
                 "certificates": self.certificates, "ablation_sensitivity": self.ablation_sensitivity,
                 **self.experiments}  # fmt: skip
        chosen += [section for part, section in named.items() if part in parts and section is not None]
        keep = {section.directory for section in chosen}
        return [section for section in self.in_order() if section.directory in keep]

    def measurements(self, read: dict[Path, Any]) -> Measurements:
        """The judge's evidence from `read` (section directory -> what its `load` returned); a section not read
        (a run of some claims only) leaves its field empty."""

        def by_corpus(sections: dict[str, Section]) -> dict[str, Any]:
            return {corpus: read[section.directory] for corpus, section in sections.items()
                    if section.directory in read}  # fmt: skip

        def one(section: Section | None, empty: Any) -> Any:
            return read[section.directory] if section is not None and section.directory in read else empty

        certificates, alignment = one(self.certificates, (pd.DataFrame(), pd.DataFrame()))
        ablations = [read[section.directory] for section in self.ablations if section.directory in read]
        return Measurements(runs=by_corpus(self.analyses),
                            ablation=pd.concat(ablations, ignore_index=True) if ablations else pd.DataFrame(),
                            costs=one(self.costs, pd.DataFrame()), weights=one(self.weights, pd.DataFrame()),
                            evidence=by_corpus(self.evidence), certificates=certificates, alignment=alignment,
                            sink_queries=one(self.sink_queries, {}), switch=by_corpus(self.switch),
                            experiments=by_corpus(self.experiments),
                            ablation_variants=one(self.ablation_sensitivity, {}))  # fmt: skip


def model_plan(name: str, config: ReproduceConfig, out: Path) -> ModelPlan:
    """Every section of model `name` under `out/MODEL/`: an analysis per main corpus (with smoothing) and per
    anchor corpus not among them; the ablations on the first corpus, ranked by its analysis; switch evidence per
    main corpus; layer costs; weight spectra; per-window evidence per analysed corpus (δ × ½, 1, 2 on the main
    corpora unless `quick`, δ alone on the anchors); certificates; the experiments, with the KV plan of the
    measures (`kv_plan_section`, its heads read off the first corpus's analysis)."""
    main = config.corpora
    analyses = {corpus: analysis_section(name, config, out, corpus, smoothing=True) for corpus in main}
    for corpus in ANCHOR_CORPORA:
        if corpus not in analyses:
            analyses[corpus] = analysis_section(name, config, out, corpus, smoothing=False)
    scores = analyses[main[0]]
    scales = (1.0,) if config.quick else DELTA_SCALES  # --quick: no δ sensitivity, one pass per corpus
    return ModelPlan(
        analyses=analyses,
        ablations=tuple(ablation_section(name, config, out, scores, mode) for mode in ("zero", "bos")),
        sink_queries=sink_query_section(name, config, out, scores),
        switch={corpus: switch_section(name, config, out, corpus) for corpus in main},
        costs=cost_layers_section(name, config, out),
        weights=weights_section(name, config, out),
        evidence={corpus: evidence_section(name, config, out, corpus, scales if corpus in main else (1.0,))
                  for corpus in analyses},  # fmt: skip
        certificates=certificates_section(name, config, out),
        experiments={**experiment_sections(name, config, out),
                     "kv_plan": kv_plan_section(name, config, out, scores)},  # fmt: skip
        ablation_sensitivity=None if config.quick else ablation_sensitivity_section(name, config, out, scores),
    )


@dataclass
class Pace:
    """The rate this walk measured: the `Section.work` of the sections it computed over their seconds, summed
    (forward-pass tokens per second, so a busy or a fast machine is read off the run itself), and from it the
    expected time of the next section, its work / rate."""

    work: float = 0.0
    seconds: float = 0.0

    def add(self, work: float, seconds: float) -> None:
        """Count one computed section (one of no work or no measurable time tells nothing of the rate)."""
        if work > 0 and seconds > 0:
            self.work, self.seconds = self.work + work, self.seconds + seconds

    def expected(self, work: float) -> str:
        """' (about 4 min)' for a section of `work`, or '' before any rate is measured or for a section of no
        work."""
        from sinkscope.pipelines.time_estimate import duration

        if work <= 0 or self.work <= 0:
            return ""
        return f" (about {duration(work * self.seconds / self.work)})"


@dataclass
class Walked:
    """What one walk did: each section read back (by directory), the seconds of those it computed (by label,
    in order), and the labels of those it reused."""

    read: dict[Path, Any] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    reused: list[str] = field(default_factory=list)


def walk(name: str, sections: list[Section], open_model: Callable[[], LoadedModel]) -> Walked:
    """Reuse each section whose directory holds its key, else compute it (`compute` writes the directory whole,
    then the key is stamped), and read each back. `open_model` is called once, before the first computed
    section, and never when every section is reused. Each computed section's line says its expected time once a
    rate is measured (`Pace`: from the sections computed before it)."""
    walked, lm, pace = Walked(), None, Pace()
    for section in sections:
        if is_fresh(section.directory, section.key):
            log(f"{name}: {section.label}: reusing {section.directory}")
            walked.reused.append(section.label)
        else:
            started = time.perf_counter()
            if lm is None:
                lm = open_model()
            work = section.work(lm) if callable(section.work) else section.work
            log(f"{name}: {section.label}: computing{pace.expected(work)}")
            section.compute(lm, section.directory)
            write_key(section.directory, section.key)
            walked.seconds[section.label] = seconds = time.perf_counter() - started
            pace.add(work, seconds)
            log(f"{name}: {section.label}: done in {seconds:.0f} s")
        walked.read[section.directory] = section.load(section.directory)
    return walked


def model_opener(name: str, config: ReproduceConfig) -> Callable[[], LoadedModel]:
    """Loads model `name` with the config's device and dtype when called (`models.load.load_model`)."""

    def open_model() -> LoadedModel:
        from sinkscope.models.load import load_model

        log(f"{name}: loading the model")
        return load_model(name, device=config.device, dtype=config.dtype)

    return open_model
