"""`reproduction.plan`: a walk computes each section once and reuses it on the next walk, opens the model only when
a section must be computed, and a section's key carries the keys of the sections it reads. Counted on sections
that write a number, and on the plan's keys; no model is loaded."""

import json

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import swapped_directory
from sinkscope.reproduction.plan import model_plan, walk
from sinkscope.reproduction.sections import Section


def counting_sections(root, values: dict[str, int], computed: list) -> list[Section]:
    """One section per name that writes its value; `computed` records (name, model) per compute call."""

    def section(name: str, value: int) -> Section:
        def compute(lm, target) -> None:
            computed.append((name, lm))
            with swapped_directory(target) as staging:
                (staging / "value.json").write_text(json.dumps(value))

        def load(directory):
            return json.loads((directory / "value.json").read_text())

        return Section(f"section {name}", root / name, {"section": name, "value": value}, compute, load)

    return [section(name, value) for name, value in values.items()]


def test_a_walk_computes_each_section_once_and_the_next_walk_reuses_them_without_the_model(tmp_path):
    computed, opened = [], []

    def open_model():
        opened.append(object())
        return opened[-1]

    values = {"a": 1, "b": 2, "c": 3}
    sections = counting_sections(tmp_path, values, computed)
    first = walk("m", sections, open_model)
    assert len(opened) == 1  # one model for three computed sections
    assert computed == [(name, opened[0]) for name in values]
    assert list(first.seconds) == ["section a", "section b", "section c"] and first.reused == []
    assert {path.name: value for path, value in first.read.items()} == values

    second = walk("m", counting_sections(tmp_path, values, computed), open_model)
    assert len(computed) == 3 and len(opened) == 1  # nothing computed again, the model never opened
    assert second.reused == ["section a", "section b", "section c"] and second.seconds == {}
    assert {path.name: value for path, value in second.read.items()} == values

    third = walk("m", counting_sections(tmp_path, {**values, "b": 20}, computed), open_model)
    assert [name for name, _ in computed[3:]] == ["b"] and len(opened) == 2  # only the stale section
    assert third.reused == ["section a", "section c"] and list(third.seconds) == ["section b"]
    assert {path.name: value for path, value in third.read.items()} == {**values, "b": 20}


def test_the_plan_orders_the_sections_and_the_ablations_carry_the_first_analysis_key(tmp_path):
    config = ReproduceConfig.preset(True, models=("tiny",), corpora=("builtin:prose", "builtin:code"))
    plan = model_plan("tiny", config, tmp_path)
    names = [section.directory.name for section in plan.in_order()]
    assert names == ["analyze-builtin-prose", "analyze-builtin-code", "analyze-builtin-random",
                     "analyze-builtin-repeat", "ablate", "ablate-bos", "sink-queries", "switch-builtin-prose",
                     "switch-builtin-code", "cost-layers", "weights", "evidence-builtin-prose",
                     "evidence-builtin-code", "evidence-builtin-random", "evidence-builtin-repeat",
                     "certificates", "evict", "dense", "prevalence", "switch-assumptions", "kv-plan"]  # fmt: skip
    assert len({section.directory for section in plan.in_order()}) == len(names)
    first = plan.analyses["builtin:prose"]
    for section in (*plan.ablations, plan.sink_queries, plan.experiments["kv_plan"]):
        assert section.key["scores"] == first.key
    assert plan.ablations[0].key["config"].from_run == "analysis"  # the path is not part of the key

    more = model_plan("tiny", ReproduceConfig.preset(True, **{**_overrides(config), "windows": 9}), tmp_path)
    assert more.ablations[0].key["scores"]["windows"] == 9 != first.key["windows"]
    assert more.weights.key == plan.weights.key  # a section that reads no analysis keeps its key


def _overrides(config):
    return dict(models=config.models, corpora=config.corpora)


def test_the_full_plan_ends_with_the_ablations_sensitivity_passes_and_quick_has_none(tmp_path):
    config = ReproduceConfig.preset(False, models=("tiny",), ablation_windows=8, random_draws=20)
    plan = model_plan("tiny", config, tmp_path)
    last = plan.in_order()[-1]
    assert last is plan.ablation_sensitivity and last.directory.name == "ablate-sensitivity"
    assert last.key["draws"] == config.sensitivity_draws == 5 and last.key["scales"] == [0.5, 2.0]
    assert last.key["scores"] == plan.analyses["builtin:prose"].key and last.key["fraction"] == 0.1
    quick = model_plan("tiny", ReproduceConfig.preset(True, models=("tiny",)), tmp_path)
    assert quick.ablation_sensitivity is None
    assert "ablate-sensitivity" not in [section.directory.name for section in quick.in_order()]
