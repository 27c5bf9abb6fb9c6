"""`sinkscope reproduce --claims NAME[,NAME]` on a tiny random Llama directory: only the sections the named claims
read are computed, at the config's full size (not `--quick`'s), and only their verdicts are written (to
claims-verdicts.json: a full run's verdicts.json and report beside them stay as they were); an unknown
name is one line listing the valid ones, before any work."""

import json

import pytest

from sinkscope.cli.main import main
from sinkscope.reproduction.claim_texts import CLAIMS
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import KEY_FILE
from sinkscope.reproduction.plan import CLAIM_PARTS, MODEL_FREE_CLAIMS, model_plan
from sinkscope.reproduction.run import reproduce

from .tiny_checkpoint import save_tiny_llama


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    return str(save_tiny_llama(tmp_path_factory.mktemp("tiny") / "llama"))


def computed(out):
    return sorted(path.parent.name for path in out.rglob(KEY_FILE))


def test_one_claim_runs_only_its_sections_at_full_size(tiny_model, tmp_path):
    """`sink_ablation` reads the first corpus's analysis (its head scores pick the heads), the zero and forced-BOS
    ablations, the sink-query ablation and its sensitivity passes; nothing else is computed (no evidence, switch,
    certificates, costs, weights, experiments or model-free section), and its verdict is judged on the full
    config's 16 windows (a `--quick` run has 2: too few)."""
    config = ReproduceConfig(models=(tiny_model,), corpora=("builtin:prose",), seq_len=16, ablation_fraction=0.25,
                             windows=8, sensitivity_draws=2, certificate_windows=4, regimes=False)  # fmt: skip
    out = tmp_path / "repro"
    summary = reproduce(config, out, ("sink_ablation",))
    assert computed(out) == ["ablate", "ablate-bos", "ablate-sensitivity", "analyze-builtin-prose", "sink-queries"]
    records = json.loads((out / "claims-verdicts.json").read_text())
    assert [r["claim"] for r in records] == ["sink_ablation"] == [v["claim"] for v in summary["verdicts"]]
    assert records[0]["evidence"]["n_windows"] == config.ablation_windows == 16
    assert not records[0]["reason"].startswith("too few")
    assert not (out / "report.html").exists() and not (out / "verdicts.json").exists()
    assert (out / "claims-summary.json").is_file()
    # A second claim on the same --out reuses the analysis and computes only what it adds.
    again = reproduce(config, out, ("sink_ablation", "dormant_heads"))
    assert again["section_seconds"][tiny_model] == {} and [v["claim"] for v in again["verdicts"]] == [
        "sink_ablation", "dormant_heads"]
    # The weight claims are judged together; one named, one judged (and the weights and certificates computed).
    weights = reproduce(config, out, ("weights_low_rank",))
    assert [v["claim"] for v in weights["verdicts"]] == ["weights_low_rank"]
    assert list(weights["section_seconds"][tiny_model]) == ["weight spectra",
                                                            "certificates of the middle layers (4 windows, 20 controls)"]


def test_every_claim_names_its_sections(tiny_model, tmp_path):
    """Each claim's plan is a part of the whole plan holding the first corpus's analysis; every claim is either a
    model claim (with its parts) or model-free; a model-free claim needs no model section."""
    config = ReproduceConfig(models=(tiny_model,), corpora=("builtin:prose",), seq_len=16)
    plan = model_plan(tiny_model, config, tmp_path)
    whole = [section.directory.name for section in plan.in_order()]
    assert set(CLAIM_PARTS) | set(MODEL_FREE_CLAIMS) == set(CLAIMS) and not set(CLAIM_PARTS) & set(MODEL_FREE_CLAIMS)
    union = set()
    for claim in CLAIM_PARTS:
        names = [section.directory.name for section in plan.needed((claim,))]
        assert names[0] == "analyze-builtin-prose" and names == [n for n in whole if n in names], claim
        union |= set(names)
    assert union == set(whole)  # every section is read by some claim
    assert [s.directory.name for s in plan.needed(("weights_low_rank",))] == ["analyze-builtin-prose", "weights",
                                                                               "certificates"]
    assert [s.directory.name for s in plan.needed(("gu_sink_rate",))] == [
        "analyze-builtin-prose", "analyze-builtin-random", "analyze-builtin-repeat", "evidence-builtin-prose",
        "evidence-builtin-random", "evidence-builtin-repeat"]  # fmt: skip
    assert plan.needed(None) == plan.in_order()


def test_an_unknown_claim_is_one_line_before_any_work(tmp_path, capsys):
    out = tmp_path / "repro"
    assert main(["reproduce", "--models", "smollm2-135m", "--claims", "sink_ablation,sinks", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--claims sinks: no such claim" in err
    assert all(name in err for name in CLAIMS) and not out.exists()


def test_help_lists_the_claims(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "--claims NAME[,NAME]" in text and all(name in text for name in CLAIMS)
