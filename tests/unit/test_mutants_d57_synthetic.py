"""Draw 57's survivors in `synthetic/` (issue 50, item 1), closed against hand values on a one-step run.

- `regime_row`: the predicted cost columns follow `head_costs`' closed form from the summary's margin, and
  `switch_param_norm` is the learned sink logit's |b_h|, read from the checkpoint's parameters.
- `RegimeGrid`: an unknown init names every known label.
- `run_grid`: each run's header line is flushed before the training starts.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest
from tests.unit.test_mutants_d56_open import _FakePool

from sinkscope.errors import SinkscopeError
from sinkscope.synthetic import experiments, regimes
from sinkscope.synthetic.regimes import INITS, REGIME_COLUMNS, RegimeGrid, regime_row
from sinkscope.synthetic.summary import cost_predictions
from sinkscope.synthetic.train import RunConfig, load_trained_model, train_bb

TINY = {"task.vocab_size": 16, "task.length": 17, "model.n_layers": 1, "model.d_model": 16, "train.batch_size": 8,
        "train.eval_batch_size": 8, "train.steps": 1, "train.eval_every": 1, "train.checkpoint_every": 1}  # fmt: skip


@pytest.fixture(scope="module")
def sink_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunConfig, dict, Path]:
    config = RunConfig().with_overrides({**TINY, "model.attention": "softmax_sink"})
    run_dir = tmp_path_factory.mktemp("regime") / "r"
    summary = train_bb(config, run_dir, log=False)
    return config, summary, run_dir


def test_regime_row_predicted_costs_and_switch_parameter_by_hand(sink_run) -> None:
    config, summary, run_dir = sink_run
    summary = copy.deepcopy(summary)
    summary["switch_head"]["pattern"] = "sink"  # the sink's closed form, whatever one step learned
    final = summary["switch_head_final"]
    final.update(sink_margin=2.0, z_norm_sq=4.0, row_mass=0.375, gate_plain=0.625)
    pred = cost_predictions(config.task.vocab_size, config.task.n_triggers)
    row = regime_row("c", 0, config, summary, "gpt2", run_dir)
    assert row["pred_nuclear"] == pytest.approx(2.0 * pred["pred_sink_nuclear_per_kappa"] / 4.0)
    assert row["pred_nuc_over_fro"] == pred["pred_sink_nuc_over_fro"]
    assert (row["row_mass"], row["gate"]) == (0.375, 0.625)
    _, model = load_trained_model(run_dir)
    head = summary["switch_head"]
    logit = dict(model.blocks[head["layer"]].attn.named_parameters())["sink_logit"][head["head"]]
    assert math.isfinite(row["switch_param_norm"])
    assert row["switch_param_norm"] == pytest.approx(abs(float(logit.detach())))


def test_regime_grid_names_every_known_init() -> None:
    with pytest.raises(SinkscopeError, match="use labels of " + ", ".join(INITS) + "$"):
        RegimeGrid(inits=("nope",), bos=(True,), weight_decays=(0.0,), variants=("softmax",), seeds=(0, 1, 2),
                   steps=2)


def test_run_grid_flushes_each_runs_header(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    printed = []
    monkeypatch.setattr("builtins.print", lambda *a, **kw: printed.append((a, kw)))
    monkeypatch.setattr(experiments, "train_bb", lambda config, run_dir, **kw: (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        experiments.run_grid({"r": {}}, RunConfig().with_overrides(TINY), tmp_path, log=True)
    headers = [(a, kw) for a, kw in printed if a and str(a[0]).startswith("== r")]
    assert headers and headers[0][1] == {"flush": True}


class _Stop(Exception):
    pass




def test_docs_list_the_regime_columns_in_order() -> None:
    """docs/experiments.md's "The regime map" names every column of regimes.parquet, in the file's order."""
    text = (Path(__file__).parents[2] / "docs" / "experiments.md").read_text(encoding="utf-8")
    listed = text.split("`regimes.parquet` has one row per cell and seed: `", 1)[1].split("(`init_std` is", 1)[0]
    names = [n.strip(" `\n") for n in listed.replace("` (of the dominant switch head), `", ", ").split(",")]
    assert tuple(names) == REGIME_COLUMNS


@pytest.mark.parametrize("quick", [True, False])
def test_run_regimes_without_a_grid_takes_the_quick_or_the_full_one(monkeypatch, tmp_path: Path, quick) -> None:
    grids = []
    monkeypatch.setattr(regimes, "regime_jobs", lambda base, g, out: grids.append(g) or (_ for _ in ()).throw(_Stop()))
    with pytest.raises(_Stop):
        regimes.run_regimes(out_dir=tmp_path, quick=quick)
    assert grids == [(regimes.QUICK_GRID if quick else regimes.FULL_GRID,)]


@pytest.mark.parametrize("module", [regimes, experiments])
def test_written_tables_carry_no_index_column(module, tmp_path: Path) -> None:
    """A frame whose index is not 0..n−1 (filtered, reordered) is written as its columns only."""
    frame = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", "z"]}, index=[5, 1, 9])
    module._write_parquet(frame, tmp_path / "t.parquet")
    assert pq.read_table(tmp_path / "t.parquet").column_names == ["a", "b"]
    assert list(tmp_path.iterdir()) == [tmp_path / "t.parquet"]


def test_run_regimes_reports_each_finished_run(monkeypatch, tmp_path: Path) -> None:
    """One progress line per run: its count, cell, seed, switch head, pattern, heads line, copy accuracy, seconds."""
    summary = {"switch_head": {"layer": 0, "head": 1, "pattern": "sink"}, "heads_line": "L0H0 dense, L0H1 sink",
               "copy_acc": 0.9, "seconds": 3.4}  # fmt: skip
    monkeypatch.setattr(regimes, "_train_one", lambda config, run_dir: summary)
    monkeypatch.setattr(regimes, "regime_row", lambda *a: (_ for _ in ()).throw(_Stop()))
    grid = RegimeGrid(inits=("gpt2",), bos=(True,), weight_decays=(0.0,), variants=("softmax",), seeds=(0, 1, 2),
                      steps=2)  # fmt: skip
    lines: list[str] = []
    with pytest.raises(_Stop):
        regimes.run_regimes(RunConfig().with_overrides(TINY), tmp_path, grid=grid, progress=lines.append)
    assert [line.split(" ", 1)[0] for line in lines] == ["[1/3]", "[2/3]", "[3/3]"]
    assert lines[2].endswith(" seed 2: L0H1 sink (L0H0 dense, L0H1 sink), copy_acc 0.900, 3s")


@pytest.mark.parametrize(("workers", "pools"), [(1, []), (2, [(2, "spawn")]), (3, [(3, "spawn")])])
def test_run_regimes_trains_in_a_spawn_pool_only_with_several_workers(monkeypatch, tmp_path: Path, workers,
                                                                      pools) -> None:  # fmt: skip
    summary = {"switch_head": {"layer": 0, "head": 0, "pattern": "sink"}, "heads_line": "", "copy_acc": 1.0,
               "seconds": 1.0}  # fmt: skip
    monkeypatch.setattr(regimes, "_train_one", lambda config, run_dir: summary)
    monkeypatch.setattr(regimes, "regime_row", lambda *a: (_ for _ in ()).throw(_Stop()))
    monkeypatch.setattr(regimes, "ProcessPoolExecutor", _FakePool)
    _FakePool.made = []
    grid = RegimeGrid(inits=("gpt2",), bos=(True,), weight_decays=(0.0,), variants=("softmax",), seeds=(0, 1, 2),
                      steps=2)  # fmt: skip
    lines: list[str] = []
    with pytest.raises(_Stop):
        regimes.run_regimes(RunConfig().with_overrides(TINY), tmp_path, grid=grid, workers=workers,
                            progress=lines.append)  # fmt: skip
    assert _FakePool.made == pools and len(lines) == 3


def test_phase_diagram_read_back_from_its_axes() -> None:
    """Two variants × two inits × (BOS, wd 0) and (no BOS, wd 0.1): each square's pattern index, its text, the
    ticks, labels and titles, read back from the figure."""
    from sinkscope.synthetic.regime_figures import phase_diagram
    from sinkscope.synthetic.summary import PATTERNS

    cells = pd.DataFrame([{"variant": v, "init": i, "bos": b, "weight_decay": w, "pattern": p, "agreement": "3/3",
                           "bos_mass": 0.5, "diag_mass": 0.25}
                          for v in ("softmax", "relu") for i in ("gpt2", "torch")
                          for b, w, p in ((False, 0.1, "diagonal"), (True, 0.0, "sink"))])  # fmt: skip
    fig = phase_diagram(cells)
    left, right = fig.axes[:2]
    image = left.get_images()[0].get_array()
    assert image.tolist() == [[PATTERNS.index("sink")] * 2, [PATTERNS.index("diagonal")] * 2]  # BOS rows first
    assert [t.get_text() for t in left.get_yticklabels()] == ["BOS, wd 0", "no BOS, wd 0.1"]
    assert [t.get_text() for t in left.get_xticklabels()] == ["gpt2", "torch"]
    assert left.get_ylabel() == "BOS, weight decay" and right.get_ylabel() == ""
    assert left.get_xlabel() == "initialisation (small → large scale)"
    assert (left.get_title(), right.get_title()) == ("softmax attention", "relu attention")
    assert "sink 3/3\nBOS 0.50 diag 0.25" in [t.get_text() for t in left.texts]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(PATTERNS)
    assert fig._suptitle.get_text().startswith("gBB regime map: pattern of the dominant switch head")
    assert fig._suptitle.get_fontsize() == 9 and left.get_title("center") == "softmax attention"
    assert [t.get_fontsize() for t in left.get_yticklabels()] == [8, 8]


def test_wqk_cost_figure_read_back_from_its_axes() -> None:
    """Three runs in two cells: the rank signatures by cell, the predicted sink and diagonal lines (dashed), and
    measured against predicted nuclear norms on log axes with y = x across the range [0.5, 8] of the runs with
    both norms (the dense head's 16 has no prediction)."""
    from sinkscope.synthetic.regime_figures import COLOURS, wqk_cost_figure

    rows = pd.DataFrame({"cell": ["a", "a", "b", "b"], "pattern": ["sink", "sink", "diagonal", "dense"],
                         "wqk_nuc_over_fro": [1.1, 1.2, 3.0, 2.0], "pred_nuclear": [0.5, 1.0, 4.0, np.nan],
                         "wqk_nuclear": [2.0, 1.0, 8.0, 16.0]})  # fmt: skip (a dense head has no prediction)
    cells = pd.DataFrame({"cell": ["a", "b"], "pred_sink_nuc_over_fro": [1.0, 1.0],
                          "pred_diag_nuc_over_fro": [4.0, 4.0]})  # fmt: skip
    left, right = wqk_cost_figure(rows, cells).axes
    sink_line, diag_line = left.get_lines()
    assert (sink_line.get_ydata()[0], sink_line.get_linestyle(), sink_line.get_color()) == (1.0, "--", COLOURS["sink"])
    assert (diag_line.get_ydata()[0], diag_line.get_linestyle(), diag_line.get_color()) == (4.0, "--",
                                                                                            COLOURS["diagonal"])
    assert (sink_line.get_linewidth(), diag_line.get_linewidth()) == (0.8, 0.8)
    points = {c.get_label(): c.get_offsets().tolist() for c in left.collections}
    assert points == {"sink": [[0, 1.1], [0, 1.2]], "diagonal": [[1, 3.0]], "dense": [[1, 2.0]]}
    assert [t.get_text() for t in left.get_xticklabels()] == ["a", "b"]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["dense", "diagonal", "sink", "sink, predicted",
                                                                       "diagonal, predicted"]
    (identity,) = right.get_lines()
    assert identity.get_xdata().tolist() == [0.5, 8.0] and identity.get_ydata().tolist() == [0.5, 8.0]
    assert (right.get_xscale(), right.get_yscale()) == ("log", "log")
    right_points = {c.get_label(): c.get_offsets().tolist() for c in right.collections}
    assert "dense" in right_points  # drawn at (NaN, 16): masked on a log axis
    del right_points["dense"]
    assert right_points == {"sink": [[0.5, 2.0], [1.0, 1.0]], "diagonal": [[4.0, 8.0]]}
    assert left.get_ylabel() == "‖W_QK‖_* / ‖W_QK‖_F (switch head)" and right.get_ylabel() == "measured ‖W_QK‖_*"
    assert right.get_xlabel() == "predicted ‖W_QK‖_* = κ · cost per κ / mean‖z‖²"
    assert left.get_title() == "Rank signature per run (predicted: sink 1, diagonal ≈ √N)"
    assert right.get_title() == "Nuclear norm vs the minimum-norm prediction"


def test_settings_label_by_hand() -> None:
    """Every setting in one line; MLP-less and BOS-less runs say so."""
    from sinkscope.synthetic.report_page import settings_label

    config = RunConfig().with_overrides({"model.n_layers": 3, "model.n_heads": 2, "model.d_model": 32,
                                         "model.attention": "relu", "task.vocab_size": 20, "task.length": 17,
                                         "train.weight_decay": 0.5, "train.seed": 4})  # fmt: skip
    assert settings_label(config) == ("gBB lab: 3L×2H d=32 relu learned init=gpt2 · V=20 K=3 k=1 p_copy=1.0 · T=17 · "
                                      "wd=0.5 seed 4")  # fmt: skip
    bare = config.with_overrides({"task.bos": False, "model.mlp": False})
    assert settings_label(bare) == ("gBB lab: 3L×2H d=32 relu learned init=gpt2 no-MLP · V=20 K=3 k=1 p_copy=1.0 "
                                    "no-BOS · T=17 · wd=0.5 seed 4")  # fmt: skip


@pytest.mark.parametrize(("pattern", "margin"), [("diagonal", 3.0), ("sink", 2.0)])
def test_head_costs_use_the_patterns_own_margin_and_prediction(pattern: str, margin: float) -> None:
    """A head with sink margin 2, diagonal margin 3, ‖z‖² 4, nuclear 6 over Frobenius 2: the prediction
    κ · cost per κ / ‖z‖² with the margin and the cost of the pattern the head uses."""
    from types import SimpleNamespace

    from sinkscope.synthetic.summary import head_costs

    pred = {"pred_sink_nuclear_per_kappa": 1.0, "pred_diag_nuclear_per_kappa": 8.0, "pred_sink_nuc_over_fro": 1.0,
            "pred_diag_nuc_over_fro": 5.0}  # fmt: skip
    row = SimpleNamespace(wqk_nuclear=6.0, wqk_frobenius=2.0, sink_margin=2.0, diag_margin=3.0, z_norm_sq=4.0)
    key = "diag" if pattern == "diagonal" else "sink"
    assert head_costs(row, pattern, pred) == {"wqk_nuc_over_fro": 3.0,
                                              "pred_nuclear": margin * pred[f"pred_{key}_nuclear_per_kappa"] / 4.0,
                                              "pred_nuc_over_fro": pred[f"pred_{key}_nuc_over_fro"]}  # fmt: skip


def test_a_post_norm_block_attends_over_its_raw_input() -> None:
    """Post-norm (norm_position "post"): the attention reads the residual stream itself (z = x), and the output is
    norm1(x + attention); pre-norm reads norm1(x)."""
    import torch

    from sinkscope.synthetic.tiny_transformer import Block, TinyTransformerConfig

    torch.manual_seed(0)
    x = torch.randn(2, 5, 16) * 3 + 1
    post = Block(TinyTransformerConfig(d_model=16, n_heads=2, norm_position="post", mlp=False))
    out, trace = post(x)
    assert torch.equal(trace.z, x)
    attn, *_ = post.attn(x)
    torch.testing.assert_close(out, post.norm1(x + attn))
    pre = Block(TinyTransformerConfig(d_model=16, n_heads=2, norm_position="pre", mlp=False))
    _, trace = pre(x)
    torch.testing.assert_close(trace.z, pre.norm1(x))


def test_norms_carry_no_bias_and_only_a_pre_norm_model_has_a_final_norm() -> None:
    """The lab's LayerNorm has a gain and no bias (`bias=False`); a post-norm model's last block already ends in a
    norm, so its logits are the unembedding of the last block's output, with no final norm."""
    import torch

    from sinkscope.synthetic.tiny_transformer import TinyTransformer, TinyTransformerConfig, make_norm

    norm = make_norm("layernorm", 8)
    assert norm.bias is None and [name for name, _ in norm.named_parameters()] == ["weight"]
    torch.manual_seed(0)
    post = TinyTransformer(TinyTransformerConfig(d_model=16, n_heads=2, norm_position="post"), 8, 8, 12)
    assert post.norm_f is None
    ids = torch.randint(0, 8, (2, 6))
    logits, traces = post(ids)
    x = post.tok_emb(ids) + post.pos_emb(torch.arange(6))
    for block in post.blocks:
        x, _ = block(x)
    torch.testing.assert_close(logits, post.unembed(x))
    pre = TinyTransformer(TinyTransformerConfig(d_model=16, n_heads=2), 8, 8, 12)
    assert pre.norm_f is not None


def test_config_bounds_and_messages_at_their_edges() -> None:
    """A copy probability of 0 (never copy) and of 1 are probabilities; RoPE needs an even head dimension, said in
    one line."""
    from sinkscope.synthetic.bigram_backcopy import GBBConfig
    from sinkscope.synthetic.tiny_transformer import TinyTransformerConfig

    assert GBBConfig(p_copy=0.0).p_copy == 0.0 and GBBConfig(p_copy=1.0).p_copy == 1.0
    with pytest.raises(SinkscopeError, match=r"^gBB p_copy=1.5: use a probability in \[0, 1\]$"):
        GBBConfig(p_copy=1.5)
    with pytest.raises(SinkscopeError, match="^model positional='rope': needs an even head dimension d_model/n_heads$"):
        TinyTransformerConfig(d_model=6, n_heads=2, positional="rope")
