"""The CLI's shared parent parsers, train-bb's generated config flags and the torchrun process group (issue 10).

`data/cli_options.json` holds every subcommand's options as the code before the parent parsers declared them
(dumped with `cli_flags.option_records`): flags, dest, default, type, choices, required, action and rendered
help. The parsers of today must match it option for option; train-bb may only add flags.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_flags import option_records

from sinkscope.cli import train_bb as train_bb_cli
from sinkscope.cli.main import build_parser, main
from sinkscope.synthetic.config import RunConfig

BEFORE = json.loads((Path(__file__).parent / "data" / "cli_options.json").read_text())
# train-bb's two store_true flags became the negative halves of generated --bos/--no-bos and --mlp/--no-mlp.
REPLACED = {"--no-bos": "--bos, --no-bos", "--no-mlp": "--mlp, --no-mlp"}


# The list parsers each command kept privately became one pair in cli/options.py: the same parsing, a new name.
RENAMED_TYPES = {"float_list": "_floats", "int_list": "_ints"}


def records_now() -> dict:
    records = json.loads(json.dumps(option_records(build_parser())))  # as the fixture: JSON types
    for options in records.values():
        for record in options.values():
            record["type"] = RENAMED_TYPES.get(record.get("type"), record.get("type"))
    return records


def flags(records: dict) -> set[str]:
    return {flag for key in records for flag in key.split(", ") if flag.startswith("-")}


# Options added since the fixture was dumped, per command (issue 27: --threads on every command that loads a model).
ADDED = {command: {"--threads"} for command in ("analyze", "view", "ablate", "sweep", "reproduce")}
ADDED["reproduce"] |= {"--random-draws", "--ablation-windows"}  # issue 24: the ablations' draws and windows
# issue 35: the head-class thresholds and what becomes of a corpus's tail
ADDED["analyze"] |= {"--diag-threshold", "--prev-threshold", "--dense-threshold", "--learned-sink-threshold", "--tail"}
ADDED["analyze"] |= {"--attention-precision"}  # issue 33: the flex path's precision
ADDED["reproduce"] |= {"--claims"}  # one claim at full size: only the sections it reads
# Options changed on purpose since the dump (issue 35: `--seq-len whole`; the geometry step's help says what it costs).
CHANGED = {"analyze": {"--seq-len", "--geometry-cap"}, "train-bb": {"--attention"}}  # train-bb: more kinds in its help


def test_every_subcommand_keeps_its_options():
    now, dumped = records_now(), json.loads(json.dumps(BEFORE))  # a copy: the other tests read all of BEFORE
    assert set(dumped) <= set(now)  # commands added since the dump have no record to keep
    for command, added in ADDED.items():
        assert added <= set(now[command]), command
        for key in added:
            del now[command][key]
    for command, changed in CHANGED.items():
        for key in changed:
            del now[command][key], dumped[command][key]
    for command, before in dumped.items():
        if command != "train-bb":
            assert now[command] == before, command
            continue
        for key, record in before.items():
            assert now[command][REPLACED.get(key, key)] == record or key in REPLACED, key
        assert flags(before) <= flags(now[command])


def test_help_lists_the_same_flags(capsys):
    for command, before in BEFORE.items():
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text = capsys.readouterr().out
        listed = {word.strip("[],") for word in text.split() if word.strip("[],").startswith("--")}
        missing = flags(before) - listed
        assert not missing, f"sinkscope {command} --help lacks {missing}"


def test_threads_sets_torchs_thread_count_and_refuses_zero(capsys):
    import torch

    from sinkscope.cli.options import apply_threads

    before = torch.get_num_threads()
    try:
        assert apply_threads(1) == 1 == torch.get_num_threads()
        assert apply_threads(None) == 1  # None leaves the count as it is
    finally:
        torch.set_num_threads(before)
    assert main(["view", "--threads", "0", "--text", "x", "--out", "never.html"]) == 2
    assert "--threads 0 must be 1 or more" in capsys.readouterr().err


def test_a_wrong_flag_prints_the_subcommands_usage_with_the_nearest_flag(tmp_path, capsys):
    """Issue 35: `analyze --diagonal 0.3` printed the top-level usage; it names analyze's usage and its flag."""
    with pytest.raises(SystemExit) as exit:  # (a missing corpus: were the flag ignored, no model would load)
        main(["analyze", "--diagonal", "0.3", "--corpus", str(tmp_path / "none.txt"), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert exit.value.code == 2 and err.startswith("usage: sinkscope analyze ")
    assert "--diag-threshold" in err.splitlines()[-1] and "unrecognized arguments: --diagonal 0.3" in err
    with pytest.raises(SystemExit):
        main(["models", "--bogus"])
    assert capsys.readouterr().err.startswith("usage: sinkscope models ")


def test_version_is_the_installed_distributions(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0 and capsys.readouterr().out.strip() == f"sinkscope {version('sinkscope')}"


def test_head_class_flags_reach_analyze_config():
    from sinkscope.errors import SinkscopeError
    from sinkscope.functional.head_classes import HeadThresholds, classify_head
    from sinkscope.pipelines.analysis import AnalyzeConfig

    args = build_parser().parse_args(["analyze", "--out", "o", "--diag-threshold", "0.2", "--prev-threshold", "0.4",
                                      "--dense-threshold", "0.9", "--learned-sink-threshold", "0.6"])  # fmt: skip
    config = AnalyzeConfig(epsilon=0.25, diagonal=args.diagonal, previous=args.previous, dense=args.dense,
                           learned_sink=args.learned_sink)  # fmt: skip
    assert config.head_thresholds == HeadThresholds(sink=0.25, diagonal=0.2, previous=0.4, dense=0.9, learned_sink=0.6)
    assert AnalyzeConfig(epsilon=0.25).head_thresholds == HeadThresholds(sink=0.25, learned_sink=0.25)
    default = build_parser().parse_args(["analyze", "--out", "o"])
    assert (default.diagonal, default.previous, default.dense, default.learned_sink) == (0.5, 0.5, 0.7, None)
    # a head attending 0.3 to itself: mixed at the default 0.5, diagonal at --diag-threshold 0.2
    assert classify_head(0.1, 0.3, 0.1, 0.5) == "mixed"
    assert classify_head(0.1, 0.3, 0.1, 0.5, thresholds=config.head_thresholds) == "diagonal"
    with pytest.raises(SinkscopeError, match="--dense-threshold 1.5 must lie between 0 and 1"):
        AnalyzeConfig(dense=1.5)


def test_defaults_of_the_shared_options_stay_per_command():
    """The differences kept through parameters: --max-windows 256 / 64 / 64, view's --seq-len None, cost's --model."""
    parser = build_parser()
    parse = lambda *argv: parser.parse_args(list(argv))  # noqa: E731
    assert parse("analyze", "--out", "o").max_windows == 256
    assert parse("ablate", "--out", "o").max_windows == 64
    assert parse("sweep", "--models", "m", "--corpora", "c", "--seq-lens", "8", "--out", "o").max_windows == 64
    assert parse("view", "--text", "t", "--out", "o").seq_len is None
    assert parse("analyze", "--out", "o").seq_len == parse("ablate", "--out", "o").seq_len == 64
    assert parse("cost", "--out", "o").model is None and parse("view", "--text", "t", "--out", "o").model
    assert isinstance(parse("train-bb", "--out", "o").out, Path)


def test_building_the_parser_imports_no_torch():
    code = ("import sys; from sinkscope.cli.main import build_parser; build_parser(); "
            "assert 'torch' not in sys.modules, 'torch imported'")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# One non-default, valid value per RunConfig field, written as a user would type it.
VALUES = {
    "task.vocab_size": "10", "task.n_triggers": "2", "task.copy_offset": "2", "task.p_copy": "0.5",
    "task.dirichlet_alpha": "0.3", "task.bigram_text": "bigram.txt", "task.length": "20", "task.bos": False,
    "task.seed": "7",
    "model.n_layers": "3", "model.n_heads": "2", "model.d_model": "32", "model.mlp": False, "model.mlp_ratio": "2",
    "model.norm": "rmsnorm", "model.norm_position": "post", "model.positional": "rope", "model.attention": "relu",
    "model.init": "torch", "model.init_std": "0.05", "model.embedding_init_std": "0.5",
    "train.steps": "10", "train.batch_size": "4", "train.lr": "0.01", "train.weight_decay": "0.5",
    "train.beta2": "0.95", "train.warmup_steps": "5", "train.final_lr_ratio": "0.5", "train.eval_every": "5",
    "train.eval_batch_size": "8", "train.checkpoint_every": "5", "train.seed": "3", "train.threads": "2",
}  # fmt: skip
NEEDS = {"model.init_std": ["model.init=scaled"], "model.embedding_init_std": ["model.init=scaled"]}


def train_bb_config(argv: list[str]) -> RunConfig:
    args = build_parser().parse_args(["train-bb", "--out", "o", *argv])
    return RunConfig().with_overrides(train_bb_cli._overrides(args))


def config_flag_actions() -> dict:
    (commands,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    parser = commands.choices["train-bb"]
    parser.format_help()  # the config flags are added on first use
    return {action.dest: action for action in parser._actions if "." in action.dest}


def test_train_bb_has_one_flag_with_help_per_config_field():
    fields = {f"{section}.{name}" for section, values in RunConfig().to_dict().items() for name in values}
    actions = config_flag_actions()
    assert set(actions) == fields == set(VALUES)
    assert all(action.help and not action.help.startswith(" (") for action in actions.values())


@pytest.mark.parametrize("key", sorted(VALUES))
def test_train_bb_flag_parses_like_set(key):
    action = config_flag_actions()[key]
    value = VALUES[key]
    extra = [f"--set={item}" for item in NEEDS.get(key, [])]
    if value is False:  # --no-bos, --no-mlp
        flag_argv = [next(flag for flag in action.option_strings if flag.startswith("--no-"))]
        value = "false"
    else:
        flag_argv = [action.option_strings[0], value]
    by_flag = train_bb_config([*flag_argv, *extra])
    by_set = train_bb_config([f"--set={key}={value}", *extra])
    assert by_flag == by_set
    section, name = key.split(".")
    assert getattr(getattr(by_flag, section), name) != getattr(getattr(RunConfig(), section), name)


def test_old_short_flags_and_precedence():
    config = train_bb_config(["--triggers", "2", "--alpha", "0.3", "--layers", "1", "--heads", "2", "--no-bos",
                              "--steps", "10", "--set", "train.steps=20"])  # fmt: skip
    assert (config.task.n_triggers, config.task.dirichlet_alpha, config.model.n_layers, config.model.n_heads) == (
        2, 0.3, 1, 2,
    )  # fmt: skip
    assert config.task.bos is False and config.train.seed == 0 and config.task.seed == 0
    assert config.train.steps == 20  # --set is applied after the flags, as before
    assert train_bb_config(["--seed", "5"]).train.seed == 5 and train_bb_config(["--task-seed", "5"]).task.seed == 5


def _rank(rank: int, port: int, out: str) -> None:
    import torch
    import torch.distributed as dist

    from sinkscope.pipelines.distributed import distributed_context, launched_rank

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE="2",
                      LOCAL_RANK=str(rank))  # fmt: skip
    with distributed_context("cpu") as group:
        total = torch.tensor([float(rank + 1)])
        dist.all_reduce(total)
        inside = dist.is_initialized()
    Path(out, f"{rank}.json").write_text(json.dumps({
        "rank": group.rank, "world": group.world, "device": group.device, "sum": total.item(), "inside": inside,
        "after": dist.is_initialized(), "launched": launched_rank(),
    }))  # fmt: skip


def test_distributed_context_alone_joins_nothing(monkeypatch):
    import torch.distributed as dist

    from sinkscope.pipelines.distributed import distributed_context

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with distributed_context("cuda") as group:
        assert (group.rank, group.world, group.device) == (0, 1, "cuda") and not dist.is_initialized()


def test_distributed_context_joins_and_leaves_the_torchrun_group(tmp_path, free_port):
    import torch.multiprocessing as mp

    mp.spawn(_rank, args=(free_port, str(tmp_path)), nprocs=2)
    got = [json.loads((tmp_path / f"{rank}.json").read_text()) for rank in (0, 1)]
    for rank, seen in enumerate(got):
        assert seen == {"rank": rank, "world": 2, "device": "cpu", "sum": 3.0, "inside": True, "after": False,
                        "launched": rank}  # fmt: skip


def test_cli_holds_no_process_group_calls():
    cli = Path(__file__).resolve().parents[2] / "src" / "sinkscope" / "cli"
    for path in cli.glob("*.py"):
        text = path.read_text()
        for word in ("torch.distributed", "init_process_group", "WORLD_SIZE", "LOCAL_RANK", "os.environ"):
            assert word not in text, f"{path.name} mentions {word}"


def test_models_says_which_torch_build_and_device_commands_use(capsys, monkeypatch):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", "3")  # the thread count an automatic choice follows when it is set
    assert main(["models"]) == 0
    line = capsys.readouterr().out.strip().splitlines()[-1]
    build = f"CUDA {torch.version.cuda} build" if torch.version.cuda else "CPU-only build"
    assert line.startswith(f"torch {torch.__version__} ({build}); commands run on cpu (the default --device) with "
                           "3 CPU threads (OMP_NUM_THREADS=3; --threads N to choose); ")  # fmt: skip
    assert ("CUDA device available" in line) == torch.cuda.is_available()


def test_models_lists_without_importing_torch_on_a_cpu_build():
    """Issue 35: `sinkscope models` took 5 s on a busy machine, most of it importing torch to print a table."""
    import torch

    if torch.version.cuda:
        pytest.skip("a CUDA build imports torch to ask whether a device is visible")
    code = ("import sys; from sinkscope.cli.main import main; main(['models']); "
            "assert 'torch' not in sys.modules, 'torch imported'")  # fmt: skip
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"torch {torch.__version__} (CPU-only build)" in done.stdout and "smollm2-135m (default)" in done.stdout


def test_an_unsupported_model_type_is_refused_pointing_at_the_families(tmp_path, capsys):
    """Issue 35: the refusal ended with 'check its config.json and files', as if the files were broken."""
    from transformers import BertConfig

    BertConfig(num_hidden_layers=1, hidden_size=8, num_attention_heads=2, intermediate_size=8,
               vocab_size=10).save_pretrained(tmp_path / "bert")  # fmt: skip
    corpus = tmp_path / "c.txt"
    corpus.write_text("a b c")
    assert main(["analyze", "--model", str(tmp_path / "bert"), "--corpus", str(corpus), "--out",
                 str(tmp_path / "run")]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("sinkscope analyze: error: model type 'bert' is not supported: sinkscope analyses ")
    assert "llama" in err and "sinkscope/models/families.py (README, Model families)" in err
    assert "config.json" not in err
