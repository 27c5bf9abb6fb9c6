"""What a reproduce section key holds (`reproduction.files`): a config dataclass is stamped with every field; a stored
stamp matches when every value it records equals today's, and a field it lacks is today at its default. So a new
option with a default that keeps the old behaviour leaves every stored section fresh, while a changed value, a
non-default new option or a changed default makes it stale."""

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import KEY_FILE, is_fresh, write_key
from sinkscope.reproduction.plan import model_plan


@dataclass(frozen=True)
class Before:  # a config as it was when a section was stamped
    epsilon: float = 0.3
    windows: tuple[int, ...] = (1, 2)


@dataclass(frozen=True)
class After:  # the same config after a new option was added, defaulting to the old behaviour
    epsilon: float = 0.3
    windows: tuple[int, ...] = (1, 2)
    precision: str = "exact"


def _stamp(directory: Path, stamp: dict) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / KEY_FILE).write_text(json.dumps(stamp))
    return directory


def _old_key(config) -> dict:  # how keys were stamped before: every field spelled out (`asdict`)
    return {"section": "s", "config": asdict(config), "nested": {"config": asdict(config)}}


def test_a_new_default_field_matches_a_stamp_written_before_it_existed(tmp_path):
    directory = _stamp(tmp_path / "old", _old_key(Before()))
    assert is_fresh(directory, {"section": "s", "config": After(), "nested": {"config": After()}})
    write_key(tmp_path / "old", {"section": "s", "config": After(), "nested": {"config": After()}})
    every_field = {"epsilon": 0.3, "windows": [1, 2], "precision": "exact"}  # defaults spelled out in the stamp
    assert json.loads((directory / KEY_FILE).read_text())["identity"] == {
        "section": "s",
        "config": every_field,
        "nested": {"config": every_field},
    }


@dataclass(frozen=True)
class DefaultChanged:  # the same config after the new option's default changed
    epsilon: float = 0.3
    windows: tuple[int, ...] = (1, 2)
    precision: str = "model"


def test_a_changed_default_makes_a_stamp_that_recorded_the_old_default_stale(tmp_path):
    """A section computed at `precision="exact"` (then the default) must not be reused once the default is
    `"model"`: the stamp records the value, not "the default"."""
    (tmp_path / "new").mkdir()
    write_key(tmp_path / "new", {"section": "s", "config": After()})
    assert not is_fresh(tmp_path / "new", {"section": "s", "config": DefaultChanged()})
    assert is_fresh(tmp_path / "new", {"section": "s", "config": DefaultChanged(precision="exact")})


def test_a_stamp_with_a_field_the_config_no_longer_has_is_stale(tmp_path):
    directory = _stamp(tmp_path / "old", {"section": "s", "config": asdict(After())})
    assert not is_fresh(directory, {"section": "s", "config": Before()})


def test_a_non_default_value_of_the_new_field_makes_the_old_stamp_stale(tmp_path):
    directory = _stamp(tmp_path / "old", _old_key(Before()))
    assert not is_fresh(directory, {"section": "s", "config": After(precision="model"),
                                    "nested": {"config": After()}})  # fmt: skip
    assert not is_fresh(
        directory, {"section": "s", "config": After(), "nested": {"config": After(precision="model")}}
    )


def test_a_changed_value_makes_the_stamp_stale_whether_it_was_stamped_old_or_new(tmp_path):
    old = _stamp(tmp_path / "old", _old_key(Before(epsilon=0.2)))
    assert not is_fresh(old, {"section": "s", "config": After(), "nested": {"config": After()}})
    assert is_fresh(
        old, {"section": "s", "config": After(epsilon=0.2), "nested": {"config": After(epsilon=0.2)}}
    )
    (tmp_path / "new").mkdir()
    write_key(tmp_path / "new", {"section": "s", "config": After(windows=(3,))})
    assert not is_fresh(tmp_path / "new", {"section": "s", "config": After()})
    assert not is_fresh(tmp_path / "new", {"section": "s", "config": After(windows=(4,))})
    assert is_fresh(tmp_path / "new", {"section": "s", "config": After(windows=(3,))})


def test_the_stored_analysis_stamps_of_before_attention_precision_match_the_plan(tmp_path):
    """Stamps written with every `AnalyzeConfig` field of an earlier version (no head-class thresholds, no
    `attention_precision`) match the plan's keys when their inputs are named by content; the same stamps naming the
    model and corpus by their arguments only (as stamps were written before keys held content) are stale."""
    config = ReproduceConfig.preset(False, models=("m",), ablation_windows=8, random_draws=20)
    plan = model_plan("m", config, tmp_path)
    first, bos = plan.analyses["builtin:prose"], plan.ablations[1]
    inputs = {"model": first.key["model"], "corpus": first.key["corpus"]}  # {"hub": "m"}, {"builtin": …, "python": …}
    analysis = {"delta": 0.1, "epsilon": 0.3, "epsilons": [], "geometry_cap": 256, "seed": 0, "tau": 0.1}
    named = {"config": analysis, "corpus": "builtin:prose", "dtype": "float32", "model": "m", "section": "analyze",
             "seq_len": 64, "smoothing": True, "smoothing_layer_stride": 1, "windows": 32}  # fmt: skip
    scores = named | inputs
    assert not is_fresh(_stamp(first.directory, named), first.key)
    assert is_fresh(_stamp(first.directory, scores), first.key)
    ablate = {"config": {"fractions": [0.1], "from_run": "analysis", "mode": "bos", "n_random": 8,
                         "score_windows": 16, "seed": 0, "selections": ["highest-hard-sink"]},
              "dtype": "float32", "scores": scores, "section": "ablate", "seq_len": 64, "windows": 8} | inputs  # fmt: skip
    assert is_fresh(_stamp(bos.directory, ablate), bos.key)
    assert not is_fresh(_stamp(bos.directory, ablate | {"scores": scores | {"config": analysis | {"tau": 0.2}}}),
                        bos.key)  # fmt: skip
    assert not is_fresh(_stamp(bos.directory, ablate | {"model": "m"}), bos.key)
