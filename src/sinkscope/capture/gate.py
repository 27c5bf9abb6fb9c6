"""Output gates (Qwen3-Next's gated attention, Qiu et al. 2025), read where the model computes them.

A gated family's query projection (`Family.output_gate`) outputs, per token and per head, the query and a gate of
the head's width, `[q^h | g^h]`; the model multiplies the head's attention output by `σ(g^h)` element-wise. A
forward hook on that projection hands `σ(g)` (B, H, T, dh) of each softmax layer to the callbacks, before the
layer's attention runs. Hooks are removed in `finally`; the model is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor

from sinkscope.models.families import attention_module, softmax_layers
from sinkscope.models.load import LoadedModel

GateCallback = Callable[[int, Tensor], None]


def gate_values(projected: Tensor, n_heads: int, head_dim: int) -> Tensor:
    """`σ(g)` (B, H, T, dh) from the gate projection's output (B, T, H·2·dh), laid out `[q^h | g^h]` per head."""
    B, T, _ = projected.shape
    return torch.sigmoid(projected.view(B, T, n_heads, 2 * head_dim)[..., head_dim:].float()).transpose(1, 2)


@contextmanager
def output_gate_hooks(lm: LoadedModel, callbacks: Sequence[GateCallback]) -> Iterator[None]:
    """Inside the block, every forward pass calls each `callback(layer, σ(g))` for each softmax layer of a gated
    family; a no-op for families without an output gate or without callbacks."""
    family, handles = lm.family, []
    if family.output_gate is None or not callbacks:
        yield
        return
    layout = lm.layout

    def hook(layer: int):
        def read(_module, _args, output):
            gates = gate_values(output.detach(), layout.n_heads, layout.head_dim)
            for callback in callbacks:
                callback(layer, gates)

        return read

    try:
        for layer in softmax_layers(family, lm.layers):
            projection = getattr(attention_module(family, lm.layers[layer]), family.output_gate)
            handles.append(projection.register_forward_hook(hook(layer)))
        yield
    finally:
        for handle in handles:
            handle.remove()
