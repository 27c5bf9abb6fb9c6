"""A requested capture point that a forward pass never reaches raises a SinkscopeError (STYLE practice 4), also
when none of the requested points is reached; a block with no forward pass raises nothing. Tiny random Llama."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.head_ablation import head_ablation
from sinkscope.capture.layer_inputs import layer_input_hooks, layer_inputs
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.pipelines.dense_attention import mixed_attention


@pytest.fixture
def lm() -> LoadedModel:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=24, num_hidden_layers=3,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=16)  # fmt: skip
    model = LlamaForCausalLM(config).eval().requires_grad_(False)
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})


def _skip_block(lm: LoadedModel, index: int) -> None:
    """Make block `index` pass its input through untouched: its input norm and attention never run (the block's
    own pre-hooks still do, as when a model's forward routes around a submodule)."""
    lm.layers[index].forward = lambda hidden_states, *args, **kwargs: hidden_states


IDS = torch.arange(1, 9)[None]  # (1, 8)


def test_layer_inputs_reached_everywhere_raise_nothing(lm):
    assert sorted(layer_inputs(lm, IDS)) == [0, 1, 2]


@pytest.mark.parametrize("layers", [[1], [0, 1]], ids=["none-reached", "some-reached"])
def test_layer_input_hook_never_reached_raises(lm, layers):
    _skip_block(lm, 1)
    with pytest.raises(SinkscopeError, match=r"layers \[1\] were never reached"):
        layer_inputs(lm, IDS, layers=layers)


def test_layer_input_hooks_without_a_forward_pass_raise_nothing(lm):
    _skip_block(lm, 1)
    with layer_input_hooks(lm, lambda layer, h, z: None, [1]) as reached:
        pass
    assert reached == set()


INTERVENTIONS = {"zero": lambda lm, heads: head_ablation(lm, heads, "zero"),
                 "bos": lambda lm, heads: head_ablation(lm, heads, "bos"),
                 "uniform-mix": lambda lm, heads: mixed_attention(lm, heads, 0.5)}


@pytest.mark.parametrize("intervention", INTERVENTIONS)
@pytest.mark.parametrize("heads", [[(1, 0)], [(0, 0), (1, 1)]], ids=["none-reached", "some-reached"])
def test_head_output_hook_never_reached_raises(lm, heads, intervention):
    _skip_block(lm, 1)
    with pytest.raises(SinkscopeError, match=r"layers \[1\] were never reached"):
        with INTERVENTIONS[intervention](lm, heads):
            lm.model(input_ids=IDS, use_cache=False)


@pytest.mark.parametrize("intervention", INTERVENTIONS)
def test_head_output_hooks_reached_everywhere_raise_nothing(lm, intervention):
    with INTERVENTIONS[intervention](lm, [(0, 0), (1, 1), (2, 0)]):
        lm.model(input_ids=IDS, use_cache=False)


def test_ablation_without_a_forward_pass_raises_nothing(lm):
    with head_ablation(lm, [(1, 0)], "bos"):
        pass
