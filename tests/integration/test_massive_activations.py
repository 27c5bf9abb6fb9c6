"""Massive activations (statistics.massive_activations) against a plain transformers forward with
`output_hidden_states`: a tiny random llama with one planted massive channel at BOS (Sun et al.'s pattern), streamed
in batches of two windows, gives the largest |h| per layer with its position and channel, BOS's and the other
positions' maxima, and the median within the histogram's resolution; its state does not grow with windows."""

import numpy as np
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.feed import Feed
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.statistics.massive_activations import BINS_PER_OCTAVE, TOP, MassiveActivations

T, WINDOWS, BOS, CHANNEL = 10, 5, 2, 5
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, vocab_size=101, max_position_embeddings=64)  # fmt: skip


def tiny() -> LoadedModel:
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**SIZES)).eval().requires_grad_(False)
    model.model.embed_tokens.weight[BOS, CHANNEL] = 300.0  # BOS's residual stream carries one huge channel
    return LoadedModel(model=model, tokenizer=None, family=family_for("llama"), identity={})


def streamed(lm: LoadedModel, ids: torch.Tensor) -> tuple[MassiveActivations, list[int]]:
    statistic = MassiveActivations(len(lm.layers), lm.layout.d_model)
    feed, sizes = Feed([statistic], T), []
    with torch.no_grad(), feed.hooks(lm):
        for batch in ids.split(2):
            feed.begin_batch(batch)
            lm.base(input_ids=batch, use_cache=False)
            feed.end_batch(len(batch))
            sizes.append(sum(t.numel() for t in statistic.state_dict().values()))
    return statistic, sizes


def test_massive_activations_match_hidden_states():
    lm = tiny()
    ids = torch.randint(3, 101, (WINDOWS, T), generator=torch.Generator().manual_seed(1))
    ids[:, 0] = BOS
    statistic, sizes = streamed(lm, ids)
    assert len(set(sizes)) == 1  # the state is the same size after every batch
    tables = statistic.compute(WINDOWS)
    layers, top = tables.layers, tables.extra["massive_activations"]
    with torch.no_grad():
        hidden = lm.model(input_ids=ids, output_hidden_states=True).hidden_states  # [l]: input of layer l, l < L
    for layer in range(len(lm.layers)):
        a = hidden[layer].abs().double()  # (W, T, d)
        row = layers.iloc[layer]
        flat = a.amax(0)  # (T, d): the largest over windows
        t, c = np.unravel_index(int(flat.argmax()), flat.shape)
        assert row.massive_max == float(flat.max())
        assert (row.massive_position, row.massive_channel) == (t, c)
        assert row.massive_bos_max == float(a[:, 0].max()) and row.massive_rest_max == float(a[:, 1:].max())
        median = float(a.flatten().median())
        assert abs(np.log2(row.massive_median / median)) <= 0.5 / BINS_PER_OCTAVE + 1e-9
        assert np.isclose(row.massive_ratio, row.massive_max / row.massive_median)
        channels = flat.amax(0)  # (d,) per channel, over positions
        listed = top[top["layer"] == layer].sort_values("rank")
        assert list(listed["channel"]) == channels.argsort(descending=True)[:TOP].tolist()
        assert np.allclose(listed["value"], channels.sort(descending=True).values[:TOP].numpy())
        assert list(listed["position"]) == flat.argmax(0)[listed["channel"].tolist()].tolist()
        assert np.allclose(listed["bos_value"], a[:, 0].amax(0)[listed["channel"].tolist()].numpy())
    planted = layers.iloc[0]
    assert planted.massive_on_bos and planted.massive_channel == CHANNEL and planted.massive_position == 0
    assert planted.massive_ratio > 100


def test_merged_halves_equal_one_pass():
    lm = tiny()
    ids = torch.randint(3, 101, (WINDOWS, T), generator=torch.Generator().manual_seed(2))
    ids[:, 0] = BOS
    whole, _ = streamed(lm, ids)
    first, _ = streamed(lm, ids[:2])
    second, _ = streamed(lm, ids[2:])
    first.merge(second)
    left, right = whole.compute(WINDOWS), first.compute(WINDOWS)
    assert left.layers.equals(right.layers)
    assert left.extra["massive_activations"].equals(right.extra["massive_activations"])
