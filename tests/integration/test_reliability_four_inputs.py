"""Bad input is one line naming it, before any work, never a traceback: a model none of whose layers has softmax
attention (a Qwen3-Next of linear-attention layers only), grids with no feasible cell (cost-regimes), NaN and ±inf in
every float option of every command and in train-bb's configuration, and a path with a name longer than the file
system allows. The float options are found by asking each command's own parser which flags parse "nan" to a float,
so a flag added later is covered too."""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest
import torch
import transformers as tf
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from sinkscope.cli.main import _subcommand_parser, build_parser

from .test_reliability_two import TINY_BB, one_error, tiny  # noqa: F401 (fixture)
from .tiny_checkpoint import WORDS, write_corpus


@pytest.fixture(scope="module")
def linear_only(tmp_path_factory) -> tuple[Path, Path]:
    """A tiny random Qwen3-Next whose two layers are both linear attention, saved with a tokenizer, and a corpus."""
    root = tmp_path_factory.mktemp("linear")
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")
    torch.manual_seed(0)
    config = tf.Qwen3NextConfig(
        vocab_size=len(WORDS), hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=96, moe_intermediate_size=32, shared_expert_intermediate_size=32,
        num_experts=2, num_experts_per_tok=1, linear_num_value_heads=2, linear_num_key_heads=2,
        linear_key_head_dim=16, linear_value_head_dim=16, max_position_embeddings=64, pad_token_id=None,
        layer_types=["linear_attention", "linear_attention"], bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    tf.Qwen3NextForCausalLM(config).save_pretrained(root / "model")
    tokenizer.save_pretrained(root / "model")
    return root / "model", write_corpus(root / "corpus.txt", documents=20)


@pytest.fixture
def no_forward(monkeypatch):
    """A forward pass of the Qwen3-Next fails the test: the refusal must come before the pass."""

    def tripwire(*args, **kwargs):
        raise AssertionError("the model ran a forward pass before the input was refused")

    monkeypatch.setattr(tf.Qwen3NextForCausalLM, "forward", tripwire)
    monkeypatch.setattr(tf.Qwen3NextModel, "forward", tripwire)


@pytest.mark.parametrize("command", ["analyze", "ablate", "prevalence", "attribute", "switch-assumptions", "sweep"])
def test_a_model_without_softmax_attention_is_refused_before_the_pass(linear_only, tmp_path, capsys, no_forward,
                                                                      command):  # fmt: skip
    model, corpus = linear_only
    out = tmp_path / "out"
    if command == "sweep":
        argv = ["sweep", "--models", str(model), "--corpora", str(corpus), "--seq-lens", "12"]
    else:
        argv = [command, "--model", str(model), "--corpus", str(corpus), "--seq-len", "12"]
    line = one_error(capsys, [*argv, "--max-windows", "2", "--out", str(out)])
    assert "no layer of this qwen3_next model" in line and "all 2 are linear attention" in line
    assert not out.exists()


@pytest.mark.parametrize(("flags", "names"), [
    (["--ks", "5", "--vs", "3"], "--vs 3 --ks 5"),
    (["--ranks", "100", "--ds", "4"], "--ranks 100 --ds 4"),
    (["--ks", "0"], "--ks"),
])  # fmt: skip
def test_cost_regimes_refuses_a_grid_without_a_feasible_cell(tmp_path, capsys, flags, names):
    out = tmp_path / "cr"
    line = one_error(capsys, ["cost-regimes", *flags, "--out", str(out)])
    assert names in line and not out.exists()


def float_flags() -> list[tuple[str, str]]:
    """(command, flag) for every option of every command whose value "nan" parses to a float NaN (alone or in a
    list), found from the parsers themselves."""
    parser = build_parser()
    found = []
    (subparsers,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    for command in subparsers.choices:
        sub = _subcommand_parser(parser, command)
        sub.format_usage()  # adds deferred options (train-bb's config flags)
        for action in sub._actions:
            if not action.option_strings or not callable(action.type):
                continue
            try:
                value = action.type("nan")
            except (ValueError, TypeError, argparse.ArgumentTypeError):
                continue
            values = value if isinstance(value, (tuple, list)) else [value]
            if any(isinstance(v, float) and math.isnan(v) for v in values):
                found.append((command, action.option_strings[-1]))
    return found


REQUIRED = {"sweep": ["--models", "m", "--corpora", "builtin:prose", "--seq-lens", "8"], "view": ["--text", "hi"],
            "report": ["run"], "export": ["run", "--format", "csv"]}  # fmt: skip


def test_the_float_options_found_include_the_known_ones():
    found = set(float_flags())
    assert {("train-bb", "--lr"), ("analyze", "--epsilon"), ("cost", "--kappa"), ("dense", "--lambdas"),
            ("view", "--delta"), ("switch-assumptions", "--min-distance")} <= found  # fmt: skip


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_no_float_option_of_any_command_takes_nan_or_inf(tmp_path, capsys, value):
    for command, flag in float_flags():
        out = tmp_path / f"{command}{flag}"
        text = f"0.5,{value}" if flag in ("--kappa", "--lambdas", "--loss-lambdas", "--fractions", "--shares") \
            else value  # a list option: the bad value second
        line = one_error(capsys, [command, *REQUIRED.get(command, []), "--out", str(out), f"{flag}={text}"])
        assert f"{flag} {float(value)} is not a finite number" in line, (command, flag, line)
        assert not out.exists(), (command, flag)


def test_evict_refuses_a_kept_set_larger_than_the_window(tiny, tmp_path, capsys):  # noqa: F811
    model, corpus = tiny
    out = tmp_path / "ev"
    line = one_error(capsys, ["evict", "--model", str(model), "--corpus", str(corpus), "--seq-len", "16",
                              "--window", "4", "--ks", "0,16", "--max-windows", "2", "--out", str(out)])  # fmt: skip
    assert "--ks 16 keeps more tokens than a window of 16 has" in line and not out.exists()


@pytest.mark.parametrize(("setting", "message"), [
    ("train.lr=NaN", "train lr=nan: use a finite number"),
    ("train.weight_decay=Infinity", "train weight_decay=inf: use a finite number"),
    ("train.beta2=1.5", "train beta2=1.5"),
    ("task.dirichlet_alpha=Infinity", "gBB dirichlet_alpha=inf"),
    ("model.mlp_ratio=0", "model mlp_ratio=0"),
])  # fmt: skip
def test_train_bb_refuses_a_configuration_that_cannot_train(tmp_path, capsys, setting, message):
    out = tmp_path / "bb"
    line = one_error(capsys, ["train-bb", *TINY_BB, "--set", setting, "--out", str(out)])
    assert message in line and not out.exists()


def test_a_sweep_refuses_a_nan_threshold(tmp_path, capsys):
    line = one_error(capsys, ["sweep", "--models", "m", "--corpora", "builtin:prose", "--seq-lens", "8",
                              "--epsilons", "0.3,nan", "--out", str(tmp_path / "sw")])  # fmt: skip
    assert "--epsilons nan" in line


@pytest.mark.parametrize("where", ["--model", "--corpus", "report", "--grid"])
def test_a_path_with_a_name_too_long_for_the_file_system_is_one_line(tiny, tmp_path, capsys, where):  # noqa: F811
    model, corpus = tiny
    long = str(tmp_path / ("x" * 300))
    out = tmp_path / "out"
    argv = {
        "--model": ["analyze", "--model", long, "--corpus", str(corpus), "--out", str(out)],
        "--corpus": ["analyze", "--model", str(model), "--corpus", long, "--out", str(out)],
        "report": ["report", long],
        "--grid": ["train-bb", "--grid", long + ".json", "--out", str(out)],
    }[where]
    line = one_error(capsys, argv)
    assert "more than the file system allows" in line and "is 30" in line  # 300 or 305 bytes
    assert line.split(": error: ")[1].startswith(f"{where if where != 'report' else 'runs'} {long[:20]}")
    assert not out.exists()


def test_a_nan_in_a_grid_file_reaches_the_config_check_and_is_one_line(tmp_path, capsys):
    grid = tmp_path / "g.json"
    grid.write_text(json.dumps({"a": {"train.lr": float("nan")}}))  # JSON NaN reaches the config, not the parser
    line = one_error(capsys, ["train-bb", "--grid", str(grid), *TINY_BB, "--out", str(tmp_path / "g")])
    assert "train lr=nan" in line and not (tmp_path / "g").exists()
