"""The ablations' loss passes: the mean next-token loss per window (`window_losses`), and ablated passes that start
at the first edited layer, the layers below it replayed from the clean pass.

A head ablation edits only its own layers' output projections, and a decoder layer hands the next one only its
output (the residual stream), so below the first edited layer l every ablated pass of a window computes exactly
what the clean pass computed. `clean_pass` runs the clean model once per batch, keeping its losses and every
layer's output; inside `replayed_below(lm, outputs, l)` layers 0 … l − 1 do not run: each returns the clean output
of layer l − 1, and layers l … L − 1, the final norm and the head run on the same input as in a full pass, so the
losses are those of the full pass, bit for bit (the same batch, the same kernels).

The outputs cost L · B · T · d floats per batch; above `REPLAY_BYTES` in all none are kept and every pass runs whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from sinkscope.models.load import LoadedModel

REPLAY_BYTES = 512 * 2**20  # the most memory the clean outputs of every layer may take (all batches together)


@torch.no_grad()
def window_losses(lm: LoadedModel, batches: Sequence[Tensor]) -> np.ndarray:
    """Mean next-token cross-entropy (nats) of each window, shape (n_windows,).

    batches: LongTensor[B, T] token ids; position t's logits predict token t+1, so T-1 targets per window.
    Runs the full causal LM (`lm.model`) with whatever hooks are active.
    """
    losses = []
    for ids in batches:
        ids = ids.to(lm.device)
        logits = lm.model(input_ids=ids, use_cache=False).logits  # (B, T, V)
        ce = F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten(), reduction="none")
        losses.append(ce.view(ids.shape[0], -1).mean(1).cpu())
    return torch.cat(losses).double().numpy()


@dataclass
class CleanPass:
    """The clean model on a list of batches: `losses` (n_windows,) the mean next-token cross-entropy per window,
    and `outputs[b][l]` what decoder layer l returned on batch b (empty when over `REPLAY_BYTES`)."""

    losses: np.ndarray
    outputs: list[dict[int, Any]] = field(default_factory=list)

    def of_batch(self, index: int) -> dict[int, Any] | None:
        """Batch `index`'s layer outputs, or None when none were kept."""
        return self.outputs[index] if self.outputs else None


def first_edited_layer(layers: Iterable[int]) -> int:
    """The lowest layer an intervention edits (0 when it edits none: nothing below it is replayed then)."""
    return min(layers, default=0)


@torch.no_grad()
def clean_pass(lm: LoadedModel, batches: Sequence[Tensor]) -> CleanPass:
    """`window_losses` of the clean model, keeping every decoder layer's output per batch when they fit in
    `REPLAY_BYTES` (B · T · d_model floats per layer and batch)."""
    needed = sum(ids.numel() for ids in batches) * lm.layout.d_model * lm.model.dtype.itemsize * len(lm.layers)
    if needed > REPLAY_BYTES:
        return CleanPass(window_losses(lm, batches))
    outputs: list[dict[int, Any]] = []
    losses = []
    for ids in batches:
        kept: dict[int, Any] = {}
        handles = [block.register_forward_hook(_keeper(kept, index)) for index, block in enumerate(lm.layers)]
        try:
            losses.append(window_losses(lm, [ids]))
        finally:
            for handle in handles:
                handle.remove()
        outputs.append(kept)
    return CleanPass(np.concatenate(losses), outputs)


def _keeper(kept: dict[int, Any], index: int):
    def hook(_module, _args, output) -> None:
        kept[index] = output

    return hook


@contextmanager
def replayed_below(lm: LoadedModel, outputs: dict[int, Any] | None, first: int) -> Iterator[None]:
    """Inside the block, decoder layers 0 … `first` − 1 do not run: each returns `outputs[first − 1]` (one batch's
    clean output of that layer), which only layer `first` reads. Nothing changes when `first` is 0 or `outputs` is
    empty or None. The layers' own `forward` comes back in `finally`."""
    if first <= 0 or not outputs:
        yield
        return
    recorded = outputs[first - 1]
    blocks = lm.layers[:first]
    own = [block.__dict__.get("forward") for block in blocks]  # an instance-level forward someone else set, if any
    try:
        for block in blocks:
            block.forward = lambda *_args, **_kwargs: recorded
        yield
    finally:
        for block, forward in zip(blocks, own):
            if forward is None:
                del block.forward
            else:
                block.forward = forward


def replayed_losses(lm: LoadedModel, batches: Sequence[Tensor], clean: CleanPass, first: Sequence[int]) -> np.ndarray:
    """Mean next-token cross-entropy per window (n_windows,) with whatever hooks are active, batch b's layers below
    `first[b]` replayed from `clean` (`replayed_below`)."""
    out = []
    for index, ids in enumerate(batches):
        with replayed_below(lm, clean.of_batch(index), first[index]):
            out.append(window_losses(lm, [ids]))
    return np.concatenate(out)
