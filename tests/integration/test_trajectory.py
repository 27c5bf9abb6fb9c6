"""`sinkscope trajectory` over real Hugging Face checkpoint folders: every step's statistics against plain eager
attention maps of that checkpoint (`eager_reference`), reuse and recomputation of cells by content, a crashed
trajectory resuming, and each bad series refused with one line before any model loads."""

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest
import torch
from transformers import AutoTokenizer, LlamaForCausalLM

from sinkscope.cli.main import main
from sinkscope.pipelines.trajectory import emergence

from .eager_reference import eager_reference
from .tiny_checkpoint import save_tiny_llama, write_corpus

STEPS = (0, 10, 25)
HEAD_COLUMNS = ("sink_score", "diag_score", "prev_score", "entropy", "switch_off_frac", "sink_rate")
ARGS = ["--seq-len", "12", "--max-windows", "6", "--batch-size", "4", "--quiet", "--threads", "1"]


def save_step(first: Path, target: Path, seed: int, scale: float = 0.5) -> Path:
    """`first`'s model with seeded noise of `scale` added to every weight, saved at `target` with its tokenizer."""
    model = LlamaForCausalLM.from_pretrained(first)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))
    model.save_pretrained(target, safe_serialization=True)
    AutoTokenizer.from_pretrained(first).save_pretrained(target)
    return target


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    """A Trainer-like output_dir: checkpoint-0, checkpoint-10, checkpoint-25 of one tiny Llama."""
    root = tmp_path_factory.mktemp("run")
    first = save_tiny_llama(root / "checkpoint-0")
    for step in STEPS[1:]:
        save_step(first, root / f"checkpoint-{step}", seed=step)
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("corpus") / "c.txt")


def trajectory_cli(out: Path, corpus: Path, *source: str) -> int:
    return main(["trajectory", *source, "--corpus", str(corpus), "--out", str(out), *ARGS])


def probe_ids(out: Path, checkpoint: Path) -> torch.Tensor:
    """The probe's token ids, cut again with plain tokenizer calls: the first 6 windows of BOS + 11 tokens of the
    corpus's documents joined by EOS (docs/statistics.md § Windows), checked against the recorded sha256."""
    import hashlib

    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    text = Path(json.loads((out / "trajectory.json").read_text())["probe"]["source"]).read_text()
    stream = []
    for document in text.split("\n\n"):
        stream += tokenizer(document, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
    ids = torch.tensor([[tokenizer.bos_token_id, *stream[i * 11 : (i + 1) * 11]] for i in range(6)])
    recorded = json.loads((out / "trajectory.json").read_text())["probe"]["sha256"]
    assert hashlib.sha256(ids.numpy().astype("int64").tobytes()).hexdigest() == recorded
    return ids


def check_against_eager(table: pd.DataFrame, folder: Path, out: Path, steps=STEPS) -> None:
    """Every head's statistics and class, and every layer's sink rate, at every step, against eager maps."""
    ids = probe_ids(out, folder / "checkpoint-0")
    for step in steps:
        model = LlamaForCausalLM.from_pretrained(folder / f"checkpoint-{step}", attn_implementation="eager").eval()
        reference = eager_reference(model, ids, geometry=False)
        rows = table[table["step"] == step].sort_values(["layer", "head"]).reset_index(drop=True)
        expected = reference.heads.sort_values(["layer", "head"]).reset_index(drop=True)
        for column in HEAD_COLUMNS:
            assert rows[column].to_numpy() == pytest.approx(expected[column].to_numpy(), abs=2e-5), (step, column)
        assert rows["head_class"].tolist() == expected["head_class"].tolist(), step
        by_layer = rows.groupby("layer")["layer_sink_rate"].first().to_numpy()
        assert by_layer == pytest.approx(reference.layers["sink_rate"].to_numpy(), abs=1e-9), step


def test_each_step_equals_eager_maps_and_cells_are_reused_by_content(run_folder, corpus, tmp_path, capsys):
    folder = tmp_path / "run"
    shutil.copytree(run_folder, folder)
    out = tmp_path / "traj"
    assert trajectory_cli(out, corpus, "--checkpoints", str(folder)) == 0
    table = pd.read_parquet(out / "trajectory.parquet")
    assert sorted(table["step"].unique()) == list(STEPS)
    check_against_eager(table, folder, out)
    assert (out / "report.html").is_file() and (out / "figures" / "head_classes.png").is_file()
    page = (out / "report.html").read_text()
    assert "Emergence" in page and "Gu et al.&#39;s sink rate: fraction of (window, layer, head)" in page  # hover

    capsys.readouterr()
    assert trajectory_cli(out, corpus, "--checkpoints", str(folder)) == 0  # nothing changed: every cell reused
    assert capsys.readouterr().err.count("finished before, reused") == 3

    save_step(folder / "checkpoint-0", folder / "checkpoint-10", seed=99, scale=1.5)  # new weights at step 10
    assert trajectory_cli(out, corpus, "--checkpoints", str(folder)) == 0
    err = capsys.readouterr().err
    assert err.count("finished before, reused") == 2 and "step 10: model.files.model.safetensors changed since" in err
    check_against_eager(pd.read_parquet(out / "trajectory.parquet"), folder, out, steps=(10,))


def test_a_crashed_trajectory_resumes_at_the_first_missing_checkpoint(run_folder, corpus, tmp_path, monkeypatch,
                                                                      capsys):  # fmt: skip
    import sinkscope.pipelines.analysis as analysis

    real, calls = analysis.analyze, []

    def crash_on_second(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(analysis, "analyze", crash_on_second)
    out = tmp_path / "traj"
    assert trajectory_cli(out, corpus, "--checkpoints", str(run_folder)) == 130
    assert (out / "cells" / "checkpoint-0" / "run.json").is_file()
    assert not (out / "cells" / "checkpoint-10").exists() and not (out / "trajectory.parquet").exists()
    capsys.readouterr()
    assert trajectory_cli(out, corpus, "--checkpoints", str(run_folder)) == 0
    assert capsys.readouterr().err.count("finished before, reused") == 1
    assert len(calls) == 4  # the crashed one, then the two missing checkpoints only
    check_against_eager(pd.read_parquet(out / "trajectory.parquet"), run_folder, out)


def _bad_series(tmp: Path, run_folder: Path, kind: str) -> list[str]:
    """The arguments of one bad series (module doc), built in `tmp`."""
    folder = tmp / kind
    if kind == "unfinished":
        shutil.copytree(run_folder, folder)
        shutil.copytree(run_folder / "checkpoint-25", folder / "tmp-checkpoint-30")
        return ["--checkpoints", str(folder)]
    if kind == "one":
        shutil.copytree(run_folder / "checkpoint-0", folder / "checkpoint-0")
        return ["--checkpoints", str(folder)]
    if kind == "no-step":
        shutil.copytree(run_folder / "checkpoint-0", folder / "final")
        return ["--paths", f"{run_folder / 'checkpoint-0'},{folder / 'final'}"]
    if kind == "architecture":
        shutil.copytree(run_folder / "checkpoint-0", folder / "checkpoint-5")
        config = json.loads((folder / "checkpoint-5" / "config.json").read_text())
        (folder / "checkpoint-5" / "config.json").write_text(json.dumps(config | {"num_hidden_layers": 3}))
        return ["--paths", f"{run_folder / 'checkpoint-0'},{folder / 'checkpoint-5'}"]
    if kind == "tokenizer":
        shutil.copytree(run_folder / "checkpoint-0", folder / "checkpoint-5")
        vocab = json.loads((folder / "checkpoint-5" / "tokenizer.json").read_text())
        vocab["model"]["vocab"] = {("w9" if k == "w8" else "w8" if k == "w9" else k): v
                                   for k, v in vocab["model"]["vocab"].items()}  # fmt: skip
        (folder / "checkpoint-5" / "tokenizer.json").write_text(json.dumps(vocab))
        return ["--paths", f"{run_folder / 'checkpoint-0'},{folder / 'checkpoint-5'}"]
    assert kind == "lab"
    (folder / "checkpoints").mkdir(parents=True)
    (folder / "checkpoints" / "step_000100.safetensors").write_bytes(b"")
    return ["--checkpoints", str(folder)]


@pytest.mark.parametrize("kind, says", [
    ("unfinished", "tmp-checkpoint-30 is still being written by the Trainer"),
    ("one", "a trajectory needs at least two checkpoints; found 1"),
    ("no-step", "cannot tell the training step of"),
    ("architecture", "has another architecture than"),
    ("tokenizer", "has another tokenizer than"),
    ("lab", "is a `sinkscope train-bb` run"),
])  # fmt: skip
def test_a_bad_series_is_one_line_before_any_model_loads(run_folder, corpus, tmp_path, monkeypatch, capsys, kind,
                                                         says):  # fmt: skip
    import sinkscope.models.load as load

    monkeypatch.setattr(load, "load_model", lambda *a, **k: pytest.fail("a model loaded"))
    out = tmp_path / "traj"
    assert trajectory_cli(out, corpus, *_bad_series(tmp_path, run_folder, kind)) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()


def test_emergence_is_the_first_step_after_which_the_score_stays_above():
    """Hand-made scores: a sink that flickers then holds, one above from the first step, one that drops at the
    end (no row), and a diagonal that holds from step 20."""
    steps = [0, 10, 20, 30]
    scores = {(0, 0): ([0.1, 0.5, 0.2, 0.6], [0.0] * 4), (0, 1): ([0.4, 0.5, 0.6, 0.7], [0.0] * 4),
              (1, 0): ([0.9, 0.9, 0.9, 0.1], [0.0] * 4), (1, 1): ([0.0] * 4, [0.1, 0.6, 0.7, 0.8])}  # fmt: skip
    table = pd.DataFrame([{"step": s, "layer": l, "head": h, "sink_score": sink[i], "diag_score": diag[i]}
                          for (l, h), (sink, diag) in scores.items() for i, s in enumerate(steps)])  # fmt: skip
    dated = emergence(table, epsilon=0.3, diagonal=0.5).set_index(["layer", "head", "pattern"])
    assert dated["emergence_step"].to_dict() == {(0, 0, "sink"): 30, (0, 1, "sink"): 0, (1, 1, "diagonal"): 10}
    assert dated["from_first"].to_dict() == {(0, 0, "sink"): False, (0, 1, "sink"): True,
                                             (1, 1, "diagonal"): False}  # fmt: skip


@pytest.mark.parametrize("argv, says", [
    (["--from-log", "{tmp}"], "holds no trajectory.parquet and trajectory.json"),
    (["--paths", "a,b", "--from-log", "{tmp}"], "give exactly one of --checkpoints, --paths, --revisions, --from-log"),
    (["--revisions", "step1,step2", "--out", "{tmp}/o"], "--revisions needs --model"),
    (["--model", "nobody/no-such-model", "--revisions", "step1,step2", "--out", "{tmp}/o"],
     "revision step1 of nobody/no-such-model is not in the local Hugging Face cache"),
])  # fmt: skip
def test_a_bad_command_is_one_line(tmp_path, capsys, argv, says):
    assert main(["trajectory", *[a.format(tmp=tmp_path) for a in argv]]) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and len(err.splitlines()) == 1
