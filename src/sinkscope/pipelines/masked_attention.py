"""sdpa attention under an extra boolean mask: a custom attention implementation registered with `transformers`
whose function ANDs the model's own mask (causal, sliding window, padding), built by sdpa and always materialised,
with a mask of its own. `eviction` (one keep mask per window) and `kv_plan_eval` (one plan mask per layer and head)
each supply the attention function and the mask it reads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch import Tensor

from sinkscope.models.load import LoadedModel


def _bool_mask(*args, **kwargs):
    """The model's own mask as sdpa builds it, always materialised (never skipped for plain causal attention), so it
    can be combined with another."""
    from transformers.masking_utils import sdpa_mask

    return sdpa_mask(*args, **{**kwargs, "allow_is_causal_skip": False})


def masked_sdpa(module, query, key, value, attention_mask, allowed: Tensor, **kwargs):
    """sdpa attention where query t may see key j iff `allowed[..., t, j]` AND the model's own mask allows it (a bool
    mask, or an additive one whose allowed entries are 0)."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    if attention_mask is not None:
        allowed = allowed & (attention_mask if attention_mask.dtype == torch.bool else attention_mask == 0)
    return sdpa_attention_forward(module, query, key, value, allowed, **kwargs)


@contextmanager
def custom_attention(lm: LoadedModel, name: str, attention: Callable) -> Iterator[None]:
    """Register `attention` as the implementation `name` (with sdpa's materialised mask) and make it every layer's
    attention inside the block; the previous implementation comes back in `finally`."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(name, attention)
    AttentionMaskInterface.register(name, _bool_mask)
    previous = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation(name)
        yield
    finally:
        lm.model.set_attn_implementation(previous)
