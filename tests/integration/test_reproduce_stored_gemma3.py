"""Judging and reporting the stored measurements of a real model gives back, byte for byte, what `reproduce`
published from them.

`tests/data/reproduce-gemma3-270m/` holds what `sinkscope reproduce --models gemma3-270m --ablation-windows 8
--random-draws 20 --regimes-from runs/regimes` wrote for the embedded Gemma-3-270M (commit f601541; the
verdicts docs/reproduction.md listed before the default command's table replaced them; `kv-plan/` added later by `sinkscope reproduce --models gemma3-270m --claims
kv_plan_measures --ablation-windows 8 --random-draws 20`): the section directories `gemma3-270m/*` (each with its
`reproduce-key.json`; the sections' own figures and HTML pages left out), the model-free inputs `theory/` (cost
closed forms, the predicted cost boundary, the boundary lab's runs), and in `published/` what the command published
from them: `verdicts.json` (28 verdicts), `tables/*.csv`, `figures/*.png`, `report.md` and `summary.json`.

The numbers themselves are checked against independent computations elsewhere (test_reproduce_claims,
test_reproduce_judge, test_gaps_verdicts, test_mutants_d51_claims, test_reference_columns); this test pins the whole
chain from stored sections to published files on real data, where every claim is measured and most are decided (a
tiny random model leaves them "not measurable"): a change to any claim's statistic, threshold, interval, record
key, reason, claim text, table column, figure or report line shows up as a difference from the published output.
A deliberate change reruns that command and replaces these files (docs/testing.md, "Stored real-model output").

No model is loaded (every section's key matches, so none is recomputed); about 15 s on one thread.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import matplotlib
import pandas as pd
import pytest

from sinkscope.reproduction.claim_texts import with_claim_text
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.experiment_claims import cost_boundary_trained_verdict, cost_boundary_verdict
from sinkscope.reproduction.judge import judge_model, judge_theory
from sinkscope.reproduction.plan import model_plan, walk
from sinkscope.reproduction.report import write_reports

DATA = Path(__file__).resolve().parent.parent / "data" / "reproduce-gemma3-270m"
PUBLISHED = DATA / "published"
MODEL = "gemma3-270m"


def published_summary() -> dict:
    return json.loads((PUBLISHED / "summary.json").read_text())


def stored_config() -> ReproduceConfig:
    """The run's config, without its regime map's directory (`regimes_from` named a folder of that machine; no
    section read here holds it in its key: the regime runs are read back from the published summary)."""
    fields = published_summary()["config"] | {"regimes_from": None}
    return ReproduceConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in fields.items()})


@pytest.fixture(scope="module")
def republished(tmp_path_factory) -> tuple[Path, dict[str, pd.DataFrame]]:
    """Every verdict judged again from the stored inputs, in `reproduce`'s order, and the reports written from them
    by `write_reports` into a fresh directory (the published summary's timings and reuse lists kept)."""
    config = stored_config()
    plan = model_plan(MODEL, config, DATA)

    def no_model():
        raise AssertionError("a stored section's key no longer matches: the walk would recompute it")

    walked = walk(MODEL, plan.in_order(), no_model)
    assert not walked.seconds  # every section reused
    model_verdicts, tables = judge_model(MODEL, config, plan.measurements(walked.read))
    theory = pd.read_parquet(DATA / "theory" / "cost_theory.parquet")
    boundary = {
        name: pd.read_parquet(DATA / "theory" / f"regimes_{name}.parquet")
        for name in ("geometry", "vocabulary")
    }
    runs = pd.read_parquet(DATA / "theory" / "boundary_runs.parquet")
    summary = published_summary()
    regimes = summary["regimes"] | {"cells": pd.read_csv(PUBLISHED / "tables" / "regime_cells.csv")}
    verdicts = [*judge_theory(theory, regimes), cost_boundary_verdict(**boundary, seed=config.seed),
                cost_boundary_trained_verdict(runs, "", config.seed), *model_verdicts]  # fmt: skip
    summary["verdicts"] = [with_claim_text(v.to_dict()) for v in verdicts]
    out = tmp_path_factory.mktemp("republished")
    extra = {"cost_regimes": boundary["geometry"], "cost_regimes_vocabulary": boundary["vocabulary"],
             "cost_boundary_trained": runs}  # fmt: skip
    write_reports(out, summary, {MODEL: tables}, theory, regimes, extra)
    return out, tables


def same(a, b, path: str) -> list[str]:
    """Differences between two JSON values: structure and text exactly, numbers to 1e-9 relative."""
    if isinstance(a, dict) and isinstance(b, dict):
        if list(a) != list(b):
            return [f"{path}: keys {list(a)}, published {list(b)}"]
        return [d for k in a for d in same(a[k], b[k], f"{path}.{k}")]
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items, published {len(b)}"]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in same(x, y, f"{path}[{i}]")]
    if isinstance(a, float) and isinstance(b, float):
        if (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12):
            return []
    return [] if a == b and type(a) is type(b) else [f"{path}: {a!r}, published {b!r}"]


def verdict_differences(republished: Path) -> list[str]:
    """Each of the 28 verdicts - claim, model, corpus, verdict word, reason, effect, interval, thresholds,
    sensitivity, every record entry, the claim's words, test and control - against the published `verdicts.json`,
    in the published order."""
    now = json.loads((republished / "verdicts.json").read_text())
    published = json.loads((PUBLISHED / "verdicts.json").read_text())
    assert len(published) == 28
    assert {v["verdict"] for v in published} >= {
        "supported",
        "partly",
        "not supported",
        "not measurable here",
    }
    return same(now, published, "verdicts")


def table_differences(republished: Path) -> list[str]:
    """The same table files, each with the same columns in the same order, the same rows, numbers to 1e-9."""
    names = sorted(p.name for p in (PUBLISHED / "tables").glob("*.csv"))
    if sorted(p.name for p in (republished / "tables").glob("*.csv")) != names:
        return [
            f"tables: {sorted(p.name for p in (republished / 'tables').glob('*.csv'))}, published {names}"
        ]
    out = []
    for name in names:
        now, published = pd.read_csv(republished / "tables" / name), pd.read_csv(PUBLISHED / "tables" / name)
        try:
            pd.testing.assert_frame_equal(now, published, check_exact=False, rtol=1e-9, atol=1e-12, obj=name)
        except AssertionError as error:
            out.append(f"tables/{name}: {error}")
    return out


def report_differences(republished: Path) -> list[str]:
    """report.md, line for line (its verdict table, every claim's section, interval texts, table and figure names)."""
    now = (republished / "report.md").read_text().splitlines()
    published = (PUBLISHED / "report.md").read_text().splitlines()
    out = [
        f"report.md line {i + 1}: {a!r}, published {b!r}"
        for i, (a, b) in enumerate(zip(now, published))
        if a != b
    ]
    return out + (
        [f"report.md: {len(now)} lines, published {len(published)}"] if len(now) != len(published) else []
    )


def figure_differences(republished: Path) -> list[str]:
    """The same figures, pixel for pixel (PNG bytes), when matplotlib is the version that drew the published ones
    (another version may place text a pixel apart: then only the set of figure names is compared)."""
    names = sorted(p.name for p in (PUBLISHED / "figures").glob("*.png"))
    if sorted(p.name for p in (republished / "figures").glob("*.png")) != names:
        return [
            f"figures: {sorted(p.name for p in (republished / 'figures').glob('*.png'))}, published {names}"
        ]
    if matplotlib.__version__ != (PUBLISHED / "matplotlib-version.txt").read_text().strip():
        return []
    return [f"figures/{n} differs from the published one" for n in names
            if (republished / "figures" / n).read_bytes() != (PUBLISHED / "figures" / n).read_bytes()]  # fmt: skip


def index_differences(tables: dict[str, pd.DataFrame]) -> list[str]:
    """Each evidence table `judge_model` returns is numbered 0..n-1 (`reproduction.judge`'s tables are concatenated
    over corpora with a fresh index: a caller of the Python API may select rows by position or by label alike)."""
    return [f"evidence table {name}: index {list(t.index[:6])}..., not 0..{len(t) - 1}"
            for name, t in tables.items() if not t.index.equals(pd.RangeIndex(len(t)))]  # fmt: skip


def test_the_published_output_comes_back(republished):
    """Verdicts, tables, report and figures, all in one test: mutmut maps a test to the functions it calls, and a
    module-scoped fixture's calls count only for the first test that uses it, so four tests would let a mutant in
    (say) a figure function run only the verdict test."""
    out, tables = republished
    differences = [*verdict_differences(out), *table_differences(out), *report_differences(out),
                   *figure_differences(out), *index_differences(tables)]  # fmt: skip
    assert not differences, "\n".join(differences[:20])
