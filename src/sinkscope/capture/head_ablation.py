"""Head ablation hooks: switch chosen attention heads off inside a `with` block (issue 3, part 3).

Two interventions, both on the input of the attention output projection (`o_proj`, GPT-2's `c_proj`), whose
input is the concatenation of the per-head outputs `o_t = Σ_j A[t,j] v_j` (SPEC §3), `dh` columns per head:

- `zero`: the head's slice is set to 0 (its output is switched off exactly — the paper's hard switch);
- `bos`: the slice is set to `v_0`, the value of position 0 of the head's kv group, i.e. the output the head
  would have with all attention on BOS (Guo et al. 2024). `v_0` comes from a forward hook on the value
  projection (GPT-2's fused `c_attn`: the value block follows the query and key blocks).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from torch import Tensor

from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import projection_channels

Head = tuple[int, int]  # (layer, head)
MODES = ("zero", "bos")


@contextmanager
def head_ablation(lm: LoadedModel, heads: Iterable[Head], mode: str = "zero") -> Iterator[None]:
    """Inside the block, the given heads' outputs are zeroed (`zero`) or replaced by `v_0` (`bos`).

    Hooks: a forward pre-hook on each affected layer's output projection (and, for `bos`, a forward hook on its
    value projection); all removed in `finally`, so the model is unchanged afterwards. Raises if a forward pass
    of the base model ran but an affected layer was never reached (also when none of them was).
    """
    if mode not in MODES:
        raise SinkscopeError(f"ablation mode {mode!r} is not one of {', '.join(MODES)}")
    layout, family, blocks = lm.layout, lm.family, lm.layers
    by_layer: dict[int, list[int]] = defaultdict(list)
    for layer, head in heads:
        if not (0 <= layer < len(blocks) and 0 <= head < layout.n_heads):
            raise SinkscopeError(
                f"head {layer}.{head} does not exist: the model has layers 0..{len(blocks) - 1} and heads "
                f"0..{layout.n_heads - 1}"
            )
        by_layer[layer].append(head)
    dh, group = layout.head_dim, layout.group
    value_channels = projection_channels(family, layout, "v").to(lm.device)  # of the value projection
    first_values: dict[int, Tensor] = {}  # layer → v_0 of every kv head, (B, n_kv, dh)
    reached: set[int] = set()
    passes: list[int] = []  # one entry per forward pass of the base model inside the block
    handles = []

    def value_hook(layer: int):
        def hook(_module, _args, output):
            values = output[..., value_channels]  # (B, T, n_kv*dh)
            first_values[layer] = values[:, 0].reshape(values.shape[0], layout.n_kv_heads, dh)

        return hook

    def output_pre_hook(layer: int, layer_heads: list[int]):
        def hook(_module, args):
            heads_out = args[0].clone()
            B, T = heads_out.shape[:2]
            per_head = heads_out.view(B, T, layout.n_heads, dh)  # (B, T, H, dh)
            for head in layer_heads:
                if mode == "zero":
                    per_head[:, :, head] = 0.0
                else:
                    per_head[:, :, head] = first_values[layer][:, head // group, None]  # (B, 1, dh) over T
            reached.add(layer)
            return (heads_out, *args[1:])

        return hook

    try:
        handles.append(lm.base.register_forward_pre_hook(lambda _module, _args: passes.append(1)))
        for layer, layer_heads in by_layer.items():
            attn = attention_module(family, blocks[layer])
            if mode == "bos":
                handles.append(getattr(attn, family.value_proj).register_forward_hook(value_hook(layer)))
            handles.append(
                getattr(attn, family.output_proj).register_forward_pre_hook(output_pre_hook(layer, layer_heads))
            )
        yield
    finally:
        for handle in handles:
            handle.remove()
    missing = sorted(set(by_layer) - reached)
    if passes and missing:
        raise SinkscopeError(f"ablation hooks of layers {missing} were never reached during the forward pass")
