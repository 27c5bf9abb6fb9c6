"""`sinkscope trajectory --train-bb` on a real tiny `sinkscope train-bb` run: every step's sink and diagonal scores
against the attention of that step's saved checkpoint on the regenerated evaluation batch, emergence steps of
hand-set scores, and bad runs refused with one line."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch

from sinkscope.cli.main import main
from sinkscope.synthetic.bigram_backcopy import GBBTask
from sinkscope.synthetic.train import RunConfig, build_model, load_trained_model, train_bb

STEPS = 4
CONFIG = RunConfig().with_overrides({
    "task.vocab_size": 8, "task.n_triggers": 2, "task.length": 10, "model.n_layers": 2, "model.n_heads": 2,
    "model.d_model": 16, "train.steps": STEPS, "train.eval_every": 1, "train.checkpoint_every": 1,
    "train.eval_batch_size": 16, "train.batch_size": 8, "train.warmup_steps": 0, "train.threads": 1,
})  # fmt: skip


@pytest.fixture(scope="module")
def lab_run(tmp_path_factory) -> Path:
    """A train-bb run of 4 steps, evaluated and saved at every step."""
    run = tmp_path_factory.mktemp("lab") / "run"
    train_bb(CONFIG, run, log=False)
    return run


def cli(*args: str) -> int:
    return main(["trajectory", *args])


def test_the_table_is_each_checkpoints_attention_on_the_evaluation_batch(lab_run, tmp_path):
    """Per step, the mean over non-trigger queries of A[t,0] and A[t,t] of the checkpoint's own attention (step 0:
    the seeded initial model) on the evaluation batch sampled again from seed + 1."""
    out = tmp_path / "traj"
    assert cli("--train-bb", str(lab_run), "--out", str(out)) == 0
    table = pd.read_parquet(out / "trajectory.parquet").set_index(["step", "layer", "head"])
    assert sorted(table.index.get_level_values("step").unique()) == list(range(STEPS + 1))
    batch = GBBTask.from_config(CONFIG.task).sample(16, torch.Generator().manual_seed(CONFIG.train.seed + 1))
    for step in range(STEPS + 1):
        model = build_model(CONFIG) if step == 0 else load_trained_model(lab_run, step)[1]
        with torch.no_grad():
            _, traces = model.eval()(batch.inputs)
        for layer, trace in enumerate(traces):
            for head in range(CONFIG.model.n_heads):
                probs = trace.probs[:, head]  # (B, T, T)
                sink = diag = 0.0
                queries = batch.is_plain.nonzero().tolist()
                for b, t in queries:
                    sink += float(probs[b, t, 0])
                    diag += float(probs[b, t, t])
                row = table.loc[(step, layer, head)]
                sink, diag = sink / len(queries), diag / len(queries)
                assert row["sink_score"] == pytest.approx(sink, abs=1e-6)
                assert row["diag_score"] == pytest.approx(diag, abs=1e-6)
                expected = "sink" if sink > 0.3 else "diagonal" if diag > 0.5 else None
                assert (row["head_class"] == expected) if expected else row["head_class"] not in ("sink", "diagonal")
    meta = json.loads((out / "trajectory.json").read_text())
    assert meta["source"] == "train-bb" and meta["probe"]["windows"] == 16
    assert (out / "report.html").is_file() and (out / "figures" / "head_classes.png").is_file()


def test_emergence_of_hand_set_scores(lab_run, tmp_path):
    """The run's metrics.parquet with hand-set scores: a sink that flickers then holds from step 3, a diagonal
    above from step 0, a sink that drops at the end (no row); every other score 0.1 (no row)."""
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(lab_run / "config.json", run / "config.json")
    metrics = pd.read_parquet(lab_run / "metrics.parquet")
    metrics[["bos_attn", "diag_attn"]] = 0.1
    set_scores = {(0, 0): ("bos_attn", [0.1, 0.4, 0.2, 0.35, 0.5]), (1, 1): ("diag_attn", [0.6, 0.7, 0.8, 0.9, 0.95]),
                  (1, 0): ("bos_attn", [0.5, 0.5, 0.5, 0.5, 0.2])}  # fmt: skip
    for (layer, head), (column, scores) in set_scores.items():
        for step, score in enumerate(scores):
            rows = (metrics["step"] == step) & (metrics["layer"] == layer) & (metrics["head"] == head)
            metrics.loc[rows, column] = score
    metrics.to_parquet(run / "metrics.parquet", index=False)
    out = tmp_path / "traj"
    assert cli("--train-bb", str(run), "--out", str(out)) == 0
    dated = pd.read_csv(out / "emergence.csv")
    assert dated[["layer", "head", "pattern", "emergence_step", "from_first"]].values.tolist() == [
        [0, 0, "sink", 3, False], [1, 1, "diagonal", 0, True]]  # fmt: skip
    assert dated["final_score"].tolist() == pytest.approx([0.5, 0.95])
    classes = pd.read_parquet(out / "trajectory.parquet").set_index(["step", "layer", "head"])["head_class"]
    assert [classes[(4, 0, 0)], classes[(2, 0, 0)], classes[(0, 1, 1)]] == ["sink", "dense", "diagonal"]


@pytest.mark.parametrize("kind, says", [
    ("checkpoints", "pass the run as `--train-bb"),
    ("grid", "holds no metrics.parquet and config.json of a train-bb run; pass one run's folder, e.g."),
    ("one-step", "was evaluated at 1 step(s); a trajectory needs two"),
    ("foreign", "is not a train-bb run's config"),
])  # fmt: skip
def test_a_bad_lab_run_is_one_line(lab_run, tmp_path, capsys, kind, says):
    grid = tmp_path / "grid"
    run = grid / "run_a"
    run.mkdir(parents=True)
    shutil.copy(lab_run / "config.json", run / "config.json")
    metrics = pd.read_parquet(lab_run / "metrics.parquet")
    (metrics[metrics.step == STEPS] if kind == "one-step" else metrics).to_parquet(run / "metrics.parquet")
    if kind == "foreign":
        (run / "config.json").write_text(json.dumps({"model_type": "llama"}))
    flag = {"checkpoints": ["--checkpoints", str(lab_run)], "grid": ["--train-bb", str(grid)]}.get(
        kind, ["--train-bb", str(run)])  # fmt: skip
    out = tmp_path / "traj"
    assert cli(*flag, "--out", str(out)) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()
