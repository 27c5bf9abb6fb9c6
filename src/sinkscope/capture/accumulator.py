"""Named float64 tensors that merge by sum (or by max): the streaming state of a run (STYLE practice 7).

Their size depends on the model and T only, never on the number of windows, so a run over any corpus holds
constant memory; accumulators over disjoint windows combine (sum or max) into the accumulator of their union,
which is what data-parallel ranks rely on.
"""

from __future__ import annotations

import torch
from torch import Tensor


class Accumulator:
    """A dict of float64 tensors; names in `maxima` merge by elementwise max, the rest by sum."""

    def __init__(
        self,
        shapes: dict[str, tuple[int, ...]],
        maxima: frozenset[str] = frozenset(),
        device: torch.device | str = "cpu",
    ) -> None:
        self.maxima = maxima
        self.tensors: dict[str, Tensor] = {
            name: torch.full(shape, -torch.inf if name in maxima else 0.0, dtype=torch.float64, device=device)
            for name, shape in shapes.items()
        }

    def add(self, name: str, index: tuple, value: Tensor) -> None:
        """Fold `value` into `tensors[name][index]` (sum, or max for a maximum)."""
        target = self.tensors[name]
        value = value.detach().to(device=target.device, dtype=torch.float64)
        if name in self.maxima:
            target[index] = torch.maximum(target[index], value)
        else:
            target[index] += value

    def all_reduce(self) -> None:
        """Combine the accumulators of every `torch.distributed` rank in place (sum / max)."""
        import torch.distributed as dist

        for name, tensor in self.tensors.items():
            op = dist.ReduceOp.MAX if name in self.maxima else dist.ReduceOp.SUM
            dist.all_reduce(tensor, op=op)
