"""Forward hooks on each layer's attention module and post-attention norm: what the residual stream receives."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from functools import partial

from torch import Tensor

from sinkscope.models.families import attention_module, post_attention_norm_module
from sinkscope.models.load import LoadedModel


@contextmanager
def attention_output_hooks(
    lm: LoadedModel,
    layers: Sequence[int],
    on_output: Callable[[int, Tensor], None],
    on_post_norm: Callable[[int, Tensor], None],
) -> Iterator[None]:
    """Call `on_output(layer, out)` with each layer's attention output (B, T, d) and, where the family has a
    post-attention norm (Gemma 2/3), `on_post_norm(layer, update)` with that norm's output; removed in `finally`."""
    handles = []

    def output_hook(receive):
        def hook(_module, _args, output):
            receive(output[0] if isinstance(output, tuple) else output)

        return hook

    try:
        for index in layers:
            block = lm.layers[index]
            handles.append(attention_module(lm.family, block).register_forward_hook(output_hook(partial(on_output, index))))
            post = post_attention_norm_module(lm.family, block)
            if post is not None:
                handles.append(post.register_forward_hook(output_hook(partial(on_post_norm, index))))
        yield
    finally:
        for handle in handles:
            handle.remove()
