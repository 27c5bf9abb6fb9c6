"""The attention function of an analysis: the model's attention, with the statistics' ingredients on the side.

Registered with transformers' attention interface as "sinkscope" (together with a mask function: a custom
attention function registered without one gets no causal mask, and would silently give wrong sink scores).
Five paths compute the layer's output (ours, equal to eager) and what the statistics need; `attention_path`
picks one:

- `capture.flex.flex_parts`, on CUDA for every call: plain causal attention, sliding windows, logit softcaps,
  boolean (padding) masks and additive masks (ALiBi, Falcon), at every length: two or three
  `flex_attention` calls compiled into fused kernels, no map (the module's doc has the identities), in the
  precision `attention_precision` sets.
- `capture.fused_cpu.compiled_attention`, on the CPU for plain causal attention (no mask tensor, no softcap) at
  every length, where its C++ kernel builds (a compiler on the machine, `sgemm_` in torch's library): per block of
  query rows, the logits, softmax, column sums, entropy and output in one pass that keeps the block in the cache.
- `capture.blocks.row_attention`, where the compiled kernel does not build, for plain causal attention up to
  `ROWS_UP_TO_SEQ_LEN` tokens (at every length where the fused path cannot run):
  query blocks of whole rows (one BLAS product for the logits, one fused softmax, one product with v), each
  reduced to `AttentionReadout` inside the block (three entries per row, column sums, entropy) and then dropped.
- `capture.fused.fused_attention`, for longer plain causal windows on the CPU with equal q/v head sizes: two
  calls of PyTorch's fused flash kernel, which never forms even a block of the map. The first gives the output and
  the row log-normaliser `lse_t = log Σ_j exp(s q_t·k_j)`, so any entry `A[t,j] = exp(s q_t·k_j − lse_t)` costs
  O(d); the second is the transposed attention with `−lse_t` folded into the logits, whose log-normaliser is
  the column sum `log c_k = log Σ_{t≥k} A[t,k]` and whose output gives the entropy sum.
- `capture.blocks.blocked_attention`, for everything else (on the CPU: sliding windows shorter than T, padding
  masks, softcapping, additive masks; on CUDA, masked calls whose flex kernels cannot compile): query blocks of
  about 4 MB (256 MB on an accelerator), softmaxed, handed to the observer and multiplied by v, so no more than one block of one layer's attention
  exists at a time.
Modules that no observer watches fall through to the plain sdpa path. Learned sinks (gpt-oss) take the flex path
on CUDA (`flex_parts(sinks=...)`, the sink's mass reported before the layer's rows) and their own block path
(`capture.learned_sink`) elsewhere.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from sinkscope.capture import flex, fused_cpu
from sinkscope.capture.blocks import block_elements, block_rows, blocked_attention, row_attention
from sinkscope.capture.fused import fused_attention
from sinkscope.capture.learned_sink import learned_sink_attention
from sinkscope.capture.readout import AttentionReadout, PackedReadout
from sinkscope.errors import SinkscopeError

NAME = "sinkscope"
# Without the compiled kernel, plain causal windows of at most this many tokens take the rows path, longer ones the
# two flash-kernel calls of the fused path: the rows path was faster up to T = 8192 and the fused path at T = 16384
# (SmolLM2's attention shapes, 1 and 2 threads; docs/performance.md, "Four paths").
ROWS_UP_TO_SEQ_LEN = 8192

BlockObserver = Callable[[int, int, Tensor, Tensor, Tensor], None]
"""`observer(layer, q_start, probs (B,H,Q,K), entropy (B,H,Q) nats, out (B,H,Q,Dv))` for every block."""

LayerObserver = Callable[[int, AttentionReadout | PackedReadout], None]
"""`observer(layer, rows)` once per layer and forward pass, when the layer took the rows or fused path."""


@dataclass(frozen=True)
class _Watch:
    layer: int
    on_block: BlockObserver
    on_values: Callable[[int, Tensor], None]
    on_readout: LayerObserver | None
    on_learned_sink: Callable[[int, int, Tensor], None] | None = None


_watched: dict[int, _Watch] = {}


def attention_path(
    query: Tensor, value: Tensor, attention_mask: Tensor | None, softcap: float | None, window: int | None = None
) -> str:
    """Which path computes this call exactly and fastest: "flex", "compiled", "rows", "fused" or "blocks".

    On CUDA, where this torch has flex_attention, the compiled flex path (`capture.flex`) takes every call: plain
    causal attention, sliding windows, logit softcaps, boolean masks (padding) and additive (float) masks (ALiBi).
    On the CPU plain causal attention (transformers' sdpa mask function returns no mask
    then: no padding, no sliding window shorter than T) without a logit softcap takes the compiled path where its
    kernel builds (`fused_cpu.available()`); without it, the fused path beyond `ROWS_UP_TO_SEQ_LEN` tokens where that
    is exact (equal q and v head sizes, as the CPU flash kernel needs), the rows path otherwise; everything else
    takes the block path."""
    if _flex_here(query):
        return "flex"
    if softcap is not None or attention_mask is not None:
        return "blocks"
    if query.device.type == "cpu" and fused_cpu.available():
        return "compiled"
    flash_ok = query.shape[-1] == value.shape[-1] and query.device.type == "cpu" and value.device.type == "cpu"
    return "fused" if flash_ok and query.shape[-2] > ROWS_UP_TO_SEQ_LEN else "rows"


def _flex_here(query: Tensor) -> bool:
    """Whether the compiled flex kernels run for `query`'s device: CUDA, a torch with flex_attention, no failed
    compilation in this process."""
    return query.device.type == "cuda" and flex.available() and not _flex_failed


_flex_failed = False  # set once when the compiled flex kernels cannot run in this process
_padding_free = False  # whether the forward pass in progress was given no attention mask (padding_free_forwards)
_precision = "exact"  # the flex path's precision (`attention_precision`)
PATH_CALLS: Counter[str] = Counter()  # watched layer calls per path in this process (an analysis records its share)


@contextmanager
def attention_precision(precision: str):
    """Inside the block the flex path computes in `precision` ("exact": float32; "model": the model's dtype with
    float32 accumulation; `capture.flex`); the CPU's paths always compute in float32."""
    global _precision
    if precision not in flex.PRECISIONS:
        raise SinkscopeError(f"attention precision {precision!r} is not one of {', '.join(flex.PRECISIONS)}")
    previous, _precision = _precision, precision
    try:
        yield
    finally:
        _precision = previous


@contextmanager
def padding_free_forwards(base: torch.nn.Module):
    """Inside the block, note before each forward pass of `base` whether it was given an attention mask (host-side:
    the call's arguments, no device read); without one, a sliding-window layer's mask is the window's alone."""

    def note(_module, args, kwargs):
        global _padding_free
        _padding_free = kwargs.get("attention_mask", args[1] if len(args) > 1 else None) is None

    handle = base.register_forward_pre_hook(note, with_kwargs=True)
    try:
        yield
    finally:
        global _padding_free
        handle.remove()
        _padding_free = False


def _layer_rows(path: str, query: Tensor, key: Tensor, value: Tensor, scaling: float, window: int | None = None,
                **form) -> tuple[Tensor, AttentionReadout | PackedReadout] | None:  # fmt: skip
    """Output and `AttentionReadout` (packed on the flex path) by `path` ("flex", "compiled", "rows" or "fused"; `window` and
    `form`, `flex.flex_parts`'s mask, softcap and sinks, on the flex path); where the compiled flex kernels cannot
    run here (no Triton, an unsupported head size), one warning and the rows path for the rest of the process, or
    None for a call that is not plain causal attention (the block path then takes it)."""
    global _flex_failed
    if path == "flex":
        try:
            return flex.flex_parts(query, key, value, scaling, window, precision=_precision, **form)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # compilation errors come in many types (dynamo, inductor, Triton)
            _flex_failed = True
            flex.warn_fallback(error)
            if (window is not None and window < query.shape[-2]) or any(v is not None for v in form.values()):
                return None
            path = "rows"
    paths = {"compiled": fused_cpu.compiled_attention, "rows": row_attention, "fused": fused_attention}
    return paths[path](query, key, value, scaling)


def _flex_form(attention_mask: Tensor | None, window: int | None, softcap: float | None) -> dict:
    """`flex_parts`'s mask, bias and softcap for a call on the flex path: a sliding window in a forward pass without
    an attention mask is the window's own (cheaper) form, any other boolean mask the mask's; a float mask is an
    additive bias (it holds the window and any padding)."""
    if attention_mask is not None and attention_mask.dtype != torch.bool:
        return {"mask": None, "bias": attention_mask, "softcap": softcap}
    padding_free_window = window is not None and _padding_free
    return {"mask": None if padding_free_window else attention_mask, "softcap": softcap}


def sinkscope_attention(
    module: torch.nn.Module,
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    softcap: float | None = None,
    **kwargs,
) -> tuple[Tensor, None]:
    """transformers attention-interface function: for watched modules the path `attention_path` picks where the
    watcher takes `AttentionReadout`, else blocked attention; sdpa for the others. Modules with a learned sink (`s_aux`,
    gpt-oss) take `learned_sink_attention`, watched or not (sdpa has no sink column)."""
    watch = _watched.get(id(module))
    if watch is None and kwargs.get("s_aux") is None:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    scaling = query.shape[-1] ** -0.5 if scaling is None else scaling
    if kwargs.get("s_aux") is not None:  # a learned sink (gpt-oss), which sdpa lacks: flex, or its own block path
        if watch is not None:
            watch.on_values(watch.layer, value)
        window = kwargs.get("sliding_window")
        if watch is not None and watch.on_readout is not None and watch.on_learned_sink is not None and (
                attention_path(query, value, attention_mask, softcap, window) == "flex"):  # fmt: skip
            computed = _layer_rows("flex", query, key, value, scaling, window, sinks=kwargs["s_aux"],
                                   **_flex_form(attention_mask, window, softcap))  # fmt: skip
            if computed is not None:
                out, packed = computed
                watch.on_learned_sink(watch.layer, 0, flex.learned_sink_mass(packed.parts))
                watch.on_readout(watch.layer, packed)
                return out, None

        def on_sink_block(start: int, probs: Tensor, entropy: Tensor, block: Tensor, mass: Tensor) -> None:
            if watch is not None:  # the sink column first, then the block
                if watch.on_learned_sink is not None:
                    watch.on_learned_sink(watch.layer, start, mass)
                watch.on_block(watch.layer, start, probs, entropy, block)

        B, H, T = query.shape[:3]
        rows = block_rows(B, H, T, block_elements(query.device))
        return learned_sink_attention(query, key, value, attention_mask, scaling, kwargs["s_aux"], rows,
                                      on_sink_block), None
    watch.on_values(watch.layer, value)
    window = kwargs.get("sliding_window")
    path = attention_path(query, value, attention_mask, softcap, window) if watch.on_readout is not None else "blocks"
    PATH_CALLS[path] += 1
    form = _flex_form(attention_mask, window, softcap) if path == "flex" else {}
    computed = _layer_rows(path, query, key, value, scaling, window, **form) if path != "blocks" else None
    if computed is not None:
        out, rows = computed
        watch.on_readout(watch.layer, rows)
        return out, None
    layer, observer = watch.layer, watch.on_block
    out = blocked_attention(
        query,
        key,
        value,
        attention_mask,
        scaling,
        softcap,
        lambda start, probs, entropy, block: observer(layer, start, probs, entropy, block),
    )
    return out, None


def register() -> None:
    """Register "sinkscope" as an attention function and its (sdpa-style) mask function; idempotent."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, sinkscope_attention)
    # sdpa_mask returns None for plain causal attention (we then mask causally per block) and a boolean
    # (B, 1, T, T) mask when padding or a sliding window needs one.
    AttentionMaskInterface.register(NAME, sdpa_mask)


@contextmanager
def watch_attention(
    model: torch.nn.Module,
    modules: dict[int, torch.nn.Module],
    observer: BlockObserver,
    on_values: Callable[[int, Tensor], None],
    on_readout: LayerObserver | None = None,
    on_learned_sink: Callable[[int, int, Tensor], None] | None = None,
):
    """Route the attention of `modules` ({layer: attention module}) through this module inside the block: with
    `on_readout`, layers that `attention_path` sends to the rows or fused path report their `AttentionReadout` to it; every
    other layer takes `blocked_attention` and reports each block to `observer`. A module with a learned sink
    (`s_aux`) takes `capture.learned_sink.learned_sink_attention`: each block's sink mass (B, H, Q) goes to
    `on_learned_sink(layer, q_start, mass)` just before the block goes to `observer`.

    Sets the model's attention implementation to "sinkscope" and restores the previous one in `finally`.
    """
    register()
    config = model.config
    previous = config._attn_implementation
    for layer, module in modules.items():
        _watched[id(module)] = _Watch(layer, observer, on_values, on_readout, on_learned_sink)
    try:
        model.set_attn_implementation(NAME)
        yield
    finally:
        for module in modules.values():
            _watched.pop(id(module), None)
        model.set_attn_implementation(previous)
