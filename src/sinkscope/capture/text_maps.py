"""The one capture of one text: every head's attention map, each layer's inputs and the value norms, from a single
plain eager `transformers` forward pass. `sinkscope.attention` (Python arrays) and `sinkscope view` (the page) are
both built on `capture_text`, so what the page shows and what Python returns come from the same tensors.

The text is tokenized the way `sinkscope.corpus.windows` cuts a window (docs/statistics.md): documents tokenized
without special tokens, joined with the EOS id, prefixed with the BOS id, so `view --file F --seq-len N` shows the
first window `analyze --corpus F --seq-len N` analyses.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import Tensor

from sinkscope.capture.layer_inputs import layer_input_hooks
from sinkscope.corpus.document_tokens import corpus_tokens
from sinkscope.corpus.windows import default_bos_id
from sinkscope.errors import SinkscopeError
from sinkscope.models.families import attention_module, softmax_layers
from sinkscope.models.load import LoadedModel
from sinkscope.models.weight_maps import projection_channels

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
    eos = tokenizer.eos_token_id
    body: list[int] = []
    for index, doc in enumerate(documents):
        if index and eos is not None:
            body.append(int(eos))
        body.extend(tokenizer(doc, add_special_tokens=False)["input_ids"])
    return _bos_window(tokenizer, body, seq_len, bos_id)


def file_ids(tokenizer, path: str | Path, seq_len: int | None = None, bos_id: int | None = None) -> Tensor:
    """`text_ids` of a text file's documents, read and tokenized only as far as the window needs: the file's token
    stream is the one `corpus.windows` cuts (`corpus_tokens`: chunked reading, each document tokenized in windows,
    equal to tokenizing it whole), so memory stays bounded by `seq_len` (or `MAX_TOKENS`), not by the file."""
    check_length(seq_len)
    limit = MAX_TOKENS if seq_len is None else seq_len - 1
    body: list[int] = []
    for piece in corpus_tokens(str(path), tokenizer):
        body.extend(piece)
        if len(body) > limit:  # one token past what the window keeps: enough to cut, or to know it is too long
            break
    return _bos_window(tokenizer, body, seq_len, bos_id)


def _bos_window(tokenizer, body: list[int], seq_len: int | None, bos_id: int | None) -> Tensor:
    """BOS + `body` cut to `seq_len` tokens in all; `seq_len=None`: all of it, refused beyond `MAX_TOKENS`."""
    bos = default_bos_id(tokenizer) if bos_id is None else bos_id
    if not body:
        raise SinkscopeError("the text is empty: pass --text with some words or a --file that holds text")
    if seq_len is None and len(body) + 1 > MAX_TOKENS:
        raise SinkscopeError(
            f"the text has more than {MAX_TOKENS} tokens with BOS, the most a page embeds: pass --seq-len N "
            f"(≤ {MAX_TOKENS}) to keep the first N"
        )
    limit = len(body) if seq_len is None else seq_len - 1
    return torch.tensor([bos, *body[:limit]], dtype=torch.long)


@dataclass
class TextCapture:
    """One forward pass over one text.

    `ids` (T,); `attn` (L, H, T, T) float32: every head's causal attention as `transformers` returns it
    (`output_attentions=True` of the eager implementation; rows = queries, zero above the diagonal); `h`, `z`
    (L, T, d) float32: the residual stream entering each layer and the attention input after its norm
    (docs/theory/geometry.md); `value_norms` (L, H, T): `||v_j||` of the value vector each query head reads (a
    key/value head shared by a group of query heads gives each of them the same norms). A layer without a softmax
    map (Qwen3-Next's linear-attention layers, `models.families.softmax_layers`) has NaN maps and value norms.
    """

    ids: Tensor
    attn: Tensor
    h: Tensor
    z: Tensor
    value_norms: Tensor


@torch.no_grad()
def capture_text(lm: LoadedModel, ids: Tensor) -> TextCapture:
    """Every layer's attention maps, inputs and value norms for one sequence `ids` (T,), in one forward pass.

    The maps are the model's own eager attention (`output_attentions=True`; the attention implementation is set
    back afterwards); `h`, `z` come from `capture.layer_inputs` hooks; the values are the value channels of each
    layer's value projection output (`models.weight_maps.projection_channels`), reshaped (T, KV, head_dim).
    """
    limit = lm.max_positions
    T = ids.shape[0]
    if limit is not None and T > limit:
        raise SinkscopeError(f"{T} tokens exceed the model's context of {limit}; pass --seq-len ≤ {limit}")
    layout, family = lm.layout, lm.family
    L = len(lm.layers)
    h: list[Tensor | None] = [None] * L
    z: list[Tensor | None] = [None] * L
    softmax = softmax_layers(family, lm.layers)
    value_norms = torch.full((L, layout.n_heads, T), torch.nan)
    channels = projection_channels(family, layout, "v")

    def on_inputs(layer: int, h_l: Tensor, z_l: Tensor) -> None:
        h[layer], z[layer] = h_l[0].float().cpu(), z_l[0].float().cpu()

    def value_hook(layer: int):
        def hook(_module, _args, output) -> None:
            out = output[0] if isinstance(output, tuple) else output  # (B, T, channels)
            values = out[0, :, channels.to(out.device)].float().cpu().view(T, layout.n_kv_heads, layout.head_dim)
            norms = values.norm(dim=-1).T  # (KV, T)
            value_norms[layer] = norms.repeat_interleave(layout.group, dim=0)

        return hook

    handles = [
        getattr(attention_module(family, lm.layers[index]), family.value_proj).register_forward_hook(value_hook(index))
        for index in softmax
    ]
    previous = lm.model.config._attn_implementation
    try:
        lm.model.set_attn_implementation("eager")
        with layer_input_hooks(lm, on_inputs):
            out = lm.base(input_ids=ids[None].to(lm.device), output_attentions=True, use_cache=False)
    finally:
        lm.model.set_attn_implementation(previous)
        for handle in handles:
            handle.remove()
    attn = torch.full((L, layout.n_heads, T, T), torch.nan)  # NaN: a layer without a softmax map
    attn[softmax] = torch.stack([layer[0].float().cpu() for layer in out.attentions if layer is not None])
    return TextCapture(ids=ids, attn=attn, h=torch.stack(h), z=torch.stack(z), value_norms=value_norms)
