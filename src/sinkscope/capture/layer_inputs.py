"""Forward hooks that hand each layer's inputs to a callback, removed in `finally` (STYLE practice 4).

For layer l the callback receives `h` (the residual stream entering the block) and `z` (the attention input,
i.e. the output of the block's input norm), both (B, T, d), as SPEC §4 defines them; where the family has no norm
before attention (OLMo-2, post-LN OPT), attention reads `h` itself and `z` is `h`. Hooks read the HF modules in
place: nothing is re-implemented, and the final norm is never mistaken for a layer input.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor

from sinkscope.capture.head_outputs import reach_check
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import input_norm_module
from sinkscope.models.load import LoadedModel

LayerInputCallback = Callable[[int, Tensor, Tensor], None]


@contextmanager
def layer_input_hooks(
    lm: LoadedModel, callback: LayerInputCallback, layers: Sequence[int] | None = None
) -> Iterator[set[int]]:
    """Call `callback(layer, h, z)` for each requested layer during forward passes inside the block.

    Yields the set of layers reached so far (reset by the caller between passes if needed). On exit, hooks are
    removed; if a forward pass of the base model ran but a requested layer was never reached, raises (a silent
    miss would give empty statistics) — also when none of them was reached at all.
    """
    blocks = lm.layers
    wanted = range(len(blocks)) if layers is None else layers
    pending: dict[int, Tensor] = {}
    handles = []

    def block_pre_hook(index: int, reached: set[int], reads_h: bool):
        def hook(_module, args, kwargs):
            h = args[0] if args else kwargs["hidden_states"]
            if reads_h:  # no input norm: the attention input is the residual stream itself
                callback(index, h, h)
                reached.add(index)
            else:
                pending[index] = h

        return hook

    def norm_hook(index: int, reached: set[int]):
        def hook(_module, _args, output):
            z = output[0] if isinstance(output, tuple) else output
            callback(index, pending.pop(index), z)
            reached.add(index)

        return hook

    for index in wanted:
        if not 0 <= index < len(blocks):
            raise SinkscopeError(f"layer {index} does not exist: the model has layers 0..{len(blocks) - 1}")
    with reach_check(lm, wanted, "capture points") as reached:
        try:
            for index in wanted:
                block = blocks[index]
                norm = input_norm_module(lm.family, block)
                handles.append(block.register_forward_pre_hook(
                    block_pre_hook(index, reached, norm is None), with_kwargs=True))  # fmt: skip
                if norm is not None:
                    handles.append(norm.register_forward_hook(norm_hook(index, reached)))
            yield reached
        finally:
            for handle in handles:
                handle.remove()


@torch.no_grad()
def layer_inputs(
    lm: LoadedModel, input_ids: Tensor, layers: Sequence[int] | None = None
) -> dict[int, tuple[Tensor, Tensor]]:
    """`{layer: (h, z)}` for one batch `input_ids` (B, T); each tensor (B, T, d) on the model's device.

    Runs the base model only (no LM head). Holds every requested layer's inputs, so use it for small batches;
    streaming statistics use `layer_input_hooks` directly.
    """
    captured: dict[int, tuple[Tensor, Tensor]] = {}

    def keep(index: int, h: Tensor, z: Tensor) -> None:
        captured[index] = (h.detach(), z.detach())

    with layer_input_hooks(lm, keep, layers):
        lm.base(input_ids=input_ids.to(lm.device), use_cache=False)
    return captured
