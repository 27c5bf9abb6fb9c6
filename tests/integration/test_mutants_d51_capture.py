"""Draw 51, `capture/`: the bad-input messages that need a model, read whole, each at the first index past its
bound and, where the bound is a length, at the bound itself (tiny random GPT-2 of `test_reference_columns`: 3 layers,
4 heads, 64 positions)."""

from __future__ import annotations

import re

import pytest
import torch

from sinkscope.capture.head_ablation import head_ablation
from sinkscope.capture.layer_inputs import layer_input_hooks
from sinkscope.capture.text_maps import capture_text
from sinkscope.corpus.windows import TokenWindows
from sinkscope.errors import SinkscopeError
from sinkscope.pipelines.analysis import AnalyzeConfig, analyze

from .test_reference_columns import one_thread, tiny, token_windows  # noqa: F401  (one_thread: autouse)


@pytest.fixture(scope="module")
def gpt2():
    return tiny("gpt2")


def _enter(context) -> None:
    with context:
        pass


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda lm: head_ablation(lm, [(3, 0)]), "head 3.0 does not exist: the model has layers 0..2 and heads 0..3"),
        (lambda lm: head_ablation(lm, [(0, 4)], mode="bos"),
         "head 0.4 does not exist: the model has layers 0..2 and heads 0..3"),
        (lambda lm: head_ablation(lm, [(-1, 0)]), "head -1.0 does not exist: the model has layers 0..2 and heads 0..3"),
        (lambda lm: layer_input_hooks(lm, lambda *a: None, [3]), "layer 3 does not exist: the model has layers 0..2"),
        (lambda lm: layer_input_hooks(lm, lambda *a: None, [0, -1]),
         "layer -1 does not exist: the model has layers 0..2"),
    ],
    ids=["layer past the last", "head past the last", "negative layer", "hooked layer past the last",
         "negative hooked layer"],
)  # fmt: skip
def test_a_missing_layer_or_head_is_one_whole_line(gpt2, make, message):
    with pytest.raises(SinkscopeError, match=f"^{re.escape(message)}$"):
        _enter(make(gpt2))


def test_the_last_layer_and_head_exist(gpt2):
    """The bounds themselves: layer 2, head 3 of 3 layers of 4 heads."""
    _enter(head_ablation(gpt2, [(2, 3)]))
    _enter(layer_input_hooks(gpt2, lambda *a: None, [2]))


def test_a_text_longer_than_the_context_is_one_whole_line_and_the_context_itself_fits(gpt2):
    assert gpt2.max_positions == 64
    with pytest.raises(
        SinkscopeError,
        match=re.escape("65 tokens exceed the model's context of 64; pass --seq-len ≤ 64") + "$",
    ):
        capture_text(gpt2, torch.arange(2, 67))
    assert capture_text(gpt2, torch.arange(2, 66)).attn.shape == (3, 4, 64, 64)


def test_an_attention_module_the_forward_pass_skips_is_named_in_one_whole_line():
    """Layer 1's attention returns zeros without calling the attention function (as in test_guards)."""
    lm = tiny("llama")
    lm.layers[1].self_attn.forward = lambda hidden_states, *args, **kwargs: (
        torch.zeros_like(hidden_states),
        None,
    )
    message = ("layers [1] never called the attention function in a forward pass (their attention module computes "
               "attention outside transformers' attention interface), so their statistics cannot be measured; this "
               "model is not supported")  # fmt: skip
    with pytest.raises(SinkscopeError, match=f"^{re.escape(message)}$"):
        analyze(
            lm, TokenWindows(token_windows(), batch_size=4), AnalyzeConfig(geometry_cap=0), progress=False
        )
