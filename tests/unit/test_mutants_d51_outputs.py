"""Draw 51's survivors on the reproduction's output side, closed by kind (issue 34).

- Section keys (every field name and value of every section's key, sections.py, experiment_sections.py, the
  cost theory): the keys stamped by the stored runs (runs/repro-smollm2-135m, `reproduce` at its recorded
  config; docs/reproduction.md: "a rerun reuses every section whose settings match ... all 21 model sections read
  fresh"; the KV plan's section, added after them, by the key it stamps at that config) must still read fresh,
  so a renamed field or a changed value recomputes hours of sections.
- Defaults and forwarded callbacks: the boundary lab's progress lines (whole line read back), `judge_theory` with
  and without a regime reason.
- Figures: every figure function of figures.py and experiment_figures.py built from small hand tables and read
  back from its Axes (title, labels, limits, scales, reference lines, plotted numbers against the inputs).
- `plan.ModelPlan.measurements`: each field from its own section's read, the ablations concatenated with a fresh
  index.
- `verdicts`: every field of the Verdict on each early-return path of `judge` (too few units, descriptive, not
  defined on the data, exact not measurable).
- `report.interval_text` / `sensitivity_text`: whole lines, with and without bounds.
"""

import json
import math
import platform
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

from sinkscope.reproduction import experiment_figures as xf
from sinkscope.reproduction import figures
from sinkscope.reproduction.config import ReproduceConfig
from sinkscope.reproduction.files import KEY_FILE, is_fresh
from sinkscope.reproduction.plan import model_plan

# The stamps `sinkscope reproduce --models smollm2-135m --out runs/repro-smollm2-135m` wrote (files
# runs/repro-smollm2-135m/**/reproduce-key.json, at the config below, from summary.json), as compact JSON; the model
# sections' stamps with the model and corpus as their identity by content (`reproduction.sections.inputs`: the
# embedded model's pinned sha256, the built-in corpus with PYTHON, the version of the Python whose standard library
# it is read from), in the stamp of this version (identity and stored files); the model-free ones as written before
# stored files were listed, which read as their identity. The run
# read its regime map from runs/regimes; `regimes_from` enters no key (only `regime_section` reads it) and the
# config checks that the path exists, so it is None here.
STORED_CONFIG = {"models": ("smollm2-135m",), "corpora": ("builtin:prose", "builtin:code"), "seq_len": 64,
                 "windows": 32, "anchor_windows": 32, "geometry_cap": 256, "ablation_windows": 8,
                 "ablation_fraction": 0.1, "random_draws": 20, "sensitivity_draws": 5, "bos_draws": 8,
                 "certificate_windows": 24, "certificate_controls": 20, "cost_contexts": (8, 16, 32),
                 "cost_windows": 4, "cost_layer_stride": 6, "smoothing_layer_stride": 1,
                 "cost_exact_Ts": (2, 4, 8, 16), "regimes": True, "regimes_from": None, "quick": False,
                 "seed": 0, "device": "cpu", "dtype": "float32"}  # fmt: skip
# fmt: off
STAMPS_JSON = {
    "regimes-boundary": (
        '{"base":{"model":{"attention":"softmax","d_model":8,"embedding_init_std":0.02,"init":"gpt2","ini'
        't_std":0.02,"mlp":false,"mlp_ratio":4,"n_heads":1,"n_layers":1,"norm":"layernorm","norm_position'
        '":"pre","positional":"learned"},"task":{"bigram_text":"","bos":true,"copy_offset":1,"dirichlet_a'
        'lpha":0.5,"length":33,"n_triggers":3,"p_copy":1.0,"seed":0,"vocab_size":32},"train":{"batch_size'
        '":32,"beta2":0.99,"checkpoint_every":2000,"eval_batch_size":256,"eval_every":2000,"final_lr_rati'
        'o":1.0,"lr":0.003,"seed":0,"steps":2000,"threads":1,"warmup_steps":0,"weight_decay":0.0001}},"se'
        'ction":"regimes-boundary","seeds":[0,1,2],"settings":[[32,32,8],[32,64,16],[32,8,16],[32,16,32]]'
        ',"steps":2000,"version":1}'
    ),
    "smollm2-135m/ablate": (
        '{"identity":{"config":{"fractions":[0.1],"from_run":"analysis","mode":"zero","n_random":20,"scor'
        'e_windows":16,"seed":0,"selections":["highest-hard-sink","lowest-ahon-ln"]},"corpus":{"builtin":'
        '"builtin:prose","python":"PYTHON"},"dtype":"float32","layer_matched_draws":20,"model":{"embedded'
        '":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"s'
        'cores":{"config":{"delta":0.1,"dense":0.7,"diagonal":0.5,"epsilon":0.3,"epsilons":[],"geometry_c'
        'ap":256,"learned_sink":null,"previous":0.5,"seed":0,"tau":0.1},"corpus":{"builtin":"builtin:pros'
        'e","python":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0'
        'e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"analyze","seq_len":64,"smooth'
        'ing":true,"smoothing_layer_stride":1,"windows":32},"section":"ablate","seq_len":64,"window_delta'
        '":true,"windows":8},"stored":{}}'
    ),
    "smollm2-135m/ablate-bos": (
        '{"identity":{"config":{"fractions":[0.1],"from_run":"analysis","mode":"bos","n_random":8,"score_'
        'windows":16,"seed":0,"selections":["highest-hard-sink"]},"corpus":{"builtin":"builtin:prose","py'
        'thon":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f9'
        '8a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"scores":{"config":{"delta":0.1,"dense":0.7,"d'
        'iagonal":0.5,"epsilon":0.3,"epsilons":[],"geometry_cap":256,"learned_sink":null,"previous":0.5,"'
        'seed":0,"tau":0.1},"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","mod'
        'el":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea3737'
        '28110db53"},"section":"analyze","seq_len":64,"smoothing":true,"smoothing_layer_stride":1,"window'
        's":32},"section":"ablate","seq_len":64,"windows":8},"stored":{}}'
    ),
    "smollm2-135m/ablate-sensitivity": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"delta":0.1,"draws":5,"dtype'
        '":"float32","fraction":0.1,"model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7'
        '562b682750a6f8c8c15e5bc70ea373728110db53"},"scales":[0.5,2.0],"scores":{"config":{},"corpus":{"b'
        'uiltin":"builtin:prose","python":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m",'
        '"sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"analyze"'
        ',"seq_len":64,"smoothing":true,"smoothing_layer_stride":1,"windows":32},"section":"ablate-sensit'
        'ivity","seed":0,"seq_len":64,"version":1,"windows":8},"stored":{}}'
    ),
    "smollm2-135m/analyze-builtin-code": (
        '{"identity":{"config":{"delta":0.1,"dense":0.7,"diagonal":0.5,"epsilon":0.3,"epsilons":[],"geome'
        'try_cap":256,"learned_sink":null,"previous":0.5,"seed":0,"tau":0.1},"corpus":{"builtin":"builtin'
        ':code","python":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c95'
        '23d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"analyze","seq_len":64,"sm'
        'oothing":true,"smoothing_layer_stride":1,"windows":32},"stored":{}}'
    ),
    "smollm2-135m/analyze-builtin-prose": (
        '{"identity":{"config":{"delta":0.1,"dense":0.7,"diagonal":0.5,"epsilon":0.3,"epsilons":[],"geome'
        'try_cap":256,"learned_sink":null,"previous":0.5,"seed":0,"tau":0.1},"corpus":{"builtin":"builtin'
        ':prose","python":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9'
        '523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"analyze","seq_len":64,"s'
        'moothing":true,"smoothing_layer_stride":1,"windows":32},"stored":{}}'
    ),
    "smollm2-135m/analyze-builtin-random": (
        '{"identity":{"config":{"delta":0.1,"dense":0.7,"diagonal":0.5,"epsilon":0.3,"epsilons":[],"geome'
        'try_cap":256,"learned_sink":null,"previous":0.5,"seed":0,"tau":0.1},"corpus":{"builtin":"builtin'
        ':random","python":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c'
        '9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"analyze","seq_len":64,"'
        'smoothing":false,"smoothing_layer_stride":null,"windows":32},"stored":{}}'
    ),
    "smollm2-135m/analyze-builtin-repeat": (
        '{"identity":{"config":{"delta":0.1,"dense":0.7,"diagonal":0.5,"epsilon":0.3,"epsilons":[],"geome'
        'try_cap":256,"learned_sink":null,"previous":0.5,"seed":0,"tau":0.1},"corpus":{"builtin":"builtin'
        ':repeat","python":"PYTHON"},"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c'
        '9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"analyze","seq_len":64,"'
        'smoothing":false,"smoothing_layer_stride":null,"windows":32},"stored":{}}'
    ),
    "smollm2-135m/certificates": (
        '{"identity":{"controls":20,"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float'
        '32","layer_stride":1,"model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b68'
        '2750a6f8c8c15e5bc70ea373728110db53"},"section":"certificates","seed":0,"seq_len":64,"version":2,'
        '"windows":24},"stored":{}}'
    ),
    "smollm2-135m/cost-layers": (
        '{"identity":{"contexts":[8,16,32],"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype"'
        ':"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8'
        'c15e5bc70ea373728110db53"},"section":"cost-layers","seed":0,"stride":6,"version":2,"windows":4},'
        '"stored":{}}'
    ),
    "smollm2-135m/dense": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","lambdas":'
        '[1.0],"model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5'
        'bc70ea373728110db53"},"section":"dense","seed":0,"seq_len":64,"version":1,"windows":8},"stored":'
        '{}}'
    ),
    "smollm2-135m/evict": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","model":{"'
        'embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110d'
        'b53"},"section":"evict","seed":0,"seq_len":128,"version":1,"window":16,"windows":8},"stored":{}}'
    ),
    "smollm2-135m/evidence-builtin-code": (
        '{"identity":{"corpus":{"builtin":"builtin:code","python":"PYTHON"},"delta_scales":[0.5,1.0,2.0],'
        '"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b68275'
        '0a6f8c8c15e5bc70ea373728110db53"},"section":"evidence","seed":0,"seq_len":64,"version":1,"window'
        's":32},"stored":{}}'
    ),
    "smollm2-135m/evidence-builtin-prose": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"delta_scales":[0.5,1.0,2.0]'
        ',"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b6827'
        '50a6f8c8c15e5bc70ea373728110db53"},"section":"evidence","seed":0,"seq_len":64,"version":1,"windo'
        'ws":32},"stored":{}}'
    ),
    "smollm2-135m/evidence-builtin-random": (
        '{"identity":{"corpus":{"builtin":"builtin:random","python":"PYTHON"},"delta_scales":[1.0],"dtype'
        '":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c'
        '8c15e5bc70ea373728110db53"},"section":"evidence","seed":0,"seq_len":64,"version":1,"windows":32}'
        ',"stored":{}}'
    ),
    "smollm2-135m/evidence-builtin-repeat": (
        '{"identity":{"corpus":{"builtin":"builtin:repeat","python":"PYTHON"},"delta_scales":[1.0],"dtype'
        '":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c'
        '8c15e5bc70ea373728110db53"},"section":"evidence","seed":0,"seq_len":64,"version":1,"windows":32}'
        ',"stored":{}}'
    ),
    "smollm2-135m/kv-plan": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"draws":20,"dtype":"float32"'
        ',"model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70e'
        'a373728110db53"},"recent_size":32,"scores":{"config":{"attention_precision":"exact","delta":0.1,'
        '"dense":0.7,"diagonal":0.5,"epsilon":0.3,"epsilons":[],"geometry_cap":256,"learned_sink":null,"p'
        'revious":0.5,"seed":0,"tau":0.1},"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":'
        '"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c'
        '15e5bc70ea373728110db53"},"section":"analyze","seq_len":64,"smoothing":true,"smoothing_layer_str'
        'ide":1,"windows":32},"section":"kv-plan","seed":0,"seq_len":128,"share":0.5,"sink_size":4,"span"'
        ':16,"version":1,"windows":8},"stored":{}}'
    ),
    "smollm2-135m/prevalence": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","epsilon":'
        '0.3,"model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc'
        '70ea373728110db53"},"section":"prevalence","seed":0,"seq_len":64,"version":1,"windows":32},"stor'
        'ed":{}}'
    ),
    "smollm2-135m/sink-queries": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"draws":20,"dtype":"float32"'
        ',"fraction":0.1,"model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a'
        '6f8c8c15e5bc70ea373728110db53"},"scores":{"config":{"delta":0.1,"dense":0.7,"diagonal":0.5,"epsi'
        'lon":0.3,"epsilons":[],"geometry_cap":256,"learned_sink":null,"previous":0.5,"seed":0,"tau":0.1}'
        ',"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","model":{"embedded":"s'
        'mollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"},"secti'
        'on":"analyze","seq_len":64,"smoothing":true,"smoothing_layer_stride":1,"windows":32},"section":"'
        'sink-queries","seed":0,"seq_len":64,"version":2,"windows":8},"stored":{}}'
    ),
    "smollm2-135m/switch-assumptions": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","model":{"'
        'embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110d'
        'b53"},"section":"switch-assumptions","seed":0,"seq_len":64,"switch_tau":0.1,"version":2,"windows":32},"stored":{}'
        '}'
    ),
    "smollm2-135m/switch-builtin-code": (
        '{"identity":{"corpus":{"builtin":"builtin:code","python":"PYTHON"},"dtype":"float32","model":{"e'
        'mbedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db'
        '53"},"section":"switch","seed":0,"seq_len":64,"switch_tau":0.1,"version":4,"windows":32},"stored":{}}'
    ),
    "smollm2-135m/switch-builtin-prose": (
        '{"identity":{"corpus":{"builtin":"builtin:prose","python":"PYTHON"},"dtype":"float32","model":{"'
        'embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110d'
        'b53"},"section":"switch","seed":0,"seq_len":64,"switch_tau":0.1,"version":4,"windows":32},"stored":{}}'
    ),
    "smollm2-135m/weights": (
        '{"identity":{"dtype":"float32","model":{"embedded":"smollm2-135m","sha256":"b179c9523d0e6a0f98a3'
        '30c7562b682750a6f8c8c15e5bc70ea373728110db53"},"section":"weights","version":1},"stored":{}}'
    ),
    "theory/cost": (
        '{"exact_Ts":[2,4,8,16],"section":"cost-theory","version":1}'
    ),
    "theory/cost-regimes": (
        '{"config":{"Ks":[1,2],"Ts":[4,8,12],"Vs":[3,4,6,8,12],"ds":[16],"kappa":1.0,"ranks":[2,3,4,8,16]'
        ',"seeds":8},"section":"cost-regimes","version":1}'
    ),
}
# fmt: on


def _stamp(root, relative: str):
    directory = root / relative
    directory.mkdir(parents=True, exist_ok=True)
    (directory / KEY_FILE).write_text(STAMPS_JSON[relative].replace("PYTHON", platform.python_version()))
    return directory


def stored_config(**changes) -> ReproduceConfig:
    return replace(ReproduceConfig(**STORED_CONFIG), **changes)


def test_every_stored_model_section_stamp_still_reads_fresh(tmp_path):
    # Every key field name and value of sections.py's and experiment_sections.py's sections (and cost-layers):
    # a renamed field, a dropped one or a changed value makes the stored stamp stale.
    sections = model_plan("smollm2-135m", stored_config(), tmp_path).in_order()
    relative = [str(section.directory.relative_to(tmp_path)) for section in sections]
    assert sorted(relative) == sorted(k for k in STAMPS_JSON if k.startswith("smollm2-135m/"))
    assert len(relative) == 22  # the 21 of docs/reproduction.md ("... read fresh") and the KV plan's (its key here)
    for section, name in zip(sections, relative):
        _stamp(tmp_path, name)
        assert is_fresh(section.directory, section.key), f"{name}: {section.key}"


def test_the_switch_sections_of_the_pooled_test_are_stale(tmp_path):
    # The per-head switch evidence (version 4, its τ in the key) replaced the pooled 2×2 arrays: a section stored
    # before must be computed again, not read without the arrays the claim now needs.
    sections = {str(s.directory.relative_to(tmp_path)): s
                for s in model_plan("smollm2-135m", stored_config(), tmp_path).in_order()}  # fmt: skip
    for name, version in (("switch-builtin-prose", 4), ("switch-builtin-code", 4), ("switch-assumptions", 2)):
        section = sections[f"smollm2-135m/{name}"]
        _stamp(tmp_path, f"smollm2-135m/{name}")
        assert is_fresh(section.directory, section.key)
        older = STAMPS_JSON[f"smollm2-135m/{name}"].replace('"switch_tau":0.1,', "")
        older = older.replace(f'"version":{version}', f'"version":{version - 1}').replace("PYTHON", platform.python_version())
        (section.directory / KEY_FILE).write_text(older)
        assert not is_fresh(section.directory, section.key), name


def test_stored_model_free_stamps_are_reused_not_recomputed(tmp_path, monkeypatch):
    from sinkscope.pipelines import cost_regimes
    from sinkscope.reproduction.cost_section import cost_theory
    from sinkscope.reproduction.experiment_sections import boundary_lab, cost_regimes_theory
    from sinkscope.theory import cost

    def never(*_args, **_kwargs):
        raise AssertionError("recomputed: the stored stamp no longer matches the key")

    monkeypatch.setattr(cost, "pattern_cost", never)
    monkeypatch.setattr(cost_regimes, "vocabulary_table", never)
    tables = {"theory/cost": ["cost_theory"], "theory/cost-regimes": ["regimes_vocabulary", "regimes_geometry"],
              "regimes-boundary": ["boundary_runs"]}  # fmt: skip
    written = {}
    for index, (relative, names) in enumerate(tables.items()):
        directory = _stamp(tmp_path, relative)
        for offset, name in enumerate(names):
            written[name] = pd.DataFrame({"marker": [index * 10 + offset]})
            written[name].to_parquet(directory / f"{name}.parquet", index=False)
    pd.testing.assert_frame_equal(cost_theory(stored_config(), tmp_path), written["cost_theory"])
    regimes = cost_regimes_theory(stored_config(), tmp_path)
    pd.testing.assert_frame_equal(regimes["vocabulary"], written["regimes_vocabulary"])
    pd.testing.assert_frame_equal(regimes["geometry"], written["regimes_geometry"])
    # regimes=False: a stale stamp would answer {"reason": ...} instead of training
    lab = boundary_lab(stored_config(regimes=False), tmp_path)
    assert set(lab) == {"runs"}
    pd.testing.assert_frame_equal(lab["runs"], written["boundary_runs"])


def test_boundary_lab_trains_and_logs_one_progress_line_per_run(tmp_path, monkeypatch, capsys):
    from sinkscope.reproduction import regime_section
    from sinkscope.reproduction.experiment_sections import boundary_lab
    from sinkscope.synthetic import boundary_runs

    trained = []

    def train_bb(config, run_dir, overwrite, log):
        trained.append((config.task.vocab_size, config.train.seed))
        k = len(trained)
        return {
            "switch_head_final": {"bos_attn": 0.25 * (k % 4), "diag_attn": 0.5, "entropy": 1.0},
            "switch_head": {"pattern": "sink"},
            "copy_acc": 1.0,
            "seconds": 3.0 * k,
        }

    monkeypatch.setattr(boundary_runs, "train_bb", train_bb)
    # one worker whatever torch's thread count (xdist gives 1, a plain run 2): spawned workers would not see the stub
    monkeypatch.setattr(regime_section, "regime_workers", lambda runs: 1)
    lab = boundary_lab(stored_config(), tmp_path)
    settings, seeds = boundary_runs.BOUNDARY_SETTINGS, boundary_runs.BOUNDARY_SEEDS
    assert trained == [(s.vocab_size, seed) for s in settings for seed in seeds]
    assert len(lab["runs"]) == len(trained)
    lines = [
        line.split("] ", 1)[1]
        for line in capsys.readouterr().err.splitlines()
        if "regimes: boundary: " in line
    ]
    expected = []
    for k, (setting, seed) in enumerate([(s, seed) for s in settings for seed in seeds], 1):
        expected.append(f"regimes: boundary: {setting.name} seed {seed}: predicted {setting.predicted}, trained sink "
                        f"(BOS {0.25 * (k % 4):.2f}, diagonal 0.50), {3 * k} s")  # fmt: skip
    assert lines == expected
    # the key now stamped is the stored one: the lab's base run is seed 0 of the first setting
    assert json.loads((tmp_path / "regimes-boundary" / KEY_FILE).read_text())["identity"] == json.loads(
        STAMPS_JSON["regimes-boundary"]
    )


def test_judge_theory_regime_reason_default_and_forwarded():
    from sinkscope.reproduction.judge import judge_theory
    from sinkscope.reproduction.regime_claims import REGIMES

    T = np.array([64.0, 128.0, 256.0, 512.0])
    theory = pd.DataFrame([{"T": t, "pattern": p, "norm": "nuclear", "closed_form": c * t**a, "exact": math.nan}
                           for t in T for p, c, a in (("sink", 2.0, 0.5), ("diagonal", 3.0, 1.0))])  # fmt: skip
    closed, regime = judge_theory(theory, {})
    assert closed.claim == "cost_closed_forms"
    assert (regime.claim, regime.model, regime.verdict) == (
        "bigram_backcopy_regimes",
        "synthetic",
        "not measurable here",
    )
    assert (regime.reason, regime.evidence, regime.thresholds) == ("no runs", {}, dict(REGIMES))
    _, regime = judge_theory(theory, {"reason": "regimes=False"})
    assert regime.reason == "regimes=False"


@pytest.mark.parametrize("quick", [False, True])
def test_measurements_take_each_field_from_its_own_section(tmp_path, quick):
    plan = model_plan("m", stored_config(quick=quick), tmp_path)
    read = {section.directory: f"read {section.directory.name}" for section in plan.in_order()}
    zero = pd.DataFrame(
        {"mode": ["zero", "zero"], "selection": ["random", "lowest-ahon-ln"], "delta_loss": [1.0, 2.0]}
    )
    bos = pd.DataFrame({"mode": ["bos"], "selection": ["random"], "delta_loss": [3.0]})
    read[plan.ablations[0].directory], read[plan.ablations[1].directory] = zero, bos
    certificates, alignment = pd.DataFrame({"layer": [1]}), pd.DataFrame({"layer": [2]})
    read[plan.certificates.directory] = (certificates, alignment)
    m = plan.measurements(read)
    expected = pd.DataFrame({"mode": ["zero", "zero", "bos"], "selection": ["random", "lowest-ahon-ln", "random"],
                             "delta_loss": [1.0, 2.0, 3.0]})  # fmt: skip
    pd.testing.assert_frame_equal(m.ablation, expected)  # index 0, 1, 2 (RangeIndex), not 0, 1, 0
    assert isinstance(m.ablation.index, pd.RangeIndex)
    assert m.certificates is certificates and m.alignment is alignment
    corpora = ["builtin:prose", "builtin:code"]
    assert m.runs == {
        c: f"read analyze-{c.replace(':', '-')}" for c in [*corpora, "builtin:random", "builtin:repeat"]
    }
    assert m.evidence == {c: f"read evidence-{c.replace(':', '-')}" for c in m.runs}
    assert m.switch == {c: f"read switch-{c.replace(':', '-')}" for c in corpora}
    assert (m.costs, m.weights, m.sink_queries) == ("read cost-layers", "read weights", "read sink-queries")
    assert m.experiments == {"eviction": "read evict", "dense": "read dense", "prevalence": "read prevalence",
                             "assumptions": "read switch-assumptions", "kv_plan": "read kv-plan"}  # fmt: skip
    assert m.ablation_variants == ({} if quick else "read ablate-sensitivity")


# ---- figures: every figure function, read back from its Axes -------------------------------------------------


def _xy(line) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)


def _reference_lines(ax, vertical: bool) -> list[float]:
    """The position of every reference line (`axhline`/`axvline`: spanning 0 to 1 in axes coordinates)."""
    transform = ax.get_xaxis_transform() if vertical else ax.get_yaxis_transform()
    out = []
    for line in ax.get_lines():
        x, y = _xy(line)
        along, at = (y, x) if vertical else (x, y)
        if (
            along.size == 2
            and list(along) == [0.0, 1.0]
            and at[0] == at[1]
            and line.get_transform() == transform
        ):
            out.append(float(at[0]))
    return out


def hlines(ax) -> list[float]:
    return _reference_lines(ax, vertical=False)


def vlines(ax) -> list[float]:
    return _reference_lines(ax, vertical=True)


def labelled(ax) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {line.get_label(): _xy(line) for line in ax.get_lines() if not line.get_label().startswith("_")}


def bar_heights(ax) -> list[float]:
    return [patch.get_height() for patch in ax.patches if type(patch).__name__ == "Rectangle"]


def assert_lines(ax, expected: dict):
    got = labelled(ax)
    assert sorted(got) == sorted(expected)
    for label, (x, y) in expected.items():
        np.testing.assert_allclose(got[label][0], x, err_msg=label)
        np.testing.assert_allclose(got[label][1], y, err_msg=label)


def test_geometry_figure_reads_back():
    layers = np.arange(5)
    frac_z, frac_h, mean_z = (
        [0.1, 0.2, 0.3, 0.4, 0.5],
        [0.6, 0.7, 0.8, 0.9, 0.95],
        [-0.5, -0.4, -0.3, -0.2, -0.1],
    )
    with_h = pd.DataFrame({"layer": layers, "corpus": "c1", "bos_cos_nonpos_frac_z": frac_z,
                           "nonpos_frac_bos_h": frac_h, "bos_cos_mean_z": mean_z})  # fmt: skip
    without_h = with_h.drop(columns="nonpos_frac_bos_h").iloc[:3]
    fig = figures.geometry_figure({"m1": {"geometry": with_h}, "m2": {"geometry": without_h}})
    first, second = fig.axes
    assert (first.get_title(), second.get_title()) == ("m1", "m2")
    for ax in (first, second):
        assert ax.get_xlabel() == "layer" and ax.get_ylim() == (-1.05, 1.05) and hlines(ax) == [0.0]
    assert_lines(first, {"frac cos≤0 (z) · c1": (layers, frac_z), "frac cos≤0 (h) · c1": (layers, frac_h),
                         "mean cos (z) · c1": (layers, mean_z)})  # fmt: skip
    assert_lines(
        second,
        {"frac cos≤0 (z) · c1": (layers[:3], frac_z[:3]), "mean cos (z) · c1": (layers[:3], mean_z[:3])},
    )
    # the shaded middle band: layers l with ¼ ≤ l / (L − 1) ≤ ¾, i.e. 1 … 3 of 5 and 1 of 3, ± ½
    for ax, (low, high) in ((first, (0.5, 3.5)), (second, (0.5, 1.5))):
        (span,) = ax.patches
        assert (span.get_x(), span.get_x() + span.get_width()) == (low, high)
        assert span.get_label() == "middle layers"


def test_switch_figure_reads_back():
    tau = [0.05, 0.1, 0.5]
    rows = [{"corpus": c, "tau": t, "delta_scale": d, "p_sink_given_off": 0.1 * i + d / 10, "p_off_given_sink": 0.9 - 0.1 * i}
            for c in ("a", "b") for d in (1.0, 0.5) for i, t in enumerate(tau)]  # fmt: skip
    fig = figures.switch_figure({"m": {"switch": pd.DataFrame(rows)}})
    (ax,) = fig.axes
    assert ax.get_title() == "m" and ax.get_xscale() == "log" and ax.get_ylim() == (-0.02, 1.02)
    assert "‖o_t‖ ≤ τ" in ax.get_xlabel() and ax.get_xlabel().startswith("τ")  # the switched-off rule, docs
    p_sink = [0.1, 0.2, 0.3]  # δ × 1 only: 0.1 i + 1 / 10
    assert_lines(ax, {f"P(sink | off) · {c}": (tau, p_sink) for c in "ab"}
                 | {f"P(off | sink) · {c}": (tau, [0.9, 0.8, 0.7]) for c in "ab"})  # fmt: skip


def test_smoothing_figure_reads_back():
    heads = pd.DataFrame({"smooth_dcos_pred": [-0.2, 0.1, 0.3], "smooth_dcos_obs": [-0.1, 0.05, 0.4]})
    fig = figures.smoothing_figure({"m": {"heads": heads}, "bare": {"heads": pd.DataFrame({"layer": [0]})}})
    ax, bare = fig.axes
    (dots,) = ax.collections
    np.testing.assert_allclose(dots.get_offsets(), heads.to_numpy())
    assert not bare.collections
    for axes, title in ((ax, "m"), (bare, "bare")):
        assert hlines(axes) == [0.0] and vlines(axes) == [0.0] and axes.get_title() == title
        assert axes.get_xlabel().startswith("predicted Δcos") and axes.get_ylabel() == "observed Δcos"


def test_ablation_figure_reads_back():
    curve = pd.DataFrame([("zero", "highest-hard-sink", 0.5), ("zero", "lowest-ahon-ln", 0.2), ("zero", "random", 0.1),
                          ("zero", "random", 0.3), ("bos", "highest-hard-sink", 1.0), ("bos", "lowest-ahon-ln", 9.0)],
                         columns=["mode", "selection", "delta_loss"])  # fmt: skip
    fig = figures.ablation_figure({"m": {"ablation": curve}})
    (ax,) = fig.axes
    # sink-like zero, dormant zero, random zero (mean of its draws), sink-like → BOS, random → BOS (no draw: 0)
    np.testing.assert_allclose(bar_heights(ax), [0.5, 0.2, 0.2, 1.0, 0.0])
    dots = [_xy(line) for line in ax.get_lines()]
    assert [list(y) for _, y in dots] == [[0.5], [0.2], [0.1, 0.3], [1.0], []]
    assert [list(x) for x, _ in dots] == [[0.0], [1.0], [2.0, 2.0], [3.0], []]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["sink-like\nzero", "dormant\nzero", "random\nzero",
                                                            "sink-like\n→BOS", "random\n→BOS"]  # fmt: skip
    assert ax.get_ylabel() == "Δ loss (nats/token)" and ax.get_title() == "m"


def test_cost_figure_reads_back():
    T = [2, 4, 8]
    theory = pd.DataFrame([{"T": t, "pattern": p, "norm": n, "closed_form": t * k, "exact": t * k if t < 8 else math.nan}
                           for p, k0 in (("sink", 1.0), ("diagonal", 3.0)) for n, k in (("nuclear", k0), ("frobenius", 2 * k0))
                           for t in T])  # fmt: skip
    # diagonal / sink per (layer, window): layer 0: 1, 2, 6 (median 2, mean 3); layer 1: 5, inf → NaN (median 5)
    costs = pd.DataFrame([{"T": 8, "layer": layer, "window": w, "pattern": p, "cost": c}
                          for layer, w, sink, diag in ((0, 0, 1.0, 1.0), (0, 1, 1.0, 2.0), (0, 2, 0.5, 3.0),
                                                       (1, 0, 2.0, 10.0), (1, 1, 0.0, 1.0))
                          for p, c in (("sink", sink), ("diagonal", diag))])  # fmt: skip
    fig = figures.cost_figure(theory, {"m": {"cost_layers": costs}, "empty": {"cost_layers": costs.iloc[:0]}})
    left, right = fig.axes
    assert (left.get_xscale(), left.get_yscale(), right.get_yscale()) == ("log", "log", "log")
    assert (left.get_xlabel(), left.get_ylabel()) == ("T (contexts)", "min ‖W_QK‖ (κ = 1)")
    assert left.get_title() == "orthonormal embeddings (dots: exact programs)"
    assert (right.get_xlabel(), right.get_ylabel(), right.get_title()) == ("layer", "diagonal cost / sink cost",
                                                                           "real attention inputs")  # fmt: skip
    expected = {
        f"{p} {n} (closed form)": (T, [t * k for t in T])
        for p, k0 in (("sink", 1.0), ("diagonal", 3.0))
        for n, k in (("nuclear", k0), ("frobenius", 2 * k0))
    }
    assert_lines(left, expected)
    styles = {line.get_label(): line.get_linestyle() for line in left.get_lines()}
    assert {label: style for label, style in styles.items() if not label.startswith("_")} == {
        label: "-" if "nuclear" in label else ":" for label in expected
    }
    exact = [_xy(line) for line in left.get_lines() if line.get_label().startswith("_")]
    assert sorted(tuple(y) for _, y in exact) == sorted(
        tuple(t * k for t in (2, 4)) for k in (1.0, 2.0, 3.0, 6.0)
    )
    assert hlines(right) == [1.0]
    assert_lines(right, {"m T=8": ([0, 1], [2.0, 5.0])})


def test_weights_figure_reads_back():
    weights = pd.DataFrame({"is_sink": [True, True, False, False, False], "qk_effective_rank": [1.5, 2.0, 5.0, 6.0, 7.0],
                            "qk_bos_gain": [0.9, 0.8, 0.1, np.nan, 0.2], "vo_bos_gain": [0.5, 0.4, 0.3, 0.2, 0.1]})  # fmt: skip
    fig = figures.weights_figure({"a": {"weights": weights}, "b": {"weights": weights.iloc[2:]}})
    axes = fig.axes
    labels = ["W_QK effective rank", "W_QK gain on z_0 (key side)", "W_VO gain on z_0 (input side)"]
    assert [ax.get_title() for ax in axes] == [f"{m}: {label}" for m in "ab" for label in labels]
    for ax, column in zip(axes[:3], ["qk_effective_rank", "qk_bos_gain", "vo_bos_gain"]):
        assert [t.get_text() for t in ax.get_xticklabels()] == ["sink heads", "others"]
        dots = [_xy(line) for line in ax.get_lines() if line.get_marker() == "."]
        sink, other = (
            weights.loc[weights["is_sink"] == flag, column].dropna().to_numpy() for flag in (True, False)
        )
        np.testing.assert_allclose(dots[0][1], sink)
        np.testing.assert_allclose(dots[1][1], other)
        assert np.all(np.abs(dots[0][0] - 1) <= 0.15) and np.all(np.abs(dots[1][0] - 2) <= 0.15)
    sink_dots = [_xy(line)[1] for line in axes[3].get_lines() if line.get_marker() == "."][0]
    assert sink_dots.size == 0  # b has no sink head: an empty box, no dot


def test_anchors_figure_reads_back():
    corpora = ["builtin:prose", "builtin:random", "builtin:repeat"]
    evidence = {m: {"anchors": pd.DataFrame({"corpus": corpora, "sink_rate": rates})}
                for m, rates in (("a", [0.2, 0.4, 0.6]), ("b", [0.1, 0.3, 0.9]))}  # fmt: skip
    (ax,) = figures.anchors_figure(evidence).axes
    np.testing.assert_allclose(bar_heights(ax), [0.2, 0.4, 0.6, 0.1, 0.3, 0.9])
    # bar centres: corpus index + model index · 0.8 / 2 models, each 0.4 wide
    np.testing.assert_allclose([p.get_x() + p.get_width() / 2 for p in ax.patches], [0, 1, 2, 0.4, 1.4, 2.4])
    np.testing.assert_allclose([p.get_width() for p in ax.patches], [0.4] * 6)
    assert [t.get_text() for t in ax.get_xticklabels()] == corpora
    assert ax.get_ylabel() == "sink rate (ε = 0.3)" and ax.get_ylim() == (0.0, 1.0)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b"]


def test_mean_interval_by_hand():
    assert xf.mean_interval(np.array([3.0])) == (3.0, 0.0)
    mean, half = xf.mean_interval(np.array([1.0, 2.0, 3.0, 4.0]))
    assert mean == 2.5 and half == pytest.approx(1.96 * math.sqrt(5 / 3) / 2)  # sd (ddof 1) = √(5/3), √4 = 2


def test_eviction_figure_reads_back():
    table = pd.DataFrame({"loss_full": [3.0, 3.0, 3.0, 3.0], "loss_recent": [4.0, 5.0, 6.0, 7.0],
                          "loss_sink": [3.5, 3.5, 3.5, 3.5], "loss_control": [4.0, 4.0, 5.0, 5.0], "recent_window": 16})  # fmt: skip
    (ax,) = xf.eviction_figure({"m": {"eviction": table}}).axes
    np.testing.assert_allclose(bar_heights(ax), [2.5, 0.5, 1.5])  # means of loss − full
    halves = []
    for container in ax.containers:
        if isinstance(container, ErrorbarContainer):
            ((segment,),) = [c.get_segments() for c in container.lines[2]]
            (low, high) = segment[:, 1]
            halves.append((high - low) / 2)
    # 1.96 sd / √4 of (1, 2, 3, 4), (0.5 × 4), (1, 1, 2, 2): sd √(5/3), 0, √(1/3)
    np.testing.assert_allclose(halves, [0.98 * math.sqrt(5 / 3), 0.0, 0.98 * math.sqrt(1 / 3)], atol=1e-12)
    assert ax.get_title() == "m: recent window of 16 keys"
    assert ax.get_ylabel() == "Δ loss vs full cache (nats/token)"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["window\nonly", "window\n+ BOS",
                                                            "window + random\nearly token"]  # fmt: skip


def test_dense_figure_reads_back():
    table = pd.DataFrame({"layer": [1, 1, 1, 0, 0, 0], "head": [0, 1, -1, 0, 1, -1],
                          "dcos": [0.1, -0.2, 0.3, 0.05, 0.0, -0.4]})  # fmt: skip
    (ax,) = xf.dense_figure({"m": {"dense": table}}).axes
    (dots,) = ax.collections
    np.testing.assert_allclose(dots.get_offsets(), [[1, 0.1], [1, -0.2], [0, 0.05], [0, 0.0]])
    assert_lines(ax, {"whole layer uniform": ([0, 1], [-0.4, 0.3])})  # sorted by layer
    assert hlines(ax) == [0.0] and ax.get_title() == "m"
    assert (ax.get_xlabel(), ax.get_ylabel()) == ("layer", "Δ cos, own → uniform (λ = 1)")


def test_prevalence_figure_reads_back():
    table = pd.DataFrame({"layer": [0, 0, 0, 1, 1, -1], "class": ["sink", "diagonal", "sink", "sink", "dense", "sink"],
                          "share": [0.5, 0.5, 0.7, 0.25, 0.75, 0.9]})  # fmt: skip
    (ax,) = xf.prevalence_figure({"m": {"prevalence": table}}).axes
    # per layer mean share by class (layer −1, the model's summary, left out): sink (0.6, 0.25), diagonal (0.5, 0),
    # dense (0, 0.75), stacked in HEAD_CLASS_COLORS order: sink, diagonal, dense
    bars = [(p.get_x() + p.get_width() / 2, p.get_y(), p.get_height()) for p in ax.patches]
    np.testing.assert_allclose(bars, [(0, 0, 0.6), (1, 0, 0.25), (0, 0.6, 0.5), (1, 0.25, 0.0), (0, 1.1, 0.0),
                                      (1, 0.25, 0.75)])  # fmt: skip
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["sink", "diagonal", "dense"]
    assert ax.get_ylim() == (0.0, 1.05) and ax.get_title() == "m" and ax.get_xlabel() == "layer"
    assert ax.get_ylabel() == "share of heads (mean over windows)"


def test_assumptions_figure_reads_back():
    table = pd.DataFrame({"layer": [0, 1, 2], "span_distance_median": [0.1, 0.5, 0.9], "span_distance_min": [0.0, 0.2, 0.3],
                          "holds_frac": [0.0, 0.5, 1.0], "switched_off": [0, 4, 10], "switched_off_sink": [0, 1, 10]})  # fmt: skip
    (ax,) = xf.assumptions_figure({"m": {"switch_assumptions": table}}).axes
    layers = [0, 1, 2]
    assert_lines(ax, {"|z₀ − P z₀| / |z₀|, median": (layers, [0.1, 0.5, 0.9]), "… smallest window": (layers, [0.0, 0.2, 0.3]),
                      "share of windows: hold": (layers, [0.0, 0.5, 1.0])})  # fmt: skip
    (dots,) = ax.collections
    np.testing.assert_allclose(
        dots.get_offsets().data[1:], [[1, 0.25], [2, 1.0]]
    )  # P(hard sink | off) = 1/4, 10/10
    assert (
        np.isnan(np.asarray(dots.get_offsets(), float)[0, 1]) or dots.get_offsets().mask[0, 1]
    )  # no query off
    assert dots.get_label() == "P(hard sink | off)"
    assert ax.get_ylim() == (-0.05, 1.05) and ax.get_title() == "m" and ax.get_xlabel() == "layer"


def test_boundary_trained_figure_reads_back():
    runs = pd.DataFrame({"setting": ["s_a", "s_a", "s_b", "s_b"], "predicted": ["sink", "sink", "diagonal", "diagonal"],
                         "bos_mass": [0.9, 0.8, 0.1, 0.2], "diag_mass": [0.05, 0.1, 0.7, 0.6]})  # fmt: skip
    (ax,) = xf.boundary_trained_figure(runs).axes
    assert hlines(ax) == [0.5]  # the classifier's line (docstring)
    dots = [_xy(line) for line in ax.get_lines() if line.get_marker() in ("o", "D")]
    jitter = np.array([-0.08, 0.08])
    expected = [(-0.15 + jitter, [0.9, 0.8]), (0.15 + jitter, [0.05, 0.1]), (0.85 + jitter, [0.1, 0.2]),
                (1.15 + jitter, [0.7, 0.6])]  # fmt: skip
    for (x, y), (ex, ey) in zip(dots, expected, strict=True):
        np.testing.assert_allclose(x, ex)
        np.testing.assert_allclose(y, ey)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["BOS mass", "diagonal mass"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["s a\npredicted sink", "s b\npredicted diagonal"]
    spans = sorted((p.get_x(), p.get_width(), p.get_facecolor()[:3]) for p in ax.patches)
    assert [(round(x, 2), round(w, 2)) for x, w, _ in spans] == [(-0.45, 0.9), (0.55, 0.9)]
    from matplotlib.colors import to_rgb

    assert [c for *_, c in spans] == [pytest.approx(to_rgb(xf.SIDE_COLORS[s])) for s in ("sink", "diagonal")]
    assert ax.get_ylim() == (-0.02, 1.02) and ax.get_ylabel() == "switch head's mass (non-trigger queries)"
    assert ax.get_title().startswith("lab trained on each side of the predicted boundary")


def test_every_figure_is_a_figure_of_one_panel_per_model():
    # the panel count of the per-model figures (`_axes`: at least one) on two models
    two = {m: {"dense": pd.DataFrame({"layer": [0], "head": [-1], "dcos": [0.0]})} for m in ("a", "b")}
    fig = xf.dense_figure(two)
    assert isinstance(fig, Figure) and [ax.get_title() for ax in fig.axes] == ["a", "b"]
    assert tuple(fig.get_size_inches()) == pytest.approx((4.6 * 2, 3.2))
    one = {"a": {"anchors": pd.DataFrame({"corpus": ["builtin:prose"], "sink_rate": [0.5]})}}
    assert tuple(figures.anchors_figure(one).get_size_inches()) == pytest.approx((5.0, 3.2))


# ---- verdicts: every field of the Verdict on each early-return path of `judge` ---------------------------------


def _fields(v) -> dict:
    return {name: getattr(v, name) for name in ("claim", "model", "verdict", "evidence", "thresholds", "reason",
                                                 "corpus", "interval", "sensitivity")}  # fmt: skip


def test_judge_early_returns_carry_every_field():
    from sinkscope.reproduction.verdicts import DESCRIPTIVE, NOT_MEASURABLE, SUPPORTED, judge

    thresholds = {"min_mean": 1.0}

    def mean_effect(units, _th):
        return {"mean": float(np.mean(units["x"])) if units else 2.0, "ratio": math.nan}

    def never(_e, _th):
        return NOT_MEASURABLE

    def at_least(e, th):
        return SUPPORTED if e["mean"] >= th["min_mean"] else "not supported"

    units = {"x": np.full(5, 2.0)}  # every resample has mean 2: the interval is [2, 2]
    base = dict(claim="c", model="m", units=units, effects=mean_effect, thresholds=thresholds, over="windows",
                evidence={"note": 1})  # fmt: skip
    interval = {
        "effect": "mean",
        "estimate": 2.0,
        "low": 2.0,
        "high": 2.0,
        "level": 0.95,
        "over": "windows",
        "n": 5,
    }
    # exact test (no units), not measurable: the record, the thresholds, the missing effect named, no interval
    exact = judge("c", "m", {}, mean_effect, never, thresholds, over="closed forms", evidence={"note": 1})
    assert _fields(exact) == {
        "claim": "c",
        "model": "m",
        "verdict": NOT_MEASURABLE,
        "evidence": {"note": 1, "mean": 2.0, "ratio": math.nan, "interval_note": "closed forms"},
        "thresholds": thresholds,
        "reason": "not defined on this data: ratio",
        "corpus": None,
        "interval": None,
        "sensitivity": [],
    }  # fmt: skip  (the same NaN object: equal)
    # exact test, decided: sensitivity at ½ and 2 of the threshold, no reason, no interval
    decided = judge("c", "m", {}, mean_effect, at_least, {"min_mean": 1.5}, over="closed forms")
    assert (decided.verdict, decided.reason, decided.interval, decided.thresholds) == ("partly", "depends on min_mean "
            "(min_mean: not supported at 3)", None, {"min_mean": 1.5})  # fmt: skip
    assert [(r["scale"], r["value"], r["verdict"]) for r in decided.sensitivity] == [(0.5, 0.75, SUPPORTED),
                                                                                     (2.0, 3.0, "not supported")]  # fmt: skip
    # too few units
    few = judge(**base, decide=at_least, min_units=6)
    assert _fields(few) == {"claim": "c", "model": "m", "verdict": NOT_MEASURABLE, "evidence": {"note": 1, "n_windows": 5},
                            "thresholds": thresholds, "reason": "too few windows: 5 (a verdict needs at least 6)",
                            "corpus": None, "interval": None, "sensitivity": []}  # fmt: skip
    crossed = judge("c", "m", {"x": np.zeros((4, 2))}, mean_effect, at_least, thresholds, over="windows × draws",
                    min_units=(3, 3), crossed=True)  # fmt: skip
    assert (crossed.reason, crossed.evidence) == (
        "too few draws: 2 (a verdict needs at least 3)",
        {"n_draws": 2},
    )
    # descriptive: measured, not judged, with its interval
    described = judge(**base, decide=at_least, min_units=2, descriptive=True, n_boot=50)
    assert (described.verdict, described.reason, described.thresholds, described.sensitivity) == (DESCRIPTIVE,
            "the paper states a condition, not a frequency: measured, not judged", thresholds, [])  # fmt: skip
    assert described.interval == interval and described.evidence["note"] == 1
    # not defined on the data: the interval is kept, no sensitivity
    undefined = judge(**base, decide=never, min_units=2, n_boot=50, strata=np.zeros(5))
    assert (undefined.verdict, undefined.reason, undefined.thresholds, undefined.sensitivity) == (NOT_MEASURABLE,
            "not defined on this data: ratio", thresholds, [])  # fmt: skip
    assert undefined.interval == interval | {"over": "windows (within strata)"}
    assert undefined.evidence["note"] == 1 and undefined.evidence["mean"] == 2.0


def test_too_few_defaults():
    from sinkscope.reproduction.verdicts import too_few

    v = too_few("c", "m", "random draws", 3, 20)
    assert _fields(v) == {"claim": "c", "model": "m", "verdict": "not measurable here", "evidence": {"n_random_draws": 3},
                          "thresholds": {}, "reason": "too few random draws: 3 (a verdict needs at least 20)",
                          "corpus": None, "interval": None, "sensitivity": []}  # fmt: skip


# ---- report: whole lines ---------------------------------------------------------------------------------------


def test_interval_text_whole_lines():
    from sinkscope.reproduction.report import interval_text

    full = {"effect": "delta", "estimate": 0.512345, "low": 0.3, "high": 0.951234, "level": 0.95, "over": "random draws",
            "n": 8}  # fmt: skip
    assert interval_text(full, {}) == "delta 0.5123 [0.3, 0.9512] (95%, 8 random draws)"
    assert interval_text(full | {"low": None}, {}) == "delta 0.5123 (95%, 8 random draws)"
    assert interval_text(full | {"high": None}, {}) == "delta 0.5123 (95%, 8 random draws)"
    assert (
        interval_text(full | {"estimate": 3, "low": 1, "high": 5, "level": 0.9}, {})
        == "delta 3 [1, 5] (90%, 8 random draws)"
    )
    assert interval_text(full | {"estimate": None}, {}) == "delta: undefined"
    assert interval_text(None, {"interval_note": "closed forms"}) == "closed forms"
    assert interval_text(None, {}) == "–" and interval_text({}, {"interval_note": ""}) == "–"


def test_sensitivity_and_evidence_text_whole_lines():
    from sinkscope.reproduction.report import _evidence_text, sensitivity_text

    records = [{"threshold": "δ", "scale": 0.5, "value": 0.05, "verdict": "partly"},
               {"threshold": "δ", "scale": 2.0, "value": 0.2, "verdict": "supported"},
               {"threshold": "head_fraction", "scale": None, "value": None, "verdict": None, "not_varied": "fixed"},
               {"threshold": "n_controls", "scale": 2.0, "value": 40, "verdict": None, "not_varied": "20 drawn"}]  # fmt: skip
    assert sensitivity_text(records) == ("δ ×½ → partly · δ ×2 → supported · head_fraction: not varied (fixed) · "
                                         "n_controls ×2: not varied (20 drawn)")  # fmt: skip
    assert sensitivity_text([]) == ""
    evidence = {"n": 3, "rate": 0.123456, "name": "x", "ok": True, "none": None, "draws": [1, 2],
                "cells": {"a": 0.5, "b": None, "c": [1], "d": {"e": 1}}}  # fmt: skip
    assert (
        _evidence_text(evidence)
        == "n = 3; rate = 0.1235; name = x; ok = True; none = –; cells = {a: 0.5, b: –}"
    )


# ---- judge: the evidence tables and early verdicts, by hand ---------------------------------------------------


def test_judge_small_tables_by_hand():
    from sinkscope.reproduction import judge

    W = 2
    scaled = np.arange(W * 3 * 2).reshape(W, 3, 2)  # δ × ½, 1, 2 after W
    np.testing.assert_array_equal(judge.at_delta(scaled), scaled[:, 1])
    np.testing.assert_array_equal(judge.at_delta(scaled[:, :1]), scaled[:, 0])
    T = np.array([64.0, 128.0, 512.0])
    assert judge.fit_exponent(T, 5.0 * T**0.75) == pytest.approx(0.75)
    ablation = pd.DataFrame([("bos", "highest-hard-sink", 3, 0.5), ("bos", "random", 3, 0.1), ("bos", "random", 3, 0.3),
                             ("bos", "random", 6, 9.0), ("zero", "highest-hard-sink", 3, 7.0), ("zero", "random", 3, 8.0)],
                            columns=["mode", "selection", "n_heads", "delta_loss"])  # fmt: skip
    assert judge.forced_bos(ablation) == {"forced_bos_delta_selected": 0.5, "forced_bos_delta_random_mean": pytest.approx(0.2),
                                          "forced_bos_random_draws": 2}  # fmt: skip
    assert judge.forced_bos(ablation.iloc[[0, 3]]) == {"forced_bos_delta_selected": 0.5,
                                                       "forced_bos_delta_random_mean": None, "forced_bos_random_draws": 0}  # fmt: skip
    assert judge.forced_bos(ablation[ablation["mode"] == "zero"]) == {}
    cells = judge.window_text(ablation.iloc[:3].assign(window_delta=[[0.1, 2.0], np.array([1 / 3]), None]))
    assert list(cells["window_delta"]) == ["0.1 2", "0.333333", ""]
    assert judge.window_text(ablation) is ablation
    # routes: counts summed over windows, one column per route and the unexplained rest, their total per layer
    names = ["bos_sink", "cancellation", "bos_partial", "self_small_value", "low_norm_keys", "unexplained"]
    by_layer = np.arange(2 * 3 * 6).reshape(2, 3, 6)  # (W, L, routes + 1)
    routes = judge.routes_table({"routes_by_layer": by_layer})
    assert list(routes.columns) == [*names, "layer", "n_switched_off"]
    np.testing.assert_array_equal(routes[names].to_numpy(), by_layer[0] + by_layer[1])
    np.testing.assert_array_equal(routes["n_switched_off"], (by_layer[0] + by_layer[1]).sum(1))
    np.testing.assert_array_equal(routes["layer"], [0, 1, 2])
    # value drain per KV group: mean over windows; hard-sink fraction of each query head over W (T − 1) queries,
    # the largest of its group (4 heads, 2 KV groups)
    drain = np.array([[[1.0, 2.0]], [[3.0, 6.0]]])  # (W=2, L=1, KV=2)
    hard = np.zeros((2, 3, 1, 4))
    hard[:, 1, 0] = [[1, 3, 0, 2], [1, 1, 4, 0]]  # δ × 1: per head sums over windows 2, 4, 4, 2
    hard[:, 0, 0] = 99  # other δ: never read
    table = judge.drain_table({"drain": drain, "hard_sink": hard}, T=5)
    assert list(table.columns) == ["layer", "kv_head", "value_drain", "max_hard_sink_frac"]
    np.testing.assert_allclose(table.to_numpy(float), [[0, 0, 2.0, 4 / 8], [0, 1, 4.0, 4 / 8]])
    hard[:, 1, 0] = [[1, 0, 0, 0], [0, 0, 1, 1]]  # sums 1, 0, 1, 1: groups (1, 0) → 1/8, (1, 1) → 1/8
    hard[0, 1, 0, 3] = 2  # sums 1, 0, 1, 3: second group 3/8
    table = judge.drain_table({"drain": drain, "hard_sink": hard}, T=5)
    np.testing.assert_allclose(table["max_hard_sink_frac"], [1 / 8, 3 / 8])


def test_sink_query_table_by_hand():
    from sinkscope.reproduction.judge import sink_query_table

    assert sink_query_table({}).empty
    arrays = {"selected": np.array([0.2, 0.4, 0.9]), "same_heads": np.array([[0.1, 0.3], [0.1, 0.5], [0.1, 0.1]]),
              "random": np.array([[0.0, 0.6], [0.3, 0.0], [0.0, 0.0]])}  # fmt: skip
    table = sink_query_table(arrays)
    assert list(table["selection"]) == [
        "sink queries",
        "same heads, non-sink queries",
        "random heads and queries",
    ]
    assert set(table["mode"]) == {"zero on sink queries"}
    np.testing.assert_allclose(table["delta_loss"], [0.5, 0.2, 0.15])  # per-draw means (0.1, 0.3), (0.1, 0.2)
    np.testing.assert_allclose(table["delta_draw_min"].to_numpy()[1:], [0.1, 0.1])
    np.testing.assert_allclose(table["delta_draw_max"].to_numpy()[1:], [0.3, 0.2])
    assert list(table["n_windows"]) == [3, 3, 3] and list(table["draws"]) == [1, 2, 2]


def test_judge_early_verdicts_carry_claim_model_corpus_and_reason():
    from sinkscope.reproduction import judge

    empty = pd.DataFrame({"mode": ["zero"], "selection": ["random"], "n_heads": [2], "delta_loss": [0.1]})
    cases = [
        (judge.sink_query_verdict("m", "c", {}, empty, 0), "sink_ablation", "no sink-query ablation", {}),
        (judge.ablation_verdicts("m", "c", empty, pd.DataFrame(), 0)[0], "dormant_heads",
         "no per-window lowest-ahon-ln ablation", {}),
        (judge.cost_layers_verdict("m", "c", pd.DataFrame(), 0), "cost_real_layers", "no layer costs", {}),
        (judge.cost_layers_verdict("m", "c", pd.DataFrame({"layer": [0]}), 0), "cost_real_layers", "no layer costs", {}),
    ]  # fmt: skip
    rows = [("zero", "lowest-ahon-ln", 2, 0.5, [0.5, 0.5], 0.0, 2, 3.0, [[0, 1]])]
    rows += [("zero", "random", 2, 0.1, [0.1, 0.1], 0.0, 2, 3.0, [[0, 0]])] * 2
    rows += [("zero", "random, layer-matched", 2, 0.1, [0.1, 0.1], 0.0, 2, 3.0, [[0, 0]])]
    frame = pd.DataFrame(rows, columns=["mode", "selection", "n_heads", "delta_loss", "window_delta", "delta_sem",
                                        "n_windows", "base_loss", "heads"])  # fmt: skip
    from sinkscope.reproduction.matched_heads import LAYER_MATCHED

    frame["selection"] = frame["selection"].replace("random, layer-matched", LAYER_MATCHED)
    mismatch = judge.ablation_verdicts("m", "c", frame, pd.DataFrame({"ahon_ln": [0.1, 0.9]}), 0)[0]
    cases.append((mismatch, "dormant_heads", "the ablation table holds 1 layer-matched and 2 random draws: recompute "
                  "its section", None))  # fmt: skip
    for verdict, claim, reason, evidence in cases:
        assert (verdict.claim, verdict.model, verdict.verdict, verdict.reason, verdict.corpus) == (
            claim, "m", "not measurable here", reason, "c"), verdict  # fmt: skip
        assert verdict.thresholds == {} and verdict.interval is None and verdict.sensitivity == []
        if evidence is not None:
            assert verdict.evidence == evidence
    assert {k: mismatch.evidence[k] for k in ("mode", "n_heads", "base_loss", "n_windows")} == {
        "mode": "zero", "n_heads": 2, "base_loss": 3.0, "n_windows": 2}  # fmt: skip


# ---- experiment sections: the documented shapes and grids ------------------------------------------------------


def test_experiment_section_defaults_follow_their_docstrings():
    from sinkscope.pipelines.cost_regimes import RegimeConfig
    from sinkscope.reproduction.experiment_sections import eviction_shape, experiment_windows, regime_config

    full, quick = (
        stored_config(seq_len=64, windows=32, ablation_windows=8),
        stored_config(quick=True, seq_len=64),
    )
    assert eviction_shape(full) == (128, 16) and eviction_shape(quick) == (64, 16)  # 2T (quick: T), w = T / 4
    assert eviction_shape(stored_config(seq_len=10)) == (20, 2)  # w = ⌊T / 4⌋
    assert experiment_windows(full) == 32 and experiment_windows(replace(quick, ablation_windows=5)) == 5
    assert regime_config(full) == RegimeConfig(seeds=8)  # the command's default grid, 8 draws per cell
    assert regime_config(quick) == RegimeConfig(Vs=(3,), Ks=(1,), Ts=(4,), ranks=(8,), seeds=1)


# ---- report: section rows and links ----------------------------------------------------------------------------


def test_section_data_rows_links_and_figures():
    from sinkscope.reproduction.report import SECTIONS, section_data

    verdict = {"claim": "dense_causal", "model": "m", "verdict": "supported", "evidence": {"n": 2},
               "thresholds": {"min_share": 0.5, "k": 3}, "interval": None, "sensitivity": []}  # fmt: skip
    other = verdict | {"claim": "geometry", "thresholds": {}}
    data = section_data({"verdicts": [verdict, other]}, ["dense.csv"], {"dense_causal", "geometry"})
    assert [s["number"] for s in data] == [s["number"] for s in SECTIONS] == [1, 2, 3, 4, 5, 6]
    claims = {c["id"]: c for s in data for c in s["claims"]}
    dense, geometry = claims["dense_causal"], claims["geometry"]
    assert dense["table"] == "tables/dense.csv" and geometry["table"] is None  # geometry.csv not written
    assert (
        dense["figure"] == "dense_causal" and geometry["figure"] is None
    )  # geometry: a section figure, not a claim's
    (row,) = dense["rows"]
    assert row["thresholds_text"] == "min_share = 0.5, k = 3" and row["evidence_text"] == "n = 2"
    assert row["interval_text"] == "–" and row["sensitivity_text"] == ""
    assert claims["prevalence"]["rows"] == [] and claims["prevalence"]["figure"] is None
    assert all(c["id"] in claims for c in data[1]["claims"]) and "dense_causal" in [
        c["id"] for c in data[1]["claims"]
    ]


def test_ablation_verdicts_forward_every_argument(monkeypatch):
    # judge.sink_query_verdict / ablation_verdicts hand their claim functions the arrays, the evidence record they
    # build (by hand here), seed, fraction, δ and the claim's own variants; the corpus is attached to the result.
    from sinkscope.reproduction import judge
    from sinkscope.reproduction.config import SINK_QUERY_DELTA
    from sinkscope.reproduction.matched_heads import LAYER_MATCHED
    from sinkscope.reproduction.verdicts import Verdict

    calls = {}

    def spy(claim):
        def verdict(model, *args):
            calls[claim] = (model, *args)
            return Verdict(claim, model, "supported")

        return verdict

    monkeypatch.setattr(judge, "sink_ablation_verdict", spy("sink_ablation"))
    monkeypatch.setattr(judge, "dormant_heads_verdict", spy("dormant_heads"))
    arrays = {"n_heads": np.array(3), "selected": np.array([0.5, 0.7]), "same_heads": np.ones((2, 4)),
              "random": np.zeros((2, 4)), "cells_selected": np.array([2.0, 3.0]),
              "cells_same_heads": np.array([1.0, 1.5]), "base": np.array([3.0, 4.0])}  # fmt: skip
    variants = {"sink_ablation__fraction__0.5__selected": np.array([1.0]), "dormant_heads__fraction__2__selected":
                np.array([2.0]), "other": np.array([0.0])}  # fmt: skip
    ablation = pd.DataFrame(
        {"mode": ["zero", "bos"], "selection": ["highest-hard-sink"] * 2, "delta_loss": [0.25, 9.0]}
    )
    v = judge.sink_query_verdict("m", "c", arrays, ablation, 7, 0.2, variants)
    assert (v.claim, v.model, v.corpus) == ("sink_ablation", "m", "c")
    model, selected, same, random, extra, seed, fraction, delta, chosen = calls["sink_ablation"]
    assert (model, seed, fraction, delta) == ("m", 7, 0.2, SINK_QUERY_DELTA)
    assert selected is arrays["selected"] and same is arrays["same_heads"] and random is arrays["random"]
    assert extra == {"n_heads": 3, "n_windows": 2, "cells_selected": 5.0, "cells_same_heads_mean": 2.5,
                     "base_loss": 3.5, "delta_zero_every_query": 0.25}  # fmt: skip
    assert list(chosen) == [("fraction", 0.5)]
    judge.sink_query_verdict("m", "c", arrays, ablation.iloc[1:], 0)
    assert "delta_zero_every_query" not in calls["sink_ablation"][4] and calls["sink_ablation"][6:8] == (
        0.1,
        0.1,
    )
    assert calls["sink_ablation"][8] == {}
    rows = [("lowest-ahon-ln", 2, [0.5, 0.7]), (LAYER_MATCHED, 2, [0.1, 0.2]), (LAYER_MATCHED, 2, [0.3, 0.4]),
            ("random", 2, [0.0, 0.1]), ("random", 2, [0.2, 0.3]), ("random", 4, [9.0, 9.0])]  # fmt: skip
    frame = pd.DataFrame([{"mode": "zero", "selection": s, "n_heads": n, "window_delta": w, "delta_loss": float(np.mean(w)),
                           "base_loss": 3.0, "delta_sem": 0.05, "n_windows": 2, "heads": [[0, 1], [1, 0]]}
                          for s, n, w in rows])  # fmt: skip
    heads = pd.DataFrame({"ahon_ln": [0.2, 0.4, 0.9, 1.5]})
    (v,) = judge.ablation_verdicts("m", "c", frame, heads, 5, 0.3, variants)
    assert (v.claim, v.model, v.corpus) == ("dormant_heads", "m", "c")
    model, selected, matched, random, extra, seed, fraction, chosen = calls["dormant_heads"]
    assert (model, seed, fraction) == ("m", 5, 0.3)
    np.testing.assert_array_equal(selected, [0.5, 0.7])
    np.testing.assert_array_equal(
        matched, [[0.1, 0.3], [0.2, 0.4]]
    )  # (windows, draws), the 4-head set left out
    np.testing.assert_array_equal(random, [[0.0, 0.2], [0.1, 0.3]])
    assert {k: extra[k] for k in ("mode", "n_heads", "heads", "base_loss", "delta_selected_sem", "n_windows")} == {
        "mode": "zero", "n_heads": 2, "heads": [[0, 1], [1, 0]], "base_loss": 3.0, "delta_selected_sem": 0.05,
        "n_windows": 2}  # fmt: skip
    assert set(extra) == {"mode", "n_heads", "heads", "base_loss", "delta_selected_sem", "n_windows",
                          "dormant_frac_by_ahon_ln"}  # fmt: skip
    assert list(chosen) == [("fraction", 2.0)]


def test_write_tables_writes_every_table_a_claim_links(tmp_path):
    # Each claim's `table` (CLAIMS, docs/reproduction.md: "the table under tables/ it was computed from") must be
    # written: the per-model evidence tables over models with `model` first, cost_theory, the extra model-free tables
    # and regime_cells.
    from sinkscope.reproduction.claim_texts import CLAIMS
    from sinkscope.reproduction.report import write_tables

    model_free = {"cost_theory", "regime_cells", "cost_regimes", "cost_boundary_trained"}
    per_model = sorted({spec.table for spec in CLAIMS.values()} - model_free)
    assert len(per_model) == 15  # kv_plan among them
    evidence = {
        m: {t: pd.DataFrame({"value": [k, k + 0.5]}) for t in per_model} for k, m in enumerate(("a", "b"))
    }
    theory = pd.DataFrame({"T": [2], "closed_form": [1.0]})
    extra = {"cost_regimes": pd.DataFrame({"V": [3]}), "cost_boundary_trained": pd.DataFrame({"seed": [0]})}
    names = write_tables(tmp_path, evidence, theory, pd.DataFrame({"init": ["zeros"]}), extra)
    assert {spec.table + ".csv" for spec in CLAIMS.values()} <= set(names)
    assert names[-4:] == [
        "cost_theory.csv",
        "cost_regimes.csv",
        "cost_boundary_trained.csv",
        "regime_cells.csv",
    ]
    for table in per_model:
        written = pd.read_csv(tmp_path / f"{table}.csv")
        assert list(written.columns) == ["model", "value"], table
        assert written.to_dict("list") == {"model": ["a", "a", "b", "b"], "value": [0.0, 0.5, 1.0, 1.5]}, (
            table
        )
    assert pd.read_csv(tmp_path / "cost_boundary_trained.csv").to_dict("list") == {"seed": [0]}
    (tmp_path / "b").mkdir()
    only_b = write_tables(tmp_path / "b", {"a": {}, "b": {"dense": evidence["b"]["dense"]}}, theory)
    assert only_b == ["dense.csv", "cost_theory.csv"]
    assert pd.read_csv(tmp_path / "b" / "dense.csv")["model"].tolist() == ["b", "b"]


class _Drawn(Exception):
    """Raised by the spy in place of drawing windows: the section's compute stops there."""


@pytest.mark.parametrize("quick", [False, True])
def test_each_section_computes_on_the_windows_its_key_records(tmp_path, monkeypatch, quick):
    # The key (checked against the stored stamps above) says which windows a section was computed on; its compute
    # must draw exactly those: corpus, length, count and seed (the seed is how sink_query_section's windows are
    # the ablation's). Certificates: the layers and controls the key records.
    from types import SimpleNamespace

    from sinkscope.corpus import windows as corpus_windows
    from sinkscope.pipelines import head_selection
    from sinkscope.reproduction import evidence

    drawn = []

    def windows(corpus, tokenizer, seq_len, n_windows, *, seed, **kwargs):
        drawn.append((corpus, tokenizer, seq_len, n_windows, seed))
        raise _Drawn

    def certificates(lm, corpus, seq_len, n_windows, layers, n_control, seed):
        drawn.append((corpus, seq_len, n_windows, layers, n_control, seed))
        raise _Drawn

    monkeypatch.setattr(corpus_windows, "windows", windows)
    monkeypatch.setattr(evidence, "certificate_layers", certificates)
    monkeypatch.setattr(
        head_selection, "scores_from_run", lambda directory: pd.DataFrame({"score": [1.0] * 8})
    )
    monkeypatch.setattr(head_selection, "heads_by_score", lambda scores, selection, count: [(0, 0)])
    config = stored_config(
        seed=11,
        smoothing_layer_stride=2,
        windows=12,
        anchor_windows=10,
        ablation_windows=6,
        certificate_windows=7,
        quick=quick,
    )  # every count distinct
    lm = SimpleNamespace(tokenizer="the tokenizer", layers=[None] * 9)
    checked = set()
    for section in model_plan("m", config, tmp_path).in_order():
        key = section.key
        if key["section"] in ("cost-layers", "weights"):
            continue
        drawn.clear()
        with pytest.raises(_Drawn):
            section.compute(lm, tmp_path / "target")
        if key["section"] == "certificates":
            # middle layers of 9: l / 8 in [¼, ¾] → 2 … 6, every layer_stride-th
            assert drawn == [(key["corpus"]["builtin"], key["seq_len"], key["windows"], [2, 4, 6], key["controls"], 11)]
        else:  # the corpus the key names (by its identity: a built-in corpus by name)
            assert drawn == [(key["corpus"]["builtin"], "the tokenizer", key["seq_len"], key["windows"], 11)], (
                section.label
            )
        checked.add(key["section"])
    assert checked == {"analyze", "ablate", "sink-queries", "switch", "evidence", "certificates", "evict", "dense",
                       "prevalence", "switch-assumptions", "kv-plan"} | (set() if quick else {"ablate-sensitivity"})  # fmt: skip


def test_corpus_verdicts_order_corpus_and_the_no_smoothing_verdict():
    # the setup of test_mutants_reproduction_more's oversmoothing test, without the smoothing columns, with routes
    from types import SimpleNamespace

    from sinkscope.reproduction.judge import corpus_verdicts

    W, L, T, R = 8, 4, 16, 6  # R: five routes and the unexplained rest
    arrays = {"nonpos": np.full((W, L), T - 1), "nonpos_control": np.zeros((W, L)), "drain": np.ones((W, L, 1)),
              "hard_sink": np.zeros((W, 1, L, 2)), "mlp_like": np.zeros((W, 1, L))}  # fmt: skip
    routes = np.zeros((W, 3, 3, R))
    routes[:, 1, 1] = [4, 0, 2, 0, 0, 1]  # at δ, τ: per window, queries per route
    routes[:, 0, 0] = 50  # other δ, τ: never read for the mean BOS mass
    mass = np.tile([3.6, 0.0, 1.0, 0.0, 0.0, 0.1], (W, 1))  # summed BOS mass of those queries
    switch = {"curve": np.ones((W, 3, 14, 4)), "routes": routes, "route_bos_mass": mass}
    run = SimpleNamespace(heads=pd.DataFrame({"layer": [0, 1]}), meta={"config": {"tau": 0.1, "delta": 0.1}})
    verdicts = corpus_verdicts("m", "c", run, arrays, switch, T, 1)
    assert [v.claim for v in verdicts] == ["geometry", "oversmoothing", "switch", "switch_routes", "value_drain",
                                           "mlp_like"]  # fmt: skip
    assert {(v.model, v.corpus) for v in verdicts} == {("m", "c")}
    smoothing = verdicts[1]
    assert (smoothing.verdict, smoothing.reason, smoothing.evidence, smoothing.thresholds) == (
        "not measurable here", "no smoothing columns", {}, {})  # fmt: skip
    names = ["bos_sink", "cancellation", "bos_partial", "self_small_value", "low_norm_keys", "unexplained"]
    means = dict(zip(names, [0.9, None, 0.5, None, None, 0.1]))  # 3.6 W / 4 W, 1 W / 2 W, 0.1 W / 1 W
    assert verdicts[3].evidence["mean_bos_mass"] == pytest.approx(means)
