"""Hooks that rewrite chosen heads' outputs inside a `with` block, and the check that every hooked layer ran.

A head's output is its `dh`-column slice of the attention output projection's input (`o_proj`, GPT-2's `c_proj`),
`o_t = Σ_j A[t,j] v_j` (SPEC §3). `edited_head_outputs` replaces that slice by `edit(layer, head, o, values)`,
where `values` is what `from_values` made of the layer's value projection output `v` (B, T, n_kv, dh) in the same
forward pass (GPT-2's fused `c_attn`: the value block follows the query and key blocks). Ablation (`zero`, `bos`)
and the λ-mix with uniform attention are two such edits.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager

from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import projection_channels

HeadEdit = Callable[[int, int, Tensor, object], Tensor]  # (layer, head, o (B, T, dh), from_values(v)) → new o
ValuesOf = Callable[[Tensor], object]  # v (B, T, n_kv, dh) → what the edits of that layer read


@contextmanager
def reach_check(lm: LoadedModel, wanted: Iterable[int], what: str) -> Iterator[set[int]]:
    """Yield the set that hooks add their layer to when they run. On leaving the block normally, if a forward pass
    of the base model ran inside it but a wanted layer is not in the set, raise one line naming the layers (a silent
    miss would give empty statistics or an intervention that did nothing) — also when none was reached at all."""
    reached: set[int] = set()
    passes: list[int] = []  # one entry per forward pass of the base model inside the block
    handle = lm.base.register_forward_pre_hook(lambda _module, _args: passes.append(1))
    try:
        yield reached
    finally:
        handle.remove()
    missing = sorted(set(wanted) - reached)
    if passes and missing:
        raise SinkscopeError(f"{what} of layers {missing} were never reached during the forward pass")


@contextmanager
def edited_head_outputs(
    lm: LoadedModel, heads: Mapping[int, Sequence[int]], edit: HeadEdit, from_values: ValuesOf | None = None
) -> Iterator[None]:
    """Inside the block, head `h` of layer `l` (for each `h` in `heads[l]`) outputs `edit(l, h, o, from_values(v))`
    instead of `o` (`None` in place of the values when `from_values` is None: no value hook is set).

    Hooks: a forward pre-hook on each listed layer's output projection (and a forward hook on its value
    projection); all removed in `finally`, so the model is unchanged afterwards; `reach_check` on the layers.
    """
    layout, family, blocks = lm.layout, lm.family, lm.layers
    dh = layout.head_dim
    channels = projection_channels(family, layout, "v").to(lm.device) if from_values is not None else None
    read: dict[int, object] = {}  # layer → from_values(v) of the current forward pass
    handles = []

    def value_hook(layer: int):
        def hook(_module, _args, output):
            values = output[..., channels]  # (B, T, n_kv*dh)
            read[layer] = from_values(values.reshape(*values.shape[:2], layout.n_kv_heads, dh))

        return hook

    def output_pre_hook(layer: int, reached: set[int]):
        def hook(_module, args):
            heads_out = args[0].clone()
            per_head = heads_out.view(*heads_out.shape[:2], layout.n_heads, dh)  # (B, T, H, dh)
            for head in heads[layer]:
                per_head[:, :, head] = edit(layer, head, per_head[:, :, head], read.get(layer))
            reached.add(layer)
            return (heads_out, *args[1:])

        return hook

    with reach_check(lm, heads, "head-output hooks") as reached:
        try:
            for layer in heads:
                attn = attention_module(family, blocks[layer])
                if from_values is not None:
                    handles.append(getattr(attn, family.value_proj).register_forward_hook(value_hook(layer)))
                handles.append(getattr(attn, family.output_proj).register_forward_pre_hook(
                    output_pre_hook(layer, reached)))  # fmt: skip
            yield
        finally:
            for handle in handles:
                handle.remove()
