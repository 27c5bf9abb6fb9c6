"""Every stored section of a reproduction is computed again exactly when a field it reads changed, and reused when
nothing did: one case per `ReproduceConfig` field and per input file's content, over every section of a default
plan (`plan.model_plan`) and the four model-free sections (`cost_theory`, `cost_regimes_theory`, `regime_runs`,
`boundary_lab`).

Each case goes through the real reuse path: the base config's keys are stamped into the section folders
(`files.write_key`), the plan is built again with one field changed (or one file rewritten in place, size and
modification time kept), and `files.is_fresh` says which folders are stale. The expected answer is `READS`, written
by hand from each section's compute function (which config fields and inputs it passes on), not from its key; a
field added to `ReproduceConfig` without a `CHANGES` entry, or a section added to the plan without a `READS` row,
fails here.

The same per field for a train-bb grid run (`synthetic.experiments.trained_with`, which `--grid FILE` and the regime
map ask: every field of its task, model and training configs, and the content of its bigram text file) and a sweep
cell (`pipelines.sweep.finished_cell`: every `SweepConfig` field).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from sinkscope.reproduction import cost_section, experiment_sections, files, regime_section
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.plan import model_plan
from sinkscope.reproduction.sections import Section

# A model folder and a corpus file in the test's folder; the corpus file is the first corpus.
MODEL, CORPUS = "model", "c.txt"
BASE = {"models": (MODEL,), "corpora": (CORPUS, "builtin:code")}  # the full (not --quick) settings otherwise

# The value each field takes in its case: another valid value that changes what a section reading it computes.
CHANGES: dict[str, object] = {
    "models": (MODEL, "org/other"), "corpora": ("builtin:code", CORPUS),  # the same corpora, another one first
    "seq_len": 48, "windows": 24, "anchor_windows": 16, "geometry_cap": 128, "ablation_windows": 8,
    "ablation_fraction": 0.2, "random_draws": 10, "sensitivity_draws": 3, "bos_draws": 4, "certificate_windows": 12,
    "certificate_controls": 10, "cost_contexts": (8, 16), "cost_windows": 4, "cost_layer_stride": 3,
    "smoothing_layer_stride": 2, "cost_exact_Ts": (2, 4), "regimes": False, "regimes_from": "map",
    "switch_tau": 0.2, "switch_drain_max": 0.2, "quick": True, "seed": 1, "device": "cuda", "dtype": "bfloat16",
}  # fmt: skip

# What each section's compute reads. `device` is in no row: it decides where a section runs, not what it measures
# (as in `sweep`'s and `--resume`'s settings). A main corpus's analysis runs `windows` windows with the
# oversmoothing columns of every `smoothing_layer_stride`-th layer; an anchor's `anchor_windows` without them.
MAIN = {"seq_len", "windows", "geometry_cap", "seed", "smoothing_layer_stride", "dtype"}
ANCHOR = {"seq_len", "anchor_windows", "geometry_cap", "seed", "dtype"}
# The sections ranking heads read the stored analysis of the first corpus (`corpora`), so what it read too.
SCORES = MAIN | {"corpora"}
FIRST = {"corpora", "seed", "dtype"}  # a section on windows of the first corpus
READS: dict[str, set[str]] = {
    "analyze-c.txt": MAIN, "analyze-builtin-code": MAIN,
    **{f"analyze-builtin-{name}": ANCHOR for name in ("prose", "random", "repeat")},
    # zero mode: `random_draws` random sets and as many layer-matched ones; bos mode: `bos_draws` random sets
    "ablate": SCORES | {"ablation_windows", "ablation_fraction", "random_draws"},
    "ablate-bos": SCORES | {"ablation_windows", "ablation_fraction", "bos_draws"},
    "sink-queries": SCORES | {"ablation_windows", "ablation_fraction", "random_draws"},
    "ablate-sensitivity": SCORES | {"ablation_windows", "ablation_fraction", "sensitivity_draws", "quick"},  # absent
    **{f"switch-{name}": {"seq_len", "windows", "seed", "switch_tau", "dtype"} for name in ("c.txt", "builtin-code")},
    "cost-layers": FIRST | {"cost_contexts", "cost_windows", "cost_layer_stride"},  # windows of T + 1 tokens
    "weights": {"dtype"},
    # main corpora: one pass per δ scale (δ alone under --quick); anchors: δ alone
    **{f"evidence-{name}": {"seq_len", "windows", "seed", "quick", "dtype"} for name in ("c.txt", "builtin-code")},
    **{f"evidence-builtin-{name}": {"seq_len", "anchor_windows", "seed", "dtype"} for name in ("prose", "random",
                                                                                              "repeat")},
    "certificates": FIRST | {"seq_len", "certificate_windows", "certificate_controls", "smoothing_layer_stride"},
    "evict": FIRST | {"seq_len", "quick", "ablation_windows"},  # T = 2 × seq_len (--quick: 1 ×)
    "dense": FIRST | {"seq_len", "ablation_windows", "smoothing_layer_stride"},
    "prevalence": FIRST | {"seq_len", "windows", "quick"},  # --quick: ablation_windows instead of windows
    "switch-assumptions": FIRST | {"seq_len", "windows", "quick", "switch_tau"},
    "kv-plan": SCORES | {"quick", "ablation_windows", "random_draws"},  # T = max(2 × seq_len, 54), --quick: 1 ×
}  # fmt: skip
# Every section reads the model; these read the corpus file (the first corpus) too.
READS_CORPUS = {name for name, fields in READS.items() if "corpora" in fields} | {
    "analyze-c.txt", "switch-c.txt", "evidence-c.txt"}  # fmt: skip
# The model-free sections (once per reproduction) and the fields their stored results depend on; `regimes` off or
# `regimes_from` set skip the stored regime map altogether (not trained, not read).
MODEL_FREE: dict[str, dict[str, str]] = {
    "cost-theory": {"cost_exact_Ts": "stale"}, "cost-regimes": {"quick": "stale"},  # --quick: a one-cell grid
    "regimes": {"regimes": "skipped", "regimes_from": "skipped"}, "regimes-boundary": {},
}  # fmt: skip


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """The test's folder, holding a model folder (its files' bytes only: no model is loaded), a corpus file and a
    regime map (`regimes_from`), with its own digest cache."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SINKSCOPE_CACHE", str(tmp_path / "cache"))
    (tmp_path / MODEL).mkdir()
    for name, text in {"config.json": '{"layers": 2}', "tokenizer.json": '{"w1": 1}', "model.safetensors": "weights-0",
                       "tokenizer_config.json": '{"bos": 0}', "special_tokens_map.json": '{"bos": "w0"}',
                       "README.md": "model card 1"}.items():  # fmt: skip
        (tmp_path / MODEL / name).write_text(text)
    (tmp_path / CORPUS).write_text("w1 w2 w3 w4\n\nw5 w6 w7 w8\n")
    (tmp_path / "map").mkdir()
    row = {"variant": "softmax", "weight_decay": 0.0, "init": "small", "bos": True, "bos_mass": 0.9,
           "diag_mass": 0.1, "pattern": "sink", "agreement": "agree"}  # fmt: skip
    pd.DataFrame([row]).to_parquet(tmp_path / "map" / "regime_cells.parquet")
    return tmp_path


def config(**changes) -> ReproduceConfig:
    return dataclasses.replace(ReproduceConfig(**BASE), **changes)


def sections(c: ReproduceConfig, out: Path) -> dict[str, Section]:
    """The plan's sections of `c` by folder name."""
    return {section.directory.name: section for section in model_plan(MODEL, c, out).in_order()}


def stamp_base(out: Path, base: ReproduceConfig | None = None) -> None:
    """Stamp every section of the base plan as computed with its key (empty folders: no stored files)."""
    for section in model_plan(MODEL, base or config(), out).in_order():
        section.directory.mkdir(parents=True)
        files.write_key(section.directory, section.key)


def stale_sections(c: ReproduceConfig, out: Path, base: ReproduceConfig | None = None) -> set[str]:
    """The sections a walk with `c` would compute: stale by `files.is_fresh` (a new one holds no stamp), with the
    base plan's sections gone from this one (the sensitivity step under --quick)."""
    now, before = sections(c, out), sections(base or config(), out)
    stale = {name for name, section in now.items() if not files.is_fresh(section.directory, section.key)}
    return stale | (set(before) - set(now))


def test_the_table_names_every_section_of_the_plan_and_every_field_of_the_config(here):
    assert set(sections(config(), here / "out")) == set(READS)
    assert [f.name for f in dataclasses.fields(ReproduceConfig)] == list(CHANGES)  # a new field: a new case
    assert all(getattr(config(), name) != value for name, value in CHANGES.items())


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ReproduceConfig)] + ["nothing"])
def test_a_section_is_stale_exactly_when_a_config_field_it_reads_changed(here, field):
    out = here / "out"
    stamp_base(out)
    changed = {} if field == "nothing" else {field: CHANGES[field]}
    expected = {name for name, fields in READS.items() if field in fields}
    assert stale_sections(config(**changed), out) == expected


# Under --quick (a plan without the sensitivity step, which turning --quick off adds) the head classes and the
# switch assumptions run on the ablation windows instead of `windows`.
QUICK_READS = {name: {"ablation_windows" if field == "windows" else field for field in fields}
               if name in ("prevalence", "switch-assumptions") else fields
               for name, fields in READS.items()} | {"ablate-sensitivity": {"quick"}}  # fmt: skip


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ReproduceConfig)] + ["nothing"])
def test_under_quick_a_section_is_stale_exactly_when_a_config_field_it_reads_changed(here, field):
    out, base = here / "out", ReproduceConfig.preset(True, **BASE)
    assert set(sections(base, out)) == set(QUICK_READS) - {"ablate-sensitivity"}
    stamp_base(out, base)
    changed = {} if field == "nothing" else {field: False if field == "quick" else CHANGES[field]}
    assert all(getattr(base, name) != value for name, value in changed.items())
    expected = {name for name, fields in QUICK_READS.items() if field in fields}
    assert stale_sections(dataclasses.replace(base, **changed), out, base) == expected


def rewrite_in_place(path: Path, change: Callable[[bytes], bytes]) -> None:
    """`path` rewritten with `change(bytes)` of the same size, its modification time put back: only the content
    (and the change time, which no program sets back) differs."""
    before = path.stat()
    time.sleep(0.02)  # past the file system's clock tick, so the change time differs from the one hashed
    path.write_bytes(change(path.read_bytes()))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns


def flip_digit(data: bytes) -> bytes:
    """The first digit of `data` replaced by the next one (same size)."""
    index = next(i for i, b in enumerate(data) if chr(b).isdigit())
    return data[:index] + str((int(chr(data[index])) + 1) % 10).encode() + data[index + 1 :]


# Each file of the model folder that decides its numbers is read by every section; the model card by none.
READS_FILE = {"model.safetensors": set(READS), "config.json": set(READS), "tokenizer.json": set(READS),
              "tokenizer_config.json": set(READS), "special_tokens_map.json": set(READS), "README.md": set(),
              CORPUS: READS_CORPUS}  # fmt: skip


@pytest.mark.parametrize("name", list(READS_FILE))
def test_a_section_is_stale_exactly_when_the_content_of_a_file_it_reads_changed(here, name):
    out = here / "out"
    stamp_base(out)
    assert stale_sections(config(), out) == set()  # the digests of the stamps are those of the files now
    rewrite_in_place(here / name if name == CORPUS else here / MODEL / name, flip_digit)
    assert stale_sections(config(), out) == READS_FILE[name]


class Consulted(Exception):
    """Raised in place of a model-free section's work once its stored result was looked up."""


def model_free_outcomes(c: ReproduceConfig, out: Path, monkeypatch, stamp: bool) -> dict[str, str]:
    """{section: "reused" | "stale" | "skipped"} of the model-free sections with config `c`: each is called with the
    reuse check of its module replaced by the real one that then stops it (`Consulted`); with `stamp`, the key it
    asks about is stamped instead (the base run). "skipped": it returned without asking."""
    outcome: dict[str, str] = {}

    def check(directory: Path, key: dict) -> bool:
        if stamp:
            directory.mkdir(parents=True)
            files.write_key(directory, key)
        outcome[directory.name] = "reused" if files.is_fresh(directory, key) else "stale"
        raise Consulted

    calls = {"cost-theory": (cost_section, cost_section.cost_theory),
             "cost-regimes": (experiment_sections, experiment_sections.cost_regimes_theory),
             "regimes": (regime_section, regime_section.regime_runs),
             "regimes-boundary": (experiment_sections, experiment_sections.boundary_lab)}  # fmt: skip
    folders = {"cost-theory": "cost"}  # out/theory/cost; the others' folders are their names
    for name, (module, function) in calls.items():
        monkeypatch.setattr(module, "is_fresh", check)
        folder = folders.get(name, name)
        try:
            function(c, out)
        except Consulted:
            assert folder in outcome, name
        else:
            outcome[folder] = "skipped"
    return {name: outcome[folders.get(name, name)] for name in calls}


@pytest.mark.parametrize("field", [f.name for f in dataclasses.fields(ReproduceConfig)] + ["nothing"])
def test_a_model_free_section_is_stale_exactly_when_a_field_it_reads_changed(here, monkeypatch, field):
    out = here / "out"
    assert set(model_free_outcomes(config(), out, monkeypatch, stamp=True).values()) == {"reused"}
    changed = {} if field == "nothing" else {field: CHANGES[field]}
    expected = {name: fields.get(field, "reused") for name, fields in MODEL_FREE.items()}
    assert model_free_outcomes(config(**changed), out, monkeypatch, stamp=False) == expected


# --- a train-bb grid run (`--grid FILE`, `--grid regimes`): reused only when trained with the same configuration
# and bigram text. Each field of the task, model and training configs, changed alone, must train the run again.
RUN_CHANGES = {"task.bigram_text": "bigram.txt", "task.p_copy": 0.5, "model.norm": "rmsnorm",
               "model.norm_position": "post", "model.positional": "rope", "model.attention": "relu",
               "model.init": "torch", "model.n_heads": 2, "train.beta2": 0.95}  # fmt: skip
# The base (the defaults) of a field only some bases use: the stds of `init="scaled"`.
RUN_BASES = {"model.init_std": {"model.init": "scaled"}, "model.embedding_init_std": {"model.init": "scaled"}}


def run_fields() -> list[str]:
    from sinkscope.synthetic.config import RunConfig

    parts = ("task", "model", "train")
    return [f"{part}.{f.name}" for part in parts for f in dataclasses.fields(getattr(RunConfig(), part))]


def changed_value(field: str, value: object) -> object:
    """`RUN_CHANGES[field]`, else another value of the same type: a flipped bool, an int + 1, a float × 2 (0: 0.5)."""
    if field in RUN_CHANGES:
        return RUN_CHANGES[field]
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 or 0.5
    raise AssertionError(f"{field}: add a value to RUN_CHANGES")  # a new str field needs its case


def recorded_run(directory: Path, config) -> Path:
    """A finished run's folder holding the config.json `train_bb` writes for `config` (`train.config_record`)."""
    from sinkscope.synthetic.train import config_record

    directory.mkdir()
    (directory / "config.json").write_text(json.dumps(config_record(config), indent=2))
    return directory


@pytest.mark.parametrize("field", [*run_fields(), "nothing"])
def test_a_train_bb_run_is_trained_again_exactly_when_one_field_of_its_configuration_changed(here, field):
    from sinkscope.synthetic.config import RunConfig
    from sinkscope.synthetic.experiments import trained_with

    (here / "bigram.txt").write_text("abcabd")
    base = RunConfig().with_overrides(RUN_BASES.get(field, {}))
    run = recorded_run(here / "run", base)
    if field == "nothing":
        assert trained_with(run, RunConfig())
        return
    part, name = field.split(".")
    before = getattr(getattr(base, part), name)
    config = base.with_overrides({field: changed_value(field, before)})
    assert getattr(getattr(config, part), name) != before
    assert not trained_with(run, config)


def test_a_train_bb_run_on_a_bigram_text_is_trained_again_when_only_the_texts_content_changed(here):
    from sinkscope.synthetic.config import RunConfig
    from sinkscope.synthetic.experiments import trained_with

    text = here / "bigram.txt"
    text.write_text("abcabd 1")
    config = RunConfig().with_overrides({"task.bigram_text": str(text)})
    run = recorded_run(here / "run", config)
    assert trained_with(run, config)
    rewrite_in_place(text, flip_digit)  # same path, size and modification time: only the bigram differs
    assert not trained_with(run, config)
    # a run without a text file, recorded with its (empty) inputs and as before they were recorded
    plain = recorded_run(here / "plain", RunConfig())
    assert trained_with(plain, RunConfig())
    record = json.loads((plain / "config.json").read_text())
    del record["inputs"]
    (plain / "config.json").write_text(json.dumps(record))
    assert trained_with(plain, RunConfig())


# --- a sweep cell (`pipelines.sweep`): the model, corpus and T name its folder; what its numbers depend on besides
# is recorded in its run.json, and a folder computed with other values is refused (never overwritten); the batch
# size and the device decide how the passes run, not what they measure, and reuse it. (A change of the model's or
# the corpus's content recomputes it: tests/integration/test_identity.py.)
SWEEP_CHANGES = {"models": ("org/other",), "corpora": ("builtin:code",), "seq_lens": (32,), "epsilons": (0.2, 0.3),
                 "max_windows": 16, "batch_size": 4, "seed": 1, "device": "cuda", "dtype": "bfloat16"}  # fmt: skip
SWEEP_OUTCOMES = {"models": "another cell", "corpora": "another cell", "seq_lens": "another cell",
                  "epsilons": "refused", "max_windows": "refused", "seed": "refused", "dtype": "refused",
                  "batch_size": "reused", "device": "reused"}  # fmt: skip


def sweep_outcome(c, out: Path, stamp: bool = False) -> str:
    """What `sweep` does with the stored cell of `c`'s first model, corpus and T: "reused", "another cell" (no
    finished cell in its folder) or "refused"; with `stamp`, the cell's run.json is written as `sweep` writes it."""
    from sinkscope.errors import SinkscopeError
    from sinkscope.pipelines.sweep import cell_content, cell_directory, finished_cell

    cell = (c.models[0], c.corpora[0], c.seq_lens[0])
    settings, content = c.cell_settings(*cell), cell_content(*cell[:2])
    directory = cell_directory(out, *cell, settings)
    if stamp:
        directory.mkdir(parents=True)
        (directory / "run.json").write_text(json.dumps({"sweep_cell": {**settings, "content": content}}))
    try:
        return "reused" if finished_cell(directory, settings, content) else "another cell"
    except SinkscopeError:
        return "refused"


@pytest.mark.parametrize("field", [*SWEEP_OUTCOMES, "epsilons in another order", "nothing"])
def test_a_sweep_cell_is_reused_or_refused_by_each_field_of_the_sweep(here, field):
    from sinkscope.pipelines.sweep import SweepConfig

    base = SweepConfig(models=(MODEL,), corpora=(CORPUS,), seq_lens=(16,))
    assert {f.name for f in dataclasses.fields(SweepConfig)} == set(SWEEP_OUTCOMES)  # a new field: a new case
    assert sweep_outcome(base, here / "out", stamp=True) == "reused"
    changes = {"nothing": {}, "epsilons in another order": {"epsilons": base.epsilons[::-1]}}
    c = dataclasses.replace(base, **changes.get(field, {field: SWEEP_CHANGES.get(field)}))
    assert sweep_outcome(c, here / "out") == SWEEP_OUTCOMES.get(field, "reused")
