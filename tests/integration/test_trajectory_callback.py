"""`SinkscopeCallback` in a real `transformers.Trainer` on a tiny Llama with attention dropout: training is the same
with and without it (every logged loss and every final weight), its statistics at a step equal plain eager maps
of the checkpoint the Trainer saved at that step, its scalars reach the Trainer's logs, it leaves every random
generator and module mode as found, and `sinkscope trajectory --from-log` draws its folder's page."""

import random

import numpy as np
import pandas as pd
import pytest
import torch
from transformers import (
    LlamaConfig,
    LlamaForCausalLM,
    Trainer,
    TrainerCallback,
    TrainingArguments,
    default_data_collator,
)

from sinkscope.cli.main import main
from sinkscope.errors import SinkscopeError
from sinkscope.integrations import SinkscopeCallback

from .eager_reference import eager_reference
from .tiny_checkpoint import WORDS, save_tiny_llama

HEAD_COLUMNS = ("sink_score", "diag_score", "prev_score", "entropy", "switch_off_frac", "sink_rate")


class Sequences(torch.utils.data.Dataset):
    """32 fixed sequences of 16 token ids, BOS first, their own labels."""

    def __init__(self) -> None:
        generator = torch.Generator().manual_seed(1)
        body = torch.randint(3, len(WORDS), (32, 15), generator=generator)
        self.ids = torch.cat([torch.zeros(32, 1, dtype=torch.long), body], dim=1)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict:
        return {"input_ids": self.ids[index], "labels": self.ids[index]}


class Reporter(TrainerCallback):
    """Stands for a `report_to` integration (TensorBoard, W&B, MLflow): records each log it is handed."""

    def __init__(self) -> None:
        self.logs: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        self.logs.append({**logs, "at": state.global_step})


def train(out, tokenizer, callback: SinkscopeCallback | None, reporter: Reporter | None = None
          ) -> tuple[Trainer, list[float]]:  # fmt: skip
    """Six AdamW steps of a tiny Llama with attention dropout 0.2, a checkpoint every 3 steps, a log every step;
    `reporter` joins the Trainer's callbacks as the reporting integrations do (before any added later)."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=1, attention_dropout=0.2)  # fmt: skip
    args = TrainingArguments(output_dir=str(out), max_steps=6, per_device_train_batch_size=4, learning_rate=1e-2,
                             logging_steps=1, save_steps=3, report_to="none", use_cpu=True, seed=0,
                             dataloader_num_workers=0, disable_tqdm=True, save_only_model=True)  # fmt: skip
    trainer = Trainer(model=LlamaForCausalLM(config), args=args, train_dataset=Sequences(),
                      processing_class=tokenizer, data_collator=default_data_collator,
                      callbacks=[reporter] if reporter else None)  # fmt: skip
    if callback is not None:
        callback.attach(trainer)
    trainer.train()
    return trainer, [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(save_tiny_llama(tmp_path_factory.mktemp("tok") / "m"))


@pytest.fixture(scope="module")
def probe() -> torch.Tensor:
    generator = torch.Generator().manual_seed(2)
    return torch.cat([torch.zeros(5, 1, dtype=torch.long), torch.randint(3, len(WORDS), (5, 11), generator=generator)],
                     dim=1)  # fmt: skip


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tokenizer, probe):
    root = tmp_path_factory.mktemp("trainer")
    plain, plain_losses = train(root / "plain", tokenizer, None)
    callback = SinkscopeCallback(probe, root / "watched" / "sinkscope", every=3)
    reporter = Reporter()
    watched, watched_losses = train(root / "watched", tokenizer, callback, reporter)
    return root, plain, plain_losses, watched, watched_losses, reporter


def test_training_is_the_same_with_and_without_the_callback(trained):
    _, plain, plain_losses, watched, watched_losses, _ = trained
    assert len(plain_losses) == 6 and watched_losses == plain_losses
    for (name, a), (_, b) in zip(plain.model.named_parameters(), watched.model.named_parameters()):
        assert torch.equal(a, b), name


def test_each_analysed_step_equals_eager_maps_of_the_checkpoint_saved_there(trained, probe):
    root, _, _, watched, _, reporter = trained
    table = pd.read_parquet(root / "watched" / "sinkscope" / "trajectory.parquet")
    assert sorted(table["step"].unique()) == [0, 3, 6]
    for step in (3, 6):
        model = LlamaForCausalLM.from_pretrained(root / "watched" / f"checkpoint-{step}",
                                                 attn_implementation="eager").eval()  # fmt: skip
        reference = eager_reference(model, probe, geometry=False)
        rows = table[table["step"] == step].sort_values(["layer", "head"]).reset_index(drop=True)
        expected = reference.heads.sort_values(["layer", "head"]).reset_index(drop=True)
        for column in HEAD_COLUMNS:
            assert rows[column].to_numpy() == pytest.approx(expected[column].to_numpy(), abs=2e-5), (step, column)
        assert rows["head_class"].tolist() == expected["head_class"].tolist()
        logged = next(e for e in watched.state.log_history if e.get("step") == step and "loss" in e)
        reported = next(e for e in reporter.logs if e["at"] == step and "loss" in e)
        assert {k: v for k, v in logged.items() if k.startswith("sinkscope/")} == \
            {k: v for k, v in reported.items() if k.startswith("sinkscope/")}  # fmt: skip
        assert logged["sinkscope/sink_rate"] == pytest.approx(reference.summary["sink_rate"], abs=1e-9)
        assert logged["sinkscope/mean_diag_score"] == pytest.approx(reference.summary["mean_diag_score"], abs=2e-5)
        for layer, rate in enumerate(reference.layers["sink_rate"]):
            assert logged[f"sinkscope/sink_rate/layer_{layer}"] == pytest.approx(rate, abs=1e-9)
    unlogged = [e for e in watched.state.log_history if "loss" in e and e["step"] not in (3, 6)]
    assert unlogged and not any("sinkscope/sink_rate" in e for e in unlogged)


def test_from_log_draws_the_page_of_the_callbacks_folder(trained, tmp_path):
    root = trained[0]
    folder = root / "watched" / "sinkscope"
    assert (folder / "report.html").is_file()  # written at the end of training
    assert main(["trajectory", "--from-log", str(folder), "--out", str(tmp_path / "page")]) == 0
    assert (tmp_path / "page" / "emergence.csv").read_text() == (folder / "emergence.csv").read_text()
    assert "SinkscopeCallback(every=3)" in (tmp_path / "page" / "report.html").read_text()


def test_an_analysis_leaves_every_random_generator_and_module_mode_as_found(tmp_path, tokenizer, probe,
                                                                             monkeypatch):  # fmt: skip
    """An analysis that draws from Python's, NumPy's and torch's generators (as a sampling statistic would)
    leaves them where they were; it runs with every module in eval mode, and afterwards a module left in eval mode
    stays there, the rest in train mode."""
    import sinkscope.integrations.transformers as integration

    real = integration.analyze

    training_during = []

    def drawing(lm, *args, **kwargs):
        random.random(), np.random.rand(), torch.rand(1)
        training_during.extend(module.training for module in lm.model.modules())
        return real(lm, *args, **kwargs)

    monkeypatch.setattr(integration, "analyze", drawing)
    model = LlamaForCausalLM.from_pretrained(save_tiny_llama(tmp_path / "m")).train()
    model.model.layers[1].eval()
    callback = SinkscopeCallback(probe, tmp_path / "out", every=1, tokenizer=tokenizer)
    state = type("State", (), {"global_step": 1, "is_world_process_zero": True, "log_history": []})()
    control = type("Control", (), {"should_log": False})()
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    callback.on_step_end(None, state, control, model=model)
    after = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(5), np.random.seed(5), torch.manual_seed(5)
    assert after == (random.random(), np.random.rand(), torch.rand(1))
    assert training_during and not any(training_during)  # analysed in eval mode: no dropout
    assert control.should_log and "sinkscope/sink_rate" in callback.pending
    modes = {name: module.training for name, module in model.named_modules()}
    assert not any(v for k, v in modes.items() if k.startswith("model.layers.1"))
    assert all(v for k, v in modes.items() if not k.startswith("model.layers.1"))


def test_training_resumed_from_a_checkpoint_keeps_the_earlier_steps(tmp_path, tokenizer, probe):
    """Resumed at step 3, the callback keeps the rows of steps 0 and 3 its folder holds for this probe (step 0 is
    not analysed again: training does not start there), adds step 6, and refuses a folder of another probe."""
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(WORDS), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                         bos_token_id=0, eos_token_id=1)  # fmt: skip
    args = TrainingArguments(output_dir=str(tmp_path / "run"), max_steps=6, per_device_train_batch_size=4,
                             learning_rate=1e-2, logging_steps=1, save_steps=3, report_to="none", use_cpu=True,
                             seed=0, disable_tqdm=True)  # fmt: skip

    def trainer(max_steps: int) -> Trainer:
        return Trainer(model=LlamaForCausalLM(config), args=args.__class__(**{**args.to_dict(), "max_steps": max_steps}),
                       train_dataset=Sequences(), processing_class=tokenizer, data_collator=default_data_collator)

    first = trainer(3)
    SinkscopeCallback(probe, tmp_path / "sinkscope", every=3).attach(first)
    first.train()
    before = pd.read_parquet(tmp_path / "sinkscope" / "trajectory.parquet")
    assert sorted(before["step"].unique()) == [0, 3]
    resumed = trainer(6)
    SinkscopeCallback(probe, tmp_path / "sinkscope", every=3).attach(resumed)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3"))
    after = pd.read_parquet(tmp_path / "sinkscope" / "trajectory.parquet")
    assert sorted(after["step"].unique()) == [0, 3, 6]
    pd.testing.assert_frame_equal(after[after["step"] < 6].reset_index(drop=True), before.reset_index(drop=True))
    other = trainer(6)
    SinkscopeCallback(probe[:, :8], tmp_path / "sinkscope", every=3).attach(other)
    with pytest.raises(SinkscopeError, match="holds a trajectory of another probe"):
        other.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-3"))
