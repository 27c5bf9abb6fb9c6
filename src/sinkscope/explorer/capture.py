"""Run a model once on one BOS-prefixed text and keep every head's attention map and each layer's inputs.

The text is tokenized the way `sinkscope.corpus.windows` cuts a window (SPEC §1): documents tokenized without
special tokens, joined with the EOS id, prefixed with the BOS id, so `view --file F --seq-len N` shows the first
window `analyze --corpus F --seq-len N` analyses. Attention comes from the same capture path as `analyze`
(`sinkscope.capture.attention.watch_attention`), which equals the model's eager attention.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch
from torch import Tensor

from sinkscope.capture.attention import watch_attention
from sinkscope.capture.layer_inputs import layer_input_hooks
from sinkscope.corpus.windows import default_bos_id
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module
from sinkscope.models.load import LoadedModel

# Beyond this the embedded maps (L·H·T²/2 entries) stop being a page a browser opens quickly.
MAX_TOKENS = 1024


def check_length(seq_len: int | None) -> None:
    """A clear error for a `--seq-len` the page cannot hold, before any model is loaded."""
    if seq_len is not None and not 2 <= seq_len <= MAX_TOKENS:
        raise SinkscopeError(f"--seq-len {seq_len} must lie in 2..{MAX_TOKENS} (BOS plus at least one token)")


def text_ids(tokenizer, documents: Iterable[str], seq_len: int | None = None, bos_id: int | None = None) -> Tensor:
    """BOS id + the documents' tokens (EOS between documents), cut to `seq_len` tokens in all. → LongTensor[T].

    A text shorter than `seq_len` keeps all its tokens; `seq_len=None` keeps the whole text (at most
    `MAX_TOKENS`).
    """
    check_length(seq_len)
    bos = default_bos_id(tokenizer) if bos_id is None else bos_id
    eos = tokenizer.eos_token_id
    body: list[int] = []
    for index, doc in enumerate(documents):
        if index and eos is not None:
            body.append(int(eos))
        body.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
    if not body:
        raise SinkscopeError("the text is empty: pass --text with some words or a --file that holds text")
    if seq_len is None and len(body) + 1 > MAX_TOKENS:
        raise SinkscopeError(
            f"the text has {len(body) + 1} tokens with BOS; a page embeds at most {MAX_TOKENS}: pass --seq-len N "
            f"(≤ {MAX_TOKENS}) to keep the first N"
        )
    limit = len(body) if seq_len is None else seq_len - 1
    return torch.tensor([bos, *body[:limit]], dtype=torch.long)


@dataclass
class TextCapture:
    """One forward pass over one text.

    `attn` (L, H, T, T) float32: every head's causal attention (rows = queries); `h`, `z` (L, T, d) float32: the
    residual stream entering each layer and the attention input after its norm (SPEC §4); `value_norms`
    (L, H, T): `||v_j||` of each head's (GQA-shared) value vectors (SPEC §3).
    """

    ids: Tensor
    attn: Tensor
    h: Tensor
    z: Tensor
    value_norms: Tensor


@torch.no_grad()
def capture_text(lm: LoadedModel, ids: Tensor) -> TextCapture:
    """Every layer's attention maps, inputs and value norms for one sequence `ids` (T,)."""
    limit = lm.max_positions
    T = ids.shape[0]
    if limit is not None and T > limit:
        raise SinkscopeError(f"--seq-len {T} exceeds the model's context of {limit} tokens; use ≤ {limit}")
    blocks, layout = lm.layers, lm.layout
    L, H = len(blocks), layout.n_heads
    attn = torch.zeros(L, H, T, T)  # (L, H, T, T): blocks fill the causal part, the rest stays exactly 0
    value_norms = torch.zeros(L, H, T)
    h = [None] * L
    z = [None] * L

    def on_block(layer: int, start: int, probs: Tensor, _entropy: Tensor, _out: Tensor) -> None:
        Q, K = probs.shape[2], probs.shape[3]
        attn[layer, :, start : start + Q, :K] = probs[0].float().cpu()

    def on_values(layer: int, value: Tensor) -> None:
        norms = value[0].float().norm(dim=-1).cpu()  # (KV, T)
        value_norms[layer] = norms.repeat_interleave(layout.group, dim=0)

    def on_inputs(layer: int, h_l: Tensor, z_l: Tensor) -> None:
        h[layer], z[layer] = h_l[0].float().cpu(), z_l[0].float().cpu()

    modules = {index: attention_module(lm.family, block) for index, block in enumerate(blocks)}
    with layer_input_hooks(lm, on_inputs), watch_attention(lm.model, modules, on_block, on_values):
        lm.base(input_ids=ids[None].to(lm.device), use_cache=False)
    return TextCapture(ids=ids, attn=attn, h=torch.stack(h), z=torch.stack(z), value_norms=value_norms)
