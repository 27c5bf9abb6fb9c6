"""`reproduce(config, out)`: run every measurement the paper's claims need, reuse finished ones, judge, report.

In order: the corpora are checked, the cost theory is computed (`reproduction.cost_section`), each model's plan of
sections is walked (`reproduction.plan`, the sections in `reproduction.sections`) and judged, the regime map is
trained or read (`reproduction.regime_section`) and judged, and the reports are written.

Layout of `out/` (every section directory carries `reproduce-key.json`, the identity of what it was computed
from: its inputs by content (`sinkscope.identity`) and its settings; a section whose key matches is read back
instead of recomputed, so a rerun only does what is missing or changed, and says why). MODEL and CORPUS are
`sections.slug` of the arguments: one plain folder each, distinct for distinct arguments:

    MODEL/analyze-CORPUS/   `sinkscope analyze` run (main corpora with the oversmoothing columns; anchors without)
    MODEL/ablate/           `sinkscope ablate` (sink-like and dormant heads vs random heads, zeroed)
    MODEL/ablate-bos/       `sinkscope ablate --mode bos` (sink-like heads vs random heads, attention moved to BOS)
    MODEL/sink-queries/     sink-like heads zeroed on their sink queries only vs the same heads on non-sink
                            queries and matched random head-and-query sets, per window (`reproduction.sink_query`)
    MODEL/ablate-sensitivity/  the two ablations again at their head fraction and sink-query δ × ½, × 2, 5 draws
                            per control (`reproduction.ablation_variants`; not under --quick)
    MODEL/switch-CORPUS/    per-window switch curves over τ, switched-off queries by route, residual-stream
                            cosines (`reproduction.switch_evidence`)
    MODEL/cost-layers/      exact sink/diagonal costs on the model's raw attention inputs at several T
    MODEL/weights/          spectra of W_QK and W_VO per head
    MODEL/evidence-CORPUS/  per-window sums for the bootstrap intervals (3 passes: δ × ½, 1, 2; anchors 1)
    MODEL/certificates/     half-space certificates of the middle layers on every raw context token, with random-
                            token controls, and the p̂/q̂ alignment of each head's W_QK over RoPE offsets
    theory/cost/            closed forms over T and exact programs on orthonormal embeddings
    theory/cost-regimes/    the predicted sink/diagonal cost boundary beside the exact costs (`experiment_sections`)
    MODEL/evict/, dense/, prevalence/, switch-assumptions/   issue 36's experiments (`experiment_sections`)
    MODEL/kv-plan/          the KV plan of the measures vs random plans at equal memory, per window
                            (`kv_plan_section`)
    regimes/                bigram-backcopy regime runs (when available)
    regimes-boundary/       the lab trained on both sides of the predicted cost boundary (`experiment_sections`)
    tables/*.csv, verdicts.json, report.md, report.html
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sinkscope.errors import SinkscopeError
from sinkscope.reproduction.config import ANCHOR_CORPORA, ReproduceConfig
from sinkscope.reproduction.files import log


def check_folders(config: ReproduceConfig) -> None:
    """Refuse, before any work, two models or two corpora whose folders would be one on a file system that ignores
    case (`sections.slug` is distinct for distinct names, `Model` and `model` aside)."""
    from sinkscope.reproduction.sections import slug

    for what, names in (("--models", config.models), ("--corpora", (*config.corpora, *ANCHOR_CORPORA))):
        folders: dict[str, str] = {}
        for name in dict.fromkeys(names):
            other = folders.setdefault(slug(name).casefold(), name)
            if other != name:
                raise SinkscopeError(f"{what} {other!r} and {name!r} would share one folder on a file system that "
                                     "ignores case; rename one")  # fmt: skip


def check_claims(claims: tuple[str, ...] | None) -> None:
    """Refuse, before any work, a claim name that is not one of `claim_texts.CLAIMS`: one line listing them."""
    from sinkscope.reproduction.claim_texts import CLAIMS

    unknown = [name for name in claims or () if name not in CLAIMS]
    if unknown:
        raise SinkscopeError(f"--claims {','.join(unknown)}: no such claim; choose from {', '.join(CLAIMS)}")


def reproduce(config: ReproduceConfig, out: str | Path, claims: tuple[str, ...] | None = None) -> dict:
    """Run (or reuse) every section for every model, judge each claim, write the tables, verdicts and reports.

    `claims`: only the sections those claims read (`plan.ModelPlan.needed`, `plan.MODEL_FREE_CLAIMS`), at the
    config's full size, and only their verdicts; such a run writes claims-verdicts.json and claims-summary.json
    (a full run's verdicts.json, summary.json and report in the same `out` stay as they were: the report's
    sections need every claim). Returns `{"verdicts": [Verdict.to_dict()...], "seconds": ..., "reused":
    {model: [sections]}}`.
    """
    from sinkscope.corpus.sources import check_source
    from sinkscope.reproduction.claim_texts import with_claim_text
    from sinkscope.reproduction.cost_section import cost_theory
    from sinkscope.reproduction.experiment_claims import cost_boundary_trained_verdict, cost_boundary_verdict
    from sinkscope.reproduction.experiment_sections import boundary_lab, cost_regimes_theory
    from sinkscope.reproduction.judge import judge_model, judge_theory
    from sinkscope.reproduction.plan import CLAIM_PARTS, model_opener, model_plan, walk
    from sinkscope.reproduction.regime_section import read_regime_map, regime_runs
    from sinkscope.reproduction.report import write_reports

    check_claims(claims)
    out = Path(out)
    for corpus in dict.fromkeys((*config.corpora, *ANCHOR_CORPORA)):
        check_source(corpus)  # a missing corpus file fails before any model loads
    check_folders(config)
    if config.regimes_from is not None:
        read_regime_map(config.regimes_from)  # a damaged map fails before any section is computed
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    def wanted(name: str) -> bool:
        return claims is None or name in claims

    theory = cost_theory(config, out) if wanted("cost_closed_forms") else None
    boundary = cost_regimes_theory(config, out) if wanted("cost_boundary") else None
    verdicts: list = []
    evidence: dict[str, dict] = {}
    reused: dict[str, list[str]] = {}
    seconds: dict[str, dict[str, float]] = {}
    for index, name in enumerate(config.models, 1):
        log(f"model {index}/{len(config.models)}: {name}")
        plan = model_plan(name, config, out)
        if claims is not None and not any(claim in CLAIM_PARTS for claim in claims):
            continue  # only model-free claims: no section of this model is read
        walked = walk(name, plan.in_order() if claims is None else plan.needed(claims), model_opener(name, config))
        model_verdicts, tables = judge_model(name, config, plan.measurements(walked.read), claims)
        verdicts.extend(model_verdicts)
        evidence[name] = tables
        reused[name], seconds[name] = walked.reused, walked.seconds
    # last: they train small models, the slowest part on a busy machine
    regimes = regime_runs(config, out) if wanted("bigram_backcopy_regimes") else {}
    trained = boundary_lab(config, out) if wanted("cost_boundary_trained") else {}
    if claims is None:
        verdicts = [*judge_theory(theory, regimes), cost_boundary_verdict(**boundary, seed=config.seed),
                    cost_boundary_trained_verdict(trained.get("runs"), trained.get("reason", ""), config.seed),
                    *verdicts]  # fmt: skip
    else:
        free = [*judge_theory(theory, regimes),
                *([cost_boundary_verdict(**boundary, seed=config.seed)] if boundary is not None else []),
                *([cost_boundary_trained_verdict(trained.get("runs"), trained.get("reason", ""), config.seed)]
                  if wanted("cost_boundary_trained") else [])]  # fmt: skip
        verdicts = [verdict for verdict in free if verdict.claim in claims] + verdicts
    summary = {
        "config": config.to_dict(),
        "verdicts": [with_claim_text(v.to_dict()) for v in verdicts],
        "seconds": time.perf_counter() - started,  # measurements and judging; the reports follow
        "section_seconds": seconds,
        "reused": reused,
        "regimes": {k: v for k, v in regimes.items() if k != "cells"},
    }
    if claims is not None:  # the report's sections need every claim: the verdicts and the summary only
        from sinkscope.staging import staged_file_bytes

        verdicts_file = out / "claims-verdicts.json"
        staged_file_bytes(verdicts_file, json.dumps(summary["verdicts"], indent=2, ensure_ascii=False).encode())
        staged_file_bytes(out / "claims-summary.json", json.dumps(summary, indent=2, ensure_ascii=False,
                                                                  default=str).encode())  # fmt: skip
        log(f"done in {time.perf_counter() - started:.0f} s: {verdicts_file} ({', '.join(claims)} only)")
        return summary
    log("writing the report")
    extra = {"cost_regimes": boundary["geometry"], "cost_regimes_vocabulary": boundary["vocabulary"]}
    if "runs" in trained:
        extra["cost_boundary_trained"] = trained["runs"]
    write_reports(out, summary, evidence, theory, regimes, extra)
    log(f"done in {time.perf_counter() - started:.0f} s: {out / 'report.html'}")
    return summary
