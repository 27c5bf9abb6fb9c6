"""The stored outputs of the default `sinkscope reproduce --models M` on both embedded models
(`tests/data/reproduce-default/M/{verdicts,summary}.json`, written by the command named in that folder's README)
and the Gemma-3 run kept for the whole-chain test (`tests/data/reproduce-gemma3-270m/published/verdicts.json`):
each was run with the default settings, and no verdict word stands beside an interval its own rule did not read
or an interval wholly on the wrong side of the claim's `partly` cut.

The cut of each claim is written out here by hand from docs/reproduction.md's claim table (the effect a word's rule
reads, the threshold that is its `partly` cut and the side that passes), not read from the code, so a claim whose
reported interval drifts from its rule fails here."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import pytest

from sinkscope.reproduction.config import ReproduceConfig

DATA = Path(__file__).resolve().parents[1] / "data"
DEFAULT = DATA / "reproduce-default"
MODELS = ("smollm2-135m", "gemma3-270m")
STORED = [DEFAULT / model / "verdicts.json" for model in MODELS] + [
    DATA / "reproduce-gemma3-270m" / "published" / "verdicts.json"
]

# claim → {word: effect its rule reads}, the partly cut's threshold (a number: a fixed cut), the side that passes
# (">=": higher passes, "<=" / "<": lower passes, ">": strictly higher). From docs/reproduction.md's claim table.
CUTS = {
    "cost_boundary": ({"supported": "agreement", "partly": "agreement"}, "partly_min", ">="),
    "cost_boundary_trained": ({"supported": "diagonal_side_match", "partly": "diagonal_side_match"}, "partly_min", ">="),
    "geometry": ({"supported": "middle_layers_holding", "partly": "middle_layers_holding_best"}, "partly_layer_frac",
                 ">="),
    "oversmoothing": ({"supported": "frac_observed_rise", "partly": "frac_observed_rise"}, "partly_frac", ">="),
    "switch": ({"supported": ("switch_implies_sink", "sink_implies_switch"),
                "partly": ("switch_implies_sink", "sink_implies_switch")}, "partly_min", ">="),
    "switch_routes": ({"supported": "non_bos_route_frac", "partly": "non_bos_route_frac"}, "partly_tol", "<="),
    "value_drain": ({"supported": "rho_all_groups", "partly": "rho_all_groups"}, 0.0, "<"),
    "representability": ({"supported": "layers_beyond_control", "partly": "layers_ahead_of_control"},
                         "partly_layer_frac", ">="),
    "sink_ablation": ({"supported": "ratio", "partly": "ratio"}, "partly_ratio", "<"),
    "dormant_heads": ({"supported": "ratio", "partly": "ratio"}, "partly_ratio", "<"),
    "cost_real_layers": ({"supported": "sink_cheaper_frac", "partly": "sink_cheaper_frac"}, "partly_frac", ">="),
    "weights_low_rank": ({"supported": "effect_within_layers", "partly": "effect_within_layers"}, "min_effect", ">="),
    "weights_bos_alignment": ({"supported": "effect_within_layers", "partly": "effect_within_layers"}, "min_effect",
                              ">="),
    "gu_sink_rate": ({"supported": "min_rate", "partly": "sink_rate_natural"}, "present_rate", ">="),
    "sink_in_use": ({"supported": "recovered_share", "partly": "recovered_share"}, "partly_min", ">="),
    "dense_causal": ({"supported": "head_share_smoothing", "partly": "best_share_smoothing"}, "partly_frac", ">="),
    "prevalence": ({"supported": "sink_minus_diagonal", "partly": "sink_minus_diagonal"}, 0.0, ">"),
    "switch_assumptions": ({"supported": "independent_share", "partly": "independent_share"}, "partly_min", ">="),
    "kv_plan_measures": ({"supported": "saved_share", "partly": "saved_share"}, "partly_min", ">="),
}
WITHOUT_INTERVAL = {"cost_closed_forms", "bigram_backcopy_regimes", "mlp_like"}  # exact tests; descriptive


def records(path: Path) -> list[dict]:
    return json.loads(path.read_text())


def passes(value: float, cut: float, side: str) -> bool:
    return {">=": value >= cut, ">": value > cut, "<=": value <= cut, "<": value < cut}[side]


def wrong_side(record: dict) -> str | None:
    """Why `record`'s word is not earned by its shown interval, or None."""
    claim, word, interval = record["claim"], record["verdict"], record.get("interval") or {}
    if word not in ("supported", "partly"):
        return None
    if claim in WITHOUT_INTERVAL:
        return None if not interval.get("low") else f"{claim}: an exact or descriptive claim with an interval"
    effects, cut, side = CUTS[claim]
    expected = effects[word]
    if interval.get("effect") not in (expected if isinstance(expected, tuple) else (expected,)):
        return f"{claim} ({word}): interval of {interval.get('effect')}, its rule reads {expected}"
    cut = record["thresholds"][cut] if isinstance(cut, str) else cut
    # the end of the interval nearest to passing: the whole interval fails when even that end fails
    best = interval["high"] if side.startswith(">") else interval["low"]
    if best is None or not passes(best, cut, side):
        return f"{claim} ({word}): interval [{interval['low']}, {interval['high']}] wholly fails {side} {cut}"
    return None


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_no_word_beside_an_interval_its_rule_did_not_read_or_that_fails_its_cut(path):
    faults = [fault for record in records(path) if (fault := wrong_side(record))]
    assert not faults, "\n".join(faults)


@pytest.mark.parametrize("path", STORED, ids=lambda p: f"{p.parent.parent.name}/{p.parent.name}")
def test_every_claim_of_the_stored_runs_is_in_the_table_of_cuts(path):
    claims = {record["claim"] for record in records(path)}
    assert claims <= set(CUTS) | WITHOUT_INTERVAL, claims - set(CUTS) - WITHOUT_INTERVAL


def test_the_checker_fails_on_the_fault_the_issue_found():
    """Geometry read `partly` beside `middle_layers_holding` 0 [0, 0] (its partly cut 0.2): both the wrong effect
    and, with the right effect but the same numbers, the interval wholly below the cut are named."""
    thresholds = {"partly_layer_frac": 0.2}
    wrong_effect = {"claim": "geometry", "verdict": "partly", "thresholds": thresholds,
                    "interval": {"effect": "middle_layers_holding", "estimate": 0.0, "low": 0.0, "high": 0.0}}
    below = {**wrong_effect, "interval": {**wrong_effect["interval"], "effect": "middle_layers_holding_best"}}
    above = {**below, "interval": {**below["interval"], "high": 0.25}}
    assert "its rule reads" in wrong_side(wrong_effect)
    assert "wholly fails" in wrong_side(below)
    assert wrong_side(above) is None
    lower = {"claim": "dormant_heads", "verdict": "partly", "thresholds": {"partly_ratio": 1.0},
             "interval": {"effect": "ratio", "estimate": 1.2, "low": 1.0, "high": 1.5}}
    assert "wholly fails" in wrong_side(lower)  # ratio < 1 passes; 1.0 itself does not
    assert wrong_side({**lower, "interval": {**lower["interval"], "low": 0.99}}) is None


@pytest.mark.parametrize("model", MODELS)
def test_the_stored_runs_are_the_default_command(model):
    """The stored summary's config is `ReproduceConfig()`'s, field by field, for the one model named (the output
    folder and the device aside); every claim of the default command was judged."""
    summary = json.loads((DEFAULT / model / "summary.json").read_text())
    default = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(ReproduceConfig()).items()}
    stored = summary["config"]
    differing = {k: (stored.get(k), v) for k, v in default.items() if k not in ("models",) and stored.get(k) != v}
    assert not differing, differing
    assert list(stored["models"]) == [model]
    verdicts = records(DEFAULT / model / "verdicts.json")
    assert len(verdicts) == 28
