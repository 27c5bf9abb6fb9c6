"""The top-level API is what the README says: each name is the object of its documented module (whatever was
imported before), the configs carry the documented defaults and refuse bad values in one line, and `windows` cuts a
corpus as docs/statistics.md describes. (The README's Python example end to end, against the eager reference:
tests/integration/test_reference_columns.py::test_the_readme_python_example_gives_the_reference_numbers.)"""

import importlib

import pytest
import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

import sinkscope

DOCUMENTED = {  # public name -> module that defines it
    "load_model": "sinkscope.models.load", "windows": "sinkscope.corpus.windows", "analyze": "sinkscope.pipelines.analysis",
    "AnalyzeConfig": "sinkscope.pipelines.analysis", "Run": "sinkscope.pipelines.run", "SinkscopeError": "sinkscope.errors",
    "smoothing_analysis": "sinkscope.pipelines.smoothing", "run_ablation": "sinkscope.pipelines.ablate",
    "AblateConfig": "sinkscope.pipelines.ablate", "run_cost_sweep": "sinkscope.pipelines.cost_sweep",
    "CostSweepConfig": "sinkscope.pipelines.cost_sweep", "sweep": "sinkscope.pipelines.sweep",
    "SweepConfig": "sinkscope.pipelines.sweep", "train_bb": "sinkscope.synthetic.train",
    "RunConfig": "sinkscope.synthetic.config", "TrainConfig": "sinkscope.synthetic.config",
    "reproduce": "sinkscope.reproduction.run", "ReproduceConfig": "sinkscope.reproduction.config",
    "view": "sinkscope.explorer.page", "attention": "sinkscope.pipelines.attention_maps",
    "AttentionMaps": "sinkscope.pipelines.attention_maps",
}  # fmt: skip


def test_each_public_name_is_the_object_of_its_module():
    importlib.import_module("sinkscope.pipelines.analysis")  # importing submodules first must not shadow a name
    importlib.import_module("sinkscope.pipelines.run")
    for name, module in DOCUMENTED.items():
        assert getattr(sinkscope, name) is getattr(importlib.import_module(module), name), name
    assert set(sinkscope.__all__) == set(DOCUMENTED) | {"__version__"}
    with pytest.raises(AttributeError, match="no attribute 'analyse'"):
        sinkscope.analyse  # noqa: B018


def test_dir_lists_the_public_names_for_tab_completion():
    import subprocess
    import sys

    listed = subprocess.run([sys.executable, "-c", "import sinkscope; print(' '.join(dir(sinkscope)))"],
                            check=True, capture_output=True, text=True).stdout.split()  # fmt: skip
    assert set(DOCUMENTED) <= set(listed) and "__version__" in listed  # before any name was used


def test_analyze_config_has_the_documented_defaults_and_refuses_bad_values():
    config = sinkscope.AnalyzeConfig()
    assert (config.epsilon, config.delta, config.tau, config.geometry_cap) == (0.3, 0.1, 0.1, 256)  # docs/statistics.md
    assert sinkscope.AnalyzeConfig(epsilon=0.5, epsilons=(0.1, 0.5, 0.8)).thresholds == (0.5, 0.1, 0.8)
    for bad in (dict(epsilon=0.0), dict(delta=1.0), dict(tau=-0.1), dict(epsilons=(1.5,)), dict(geometry_cap=-1)):
        with pytest.raises(sinkscope.SinkscopeError, match="must"):
            sinkscope.AnalyzeConfig(**bad)


def word_tokenizer() -> PreTrainedTokenizerFast:
    words = ["<bos>", "<eos>", "<unk>", "a", "b", "c"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=core, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>")


def test_windows_are_bos_then_t_minus_1_tokens_of_the_joined_documents(tmp_path):
    """Documents joined with EOS, cut into chunks of T−1 tokens, each after BOS; the incomplete tail in a last
    window of the final T−1 tokens (issue 35), or dropped with `tail="drop"`."""
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a b c a\n\nb b\n\nc a c")  # tokens 3 4 5 3 | 4 4 | 5 3 5
    stream = sinkscope.windows(str(corpus), word_tokenizer(), seq_len=4, batch_size=2)
    got = torch.cat(list(stream))
    joined = [3, 4, 5, 3, 1, 4, 4, 1, 5, 3, 5]  # 11 tokens: 3 chunks of 3, tail of 2
    expected = torch.tensor([[0, *joined[i : i + 3]] for i in (0, 3, 6, 8)])  # the last from token 8: 5 3 5
    assert torch.equal(got, expected)
    dropped = sinkscope.windows(str(corpus), word_tokenizer(), seq_len=4, tail="drop")
    assert torch.equal(torch.cat(list(dropped)), expected[:3])
    with pytest.raises(sinkscope.SinkscopeError, match="--seq-len 1 is too short"):
        sinkscope.windows(str(corpus), word_tokenizer(), seq_len=1)
