"""Named float64 tensors that merge by sum (or by max): the streaming state of a run (STYLE practice 7).

Their size depends on the model and T only, never on the number of windows, so a run over any corpus holds
constant memory; two accumulators over disjoint windows merge into the accumulator of their union, which is
what data-parallel ranks and resumed runs rely on.
"""

from __future__ import annotations

from pathlib import Path

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

    def merge(self, other: Accumulator) -> None:
        """Fold another accumulator over disjoint windows into this one."""
        for name, tensor in other.tensors.items():
            self.add(name, (...,), tensor)

    def all_reduce(self) -> None:
        """Combine the accumulators of every `torch.distributed` rank in place (sum / max)."""
        import torch.distributed as dist

        for name, tensor in self.tensors.items():
            op = dist.ReduceOp.MAX if name in self.maxima else dist.ReduceOp.SUM
            dist.all_reduce(tensor, op=op)

    def save(self, path: Path) -> None:
        """Write to a safetensors file atomically (temp file, then rename)."""
        from safetensors.torch import save_file

        tmp = path.with_suffix(path.suffix + ".tmp")
        save_file({k: v.contiguous().cpu() for k, v in self.tensors.items()}, str(tmp))
        tmp.replace(path)

    def load(self, path: Path) -> None:
        """Replace the state with one saved by `save` (shapes must match)."""
        from safetensors.torch import load_file

        saved = load_file(str(path))
        for name, tensor in self.tensors.items():
            if saved[name].shape != tensor.shape:
                raise ValueError(f"checkpoint {path}: {name} has shape {tuple(saved[name].shape)}")
            tensor.copy_(saved[name])
