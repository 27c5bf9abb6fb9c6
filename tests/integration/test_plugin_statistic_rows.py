"""A user-written statistic (docs/architecture.md "How to add a statistic") that reads one layer at a time
(`stacked = False`) gets, in `on_query_block`, the per-head sums of `QueryBlock.sums` (statistics/statistic.py) for every
layer, equal to the same sums taken over the model's own float64 eager attention maps (`output_attentions`).
These sums reach such a statistic through the feed's batch-end flush (`capture.feed.Feed._flush_layers`),
which no built-in statistic reads one layer at a time."""

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from sinkscope.capture.feed import Feed
from sinkscope.models.families import family_for
from sinkscope.models.load import LoadedModel
from sinkscope.statistics.statistic import QueryBlock, Statistic, Tables

T, B, DELTA = 10, 3, 0.5
SIZES = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
             head_dim=8, vocab_size=101, max_position_embeddings=64)  # fmt: skip
NAMES = ("sink", "diag", "prev", "hard_sink", "row_total")


class RecordRows(Statistic):
    """Adds up, per layer, the `QueryBlock.sums` it is handed."""

    name = "record_rows"

    def __init__(self, n_layers: int) -> None:
        super().__init__()
        self.seen = [{name: 0.0 for name in NAMES} for _ in range(n_layers)]

    def on_query_block(self, layer: int, rows: QueryBlock) -> None:
        for name in NAMES:
            self.seen[layer][name] = self.seen[layer][name] + rows.sums[name].double()

    def compute(self, windows: int) -> Tables:
        return Tables()


def model(attention: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    llama = LlamaForCausalLM(LlamaConfig(**SIZES, attn_implementation=attention)).eval().requires_grad_(False)
    with torch.no_grad():
        for layer in llama.model.layers:
            layer.self_attn.q_proj.weight.mul_(8.0)  # peaked maps: some rows pass the hard-sink threshold
    return llama


def eager_sums(ids: torch.Tensor) -> list[dict[str, torch.Tensor]]:
    """Per layer, the `QueryBlock.sums` of docs/statistics.md over float64 eager maps A (B, H, T, T)."""
    with torch.no_grad():
        maps = model("eager").double()(input_ids=ids, output_attentions=True).attentions
    t = torch.arange(T)
    out = []
    for a in maps:
        col0, diag = a[..., 0], a[..., t, t]
        prev = a[..., t[1:], t[1:] - 1]
        out.append({"sink": col0.sum((0, 2)), "diag": diag[..., 1:].sum((0, 2)), "prev": prev.sum((0, 2)),
                    "hard_sink": (col0[..., 1:] >= 1 - DELTA).double().sum((0, 2)), "row_total": a.sum((0, 2, 3))})  # fmt: skip
    return out


def test_a_one_layer_statistic_reads_each_layers_row_sums():
    llama = model("sdpa")
    lm = LoadedModel(model=llama, tokenizer=None, family=family_for("llama"), identity={})
    ids = torch.randint(0, SIZES["vocab_size"], (B, T), generator=torch.Generator().manual_seed(1))
    statistic = RecordRows(len(lm.layers))
    feed = Feed([statistic], T, lm.layout.group, DELTA)
    with torch.no_grad(), feed.hooks(lm):
        feed.begin_batch(ids)
        lm.base(input_ids=ids, use_cache=False)
        feed.end_batch(B)
    expected = eager_sums(ids)
    assert any(float(e["hard_sink"].sum()) > 0 for e in expected)  # the hard-sink count is not trivially 0
    for layer, (seen, want) in enumerate(zip(statistic.seen, expected, strict=True)):
        for name in NAMES:
            torch.testing.assert_close(seen[name], want[name], atol=1e-4, rtol=0, msg=f"layer {layer} {name}")
