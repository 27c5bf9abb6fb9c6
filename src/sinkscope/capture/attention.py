"""The attention function of an analysis: the model's attention, with the statistics' ingredients on the side.

Registered with transformers' attention interface as "sinkscope" (together with a mask function: a custom
attention function registered without one gets no causal mask, and would silently give wrong sink scores).
Four paths compute the layer's output (ours, equal to eager) and what the statistics need; `attention_path`
picks one:

- `capture.flex.flex_parts`, on CUDA for plain causal attention at every length: two `flex_attention` calls
  compiled into fused kernels, no map (the module's doc has the identities).
- `row_attention`, for plain causal attention (no mask tensor, no softcap) up to `ROWS_UP_TO_SEQ_LEN` tokens
  (at every length where the fused path cannot run):
  query blocks of whole rows (one BLAS product for the logits, one fused softmax, one product with v), each
  reduced to `AttentionReadout` inside the block (three entries per row, column sums, entropy) and then dropped.
- `fused_attention`, for longer plain causal windows on the CPU with equal q/v head sizes: two calls of
  PyTorch's fused flash kernel, which never forms even a block of the map. The first gives the output and the
  row log-normaliser `lse_t = log Σ_j exp(s q_t·k_j)`, so any entry `A[t,j] = exp(s q_t·k_j − lse_t)` costs
  O(d); the second is the transposed attention with `−lse_t` folded into the logits, whose log-normaliser is
  the column sum `log c_k = log Σ_{t≥k} A[t,k]` and whose output gives the entropy sum.
- `blocked_attention`, for everything else (sliding windows shorter than T, padding masks, softcapping):
  query blocks of about 4 MB (256 MB on an accelerator), softmaxed, handed to the observer and multiplied by v, so no more than one block
  of one layer's attention exists at a time.
Modules that no observer watches fall through to the plain sdpa path.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import Tensor

from sinkscope.capture import flex
from sinkscope.capture.learned_sink import learned_sink_attention
from sinkscope.capture.readout import AttentionReadout, PackedReadout
from sinkscope.functional.patterns import entropy_weights

NAME = "sinkscope"
# Elements of one (B, H, Q, K) block of logits on the CPU (4 MB in float32): small enough to stay near the cache,
# large enough for the q·kᵀ product to run at matrix speed.
BLOCK_ELEMENTS = 1 << 20
# On an accelerator a block should fill the device: 256 MB of float32 logits (and as much again for their
# softmax) keeps a block to tens of kernel launches per layer instead of one query row per block, and stays
# well inside the 2× of the forward pass's own activation memory at the lengths analysed.
DEVICE_BLOCK_ELEMENTS = 1 << 26

# Plain causal windows of at most this many tokens take the rows path, longer ones the two flash-kernel calls of
# the fused path: the rows path was faster up to T = 8192 and the fused path at T = 16384 (SmolLM2's attention
# shapes, 1 and 2 threads; docs/performance.md, "Three paths").
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


def block_elements(device: torch.device) -> int:
    """The block budget of `device`: `BLOCK_ELEMENTS` on the CPU, `DEVICE_BLOCK_ELEMENTS` elsewhere."""
    return BLOCK_ELEMENTS if device.type == "cpu" else DEVICE_BLOCK_ELEMENTS


def block_rows(batch: int, heads: int, seq_len: int, elements: int = BLOCK_ELEMENTS) -> int:
    """Queries per block so that one block of logits holds about `elements` numbers (at least one row)."""
    return max(1, min(seq_len, elements // max(1, batch * heads * seq_len)))


def blocked_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attention_mask: Tensor | None,
    scaling: float,
    softcap: float | None,
    on_block: Callable[[int, Tensor, Tensor, Tensor], None],
) -> Tensor:
    """Causal softmax attention in query blocks; returns the output (B, T, H, Dv) like transformers does.

    `query` (B, H, T, D), `key`/`value` (B, KV, T, D): query head h reads kv head `h // (H // KV)` (GQA) without
    copying keys. `attention_mask`: None (plain causal), boolean (True = attend) or additive float, broadcastable
    to (B, 1, T, T). `on_block(q_start, probs, entropy, out)` sees each block; `entropy` is the row entropy in
    nats computed from the shifted logits (`H = log Z - Σ p s'`), which saves a logarithm over the block.
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    out = torch.empty(B, T, H, Dv, dtype=query.dtype, device=query.device)
    step = block_rows(B, H, T, block_elements(query.device))
    floor = torch.finfo(torch.float32).min
    keys, values = key.float(), value.float()  # once per layer, not per block
    for start in range(0, T, step):
        stop = min(T, start + step)
        Q = stop - start
        q = query[:, :, start:stop].float().reshape(B, KV, group * Q, D)  # heads of a group side by side
        k = keys[:, :, :stop]  # keys after the last query are causally masked: skip them
        logits = torch.matmul(q, k.transpose(-1, -2)).mul_(scaling).view(B, H, Q, stop)
        if softcap is not None:
            logits = torch.tanh(logits / softcap).mul_(softcap)
        # Keys before `start` are visible to every query of the block; only the block's own corner needs the mask.
        if attention_mask is None:
            corner = logits[..., start:stop]
            corner.masked_fill_(torch.ones(Q, Q, dtype=torch.bool, device=query.device).triu(1), floor)
        elif attention_mask.dtype == torch.bool:
            logits.masked_fill_(~attention_mask[:, :, start:stop, :stop], floor)
        else:
            logits.add_(attention_mask[:, :, start:stop, :stop]).clamp_(min=floor)
        logits.sub_(logits.amax(-1, keepdim=True))  # shifted logits s' ≤ 0
        probs = logits.exp()
        total = probs.sum(-1, keepdim=True)
        probs.div_(total)
        # Row entropy H = log Z - Σ_j p_j s'_j (masked s' is the float32 floor, where p = 0 adds nothing).
        entropy = total.squeeze(-1).log() - torch.einsum("...k,...k->...", probs, logits)
        block = torch.matmul(probs.view(B, KV, group * Q, stop), values[:, :, :stop])
        block = block.view(B, H, Q, Dv)
        on_block(start, probs, entropy, block)
        out[:, start:stop] = block.transpose(1, 2).to(out.dtype)
    return out


def host_reads_are_cheap(device: torch.device) -> bool:
    """Whether reading a value of `device` on the host costs nothing (the CPU) or stalls the device (the rest)."""
    return device.type == "cpu"


def attention_path(
    query: Tensor, value: Tensor, attention_mask: Tensor | None, softcap: float | None, window: int | None = None
) -> str:
    """Which path computes this call exactly and fastest: "flex", "rows", "fused" or "blocks".

    Plain causal attention (transformers' sdpa mask function returns no mask then: no padding, no sliding window
    shorter than T) without a logit softcap takes, on CUDA, the compiled flex path (`capture.flex`) where this
    torch has it; on the CPU the fused path beyond `ROWS_UP_TO_SEQ_LEN` tokens where that is exact (equal q and
    v head sizes, as the CPU flash kernel needs); the rows path otherwise. On CUDA a sliding-window layer (its
    `window`, transformers' `sliding_window`) takes the flex path with the window too, when the forward pass was
    given no attention mask (`padding_free_forwards`: its mask is then the window's alone). Everything else takes
    the block path."""
    on_flex = query.device.type == "cuda" and flex.available() and not _flex_failed
    if softcap is not None:
        return "blocks"
    if attention_mask is not None:
        return "flex" if on_flex and window is not None and _padding_free else "blocks"
    if on_flex:
        return "flex"
    flash_ok = query.shape[-1] == value.shape[-1] and query.device.type == "cpu" and value.device.type == "cpu"
    return "fused" if flash_ok and query.shape[-2] > ROWS_UP_TO_SEQ_LEN else "rows"


_flex_failed = False  # set once when the compiled flex kernels cannot run in this process
_padding_free = False  # whether the forward pass in progress was given no attention mask (padding_free_forwards)


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


def row_attention(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, AttentionReadout]:
    """Plain causal attention and its `AttentionReadout` from query blocks of whole rows; the output is (B, T, H, Dv).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, ·) (GQA: query head h reads kv head `h // (H // KV)`). Per
    block of queries, over the keys up to its last query: logits `S[t,j] = s q_t·k_j`, `P = softmax(S)` (the
    block's upper-right corner masked), output `P·V`; then `A[t,0]`, `A[t,t]`, `A[t,t−1]` are entries of P, the
    column sums gather `c_k += Σ_t P[t,k]`, and the entropy is `H_t = lse_t − Σ_j P[t,j] S[t,j]` with
    `lse_t = S[t,j] − log P[t,j]`, exact for any j with `P[t,j] > 0`; j is whichever of 0 and t has the larger
    probability (its logarithm is then well conditioned), and a block where both are below `1e-30` in some row
    takes `lse = logsumexp(S)` instead. Off the CPU every block takes `logsumexp` (an extra pass over a block in
    device memory costs less than reading a flag on the host, which would stall the device once per block).
    """
    B, H, T, D = query.shape
    KV, Dv = key.shape[1], value.shape[-1]
    group = H // KV
    keys, values = key.float(), value.float()
    out = torch.empty(B, T, H, Dv, dtype=query.dtype, device=query.device)
    f32 = dict(dtype=torch.float32, device=query.device)
    sink, diag, prev, norms = (torch.zeros(B, H, T, **f32) for _ in range(4))
    columns = torch.zeros(B, H, T, dtype=torch.float64, device=query.device)
    entropy = torch.zeros(B, H, dtype=torch.float64, device=query.device)
    weights = entropy_weights(0, T, query.device)
    floor = torch.finfo(torch.float32).min  # not −inf: P·S must stay 0 (not NaN) where P = 0
    step = block_rows(B, H, T, block_elements(query.device))
    host_reads_cheap = host_reads_are_cheap(query.device)
    above = torch.ones(step, step, dtype=torch.bool, device=query.device).triu(1)  # the corner's masked part
    for start in range(0, T, step):
        stop = min(T, start + step)
        Q = stop - start
        # Heads of a group side by side; the scale goes on q (Q·D products instead of Q·stop).
        q = (query[:, :, start:stop].float() * scaling).reshape(B, KV, group * Q, D)
        logits = torch.matmul(q, keys[:, :, :stop].transpose(-1, -2)).view(B, H, Q, stop)
        corner = logits[..., start:stop]
        corner.masked_fill_(above[:Q, :Q], floor)
        probs = torch.softmax(logits, -1)
        block = torch.matmul(probs.view(B, KV, group * Q, stop), values[:, :, :stop]).view(B, H, Q, Dv)
        p_sink, p_diag = probs[..., 0], probs[..., start:stop].diagonal(dim1=-2, dim2=-1)
        sink[..., start:stop], diag[..., start:stop] = p_sink, p_diag
        lower = probs[..., max(start - 1, 0) : stop].diagonal(offset=-1 if start == 0 else 0, dim1=-2, dim2=-1)
        prev[..., max(start, 1) : stop] = lower
        columns[..., :stop] += probs.sum(-2)
        use_sink = p_sink >= p_diag
        best = torch.where(use_sink, p_sink, p_diag)
        if not host_reads_cheap or bool((best < 1e-30).any()):
            lse = torch.logsumexp(logits, -1)
        else:
            best_logit = torch.where(use_sink, logits[..., 0], corner.diagonal(dim1=-2, dim2=-1))
            lse = best_logit - best.log()
        row_entropy = lse.double() - torch.linalg.vecdot(probs, logits).double()
        entropy += (row_entropy * weights[start:stop]).sum(-1)
        norms[..., start:stop] = block.norm(dim=-1)
        out[:, start:stop] = block.transpose(1, 2).to(out.dtype)
    return out, AttentionReadout(sink=sink, diag=diag, prev=prev, columns=columns, entropy=entropy, out_norms=norms)


def _flash(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, Tensor]:
    """Causal attention output (B, H, T, Dv) and row log-normaliser `lse` (B, H, T) from the fused CPU kernel."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        query, key, value, 0.0, True, attn_mask=None, scale=scaling
    )
    return out, lse


def fused_attention(query: Tensor, key: Tensor, value: Tensor, scaling: float) -> tuple[Tensor, AttentionReadout]:
    """Plain causal attention and its `AttentionReadout`, in two fused kernel calls; the output is (B, T, H, Dv).

    `query` (B, H, T, D), `key`/`value` (B, KV, T, D) (GQA: query head h reads kv head `h // (H // KV)`).
    With logits `S[t,j] = s q_t·k_j` and the first call's `lse_t`:
    - `A[t,j] = exp(S[t,j] − lse_t)` for j = 0, t, t−1 (O(T·d));
    - the second call attends from keys to queries, in reversed order so that `t ≥ k` is an ordinary causal
      mask: queries `[k_k, 1]`, keys `[q_t, −lse_t/s]`, scale s, so its logits are `S[t,k] − lse_t` and its
      log-normaliser is `log c_k`; its values `[w_t q_t, 0]` (`w_t = 1/log(t+1)`, `w_0 = 0`) make its output
      `Σ_t A[t,k] w_t q_t / c_k`, hence `Σ_k c_k s k_k·out_k = Σ_t w_t Σ_j A[t,j] S[t,j]`, and the entropy sum
      `Σ_t w_t H_t = Σ_t w_t lse_t − Σ_t w_t Σ_j A[t,j] S[t,j]` (as `H_t = lse_t − Σ_j A[t,j] S[t,j]`).
    """
    B, H, T, D = query.shape
    group = H // key.shape[1]
    q = query.float()
    k = key.float().repeat_interleave(group, dim=1)  # (B, H, T, D): the kernel has no GQA of its own
    out, lse = _flash(q, k, value.float().repeat_interleave(group, dim=1), scaling)  # (B, H, T, D), (B, H, T)

    def entries(keys: Tensor, rows: slice) -> Tensor:  # A[t, j(t)] for the key j(t) of each row t in `rows`
        return torch.exp(scaling * (q[:, :, rows] * keys).sum(-1) - lse[:, :, rows])

    prev = torch.zeros_like(lse)
    prev[..., 1:] = entries(k[:, :, :-1], slice(1, None))
    weights = entropy_weights(0, T, q.device)
    reverse = lambda x: x.flip(2)  # noqa: E731  (B, H, T, ·) in reversed sequence order
    ones = q.new_ones(B, H, T, 1)
    # Zero columns up to a multiple of 8 change no dot product; the kernel runs faster on such head sizes
    # (one call, 9 heads, T = 1024, 1 thread, best of 5 on the shared machine: 0.128 s at 72, 0.142 s at 65).
    zeros = q.new_zeros(B, H, T, -(D + 1) % 8)
    mixed, log_columns = _flash(
        reverse(torch.cat([k, ones, zeros], -1)),
        reverse(torch.cat([q, lse.unsqueeze(-1) / -scaling, zeros], -1)),
        reverse(torch.cat([q * weights.float().view(T, 1), torch.zeros_like(ones), zeros], -1)),
        scaling,
    )
    columns = reverse(log_columns).double().exp()  # (B, H, T): c_k
    mass_logits = scaling * (k * reverse(mixed)[..., :D]).sum(-1)  # Σ_t A[t,k] w_t S[t,k] / c_k
    entropy = (lse.double() * weights).sum(-1) - (columns * mass_logits.double()).sum(-1)
    rows = AttentionReadout(
        sink=entries(k[:, :, :1], slice(None)),
        diag=entries(k, slice(None)),
        prev=prev,
        columns=columns,
        entropy=entropy,
        out_norms=out.norm(dim=-1),
    )
    return out.transpose(1, 2).to(query.dtype).contiguous(), rows


def _layer_rows(
    path: str, query: Tensor, key: Tensor, value: Tensor, scaling: float, window: int | None = None
) -> tuple[Tensor, AttentionReadout | PackedReadout] | None:
    """Output and `AttentionReadout` (packed on the flex path) by `path` ("flex", "rows" or "fused"; `window` for a
    sliding-window layer on the flex path); where the compiled flex kernels cannot run here (no Triton, an
    unsupported head size), one warning and the rows path for the rest of the process, or None for a layer whose
    window is shorter than T (the block path then takes it)."""
    global _flex_failed
    if path == "flex":
        try:
            return flex.flex_parts(query, key, value, scaling, window)
        except torch.OutOfMemoryError:
            raise
        except Exception as error:  # compilation errors come in many types (dynamo, inductor, Triton)
            _flex_failed = True
            flex.warn_fallback(error)
            if window is not None and window < query.shape[-2]:
                return None
            path = "rows"
    return (row_attention if path == "rows" else fused_attention)(query, key, value, scaling)


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
    if kwargs.get("s_aux") is not None:  # a learned sink (gpt-oss), which sdpa lacks: its own block path
        if watch is not None:
            watch.on_values(watch.layer, value)

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
    computed = _layer_rows(path, query, key, value, scaling, window) if path != "blocks" else None
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
